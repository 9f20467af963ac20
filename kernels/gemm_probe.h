// A short GEMM measurement of a backend, for a worker to report when it
// registers: a device (or BLAS core) several times slower than its peers
// shows up before it becomes the job's straggler.
#ifndef PS_KERNELS_GEMM_PROBE_H_
#define PS_KERNELS_GEMM_PROBE_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/backend.h"

namespace ps::kernels {

struct GemmProbeOptions {
  int n = 512;  // C[n,n] = A[n,n] B[n,n], fp32
  // Timed calls stop once this much time has gone by (after at least
  // `min_calls`); one untimed warm-up call comes first.
  absl::Duration budget = absl::Milliseconds(100);
  int min_calls = 3;
};

// GFLOP/s of the backend's Gemm: the best of the timed calls (the least
// disturbed by other processes), each synchronised. Uses the backend's
// thread settings as they are. Errors: INVALID_ARGUMENT for bad options, the
// backend's errors, INTERNAL if the product is wrong (a broken BLAS).
absl::StatusOr<double> ProbeGemmGflops(Backend& backend,
                                       const GemmProbeOptions& options = {});

}  // namespace ps::kernels

#endif  // PS_KERNELS_GEMM_PROBE_H_
