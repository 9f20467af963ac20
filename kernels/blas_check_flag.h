// The --blas_check flag of every main() that uses BLAS (ps_worker and the
// benchmarks that train), declared once, and the start-up check it drives
// (blas_check.h).
#ifndef PS_KERNELS_BLAS_CHECK_FLAG_H_
#define PS_KERNELS_BLAS_CHECK_FLAG_H_

#include "kernels/blas_check.h"

namespace ps::kernels {

// RunBlasStartupCheck as --blas_check says, for the process main() started
// with `argv` (it may restart it); `coretype` and `restarted_from` are the
// values of kBlasCoreTypeVariable and kBlasRestartMarker as main() read
// them (null: unset). Call first after absl::ParseCommandLine.
BlasStartupResult RunBlasStartupCheckAsFlagged(char** argv,
                                               const char* coretype,
                                               const char* restarted_from);

}  // namespace ps::kernels

#endif  // PS_KERNELS_BLAS_CHECK_FLAG_H_
