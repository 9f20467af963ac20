#include "kernels/blas_check_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(bool, blas_check, true,
          "At start-up, check the kernels OpenBLAS chose against the CPU: "
          "where it fell back to a generic core on a CPU that has better "
          "(OpenBLAS 0.3.21 on CPUs newer than it), restart once with "
          "OPENBLAS_CORETYPE set to the core that fits. A user-set "
          "OPENBLAS_CORETYPE is kept. false: keep OpenBLAS's choice.");

namespace ps::kernels {

BlasStartupResult RunBlasStartupCheckAsFlagged(char** argv,
                                               const char* coretype,
                                               const char* restarted_from) {
  return RunBlasStartupCheck(absl::GetFlag(FLAGS_blas_check),
                             MakeBlasCheckEnv(coretype, restarted_from), argv);
}

}  // namespace ps::kernels
