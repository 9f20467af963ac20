#ifndef PS_KERNELS_CPU_BACKEND_H_
#define PS_KERNELS_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace ps::kernels {

struct CpuBackendOptions {
  // Threads OpenBLAS may use for GEMM (>= 1). OpenBLAS keeps this setting per
  // process, so the last CPU backend created decides it. Element-wise ops run
  // on the calling thread.
  int num_threads = 1;
  // Freed blocks kept for reuse by the caching allocator.
  int64_t max_cached_bytes = int64_t{1} << 30;
};

// A backend on host memory: OpenBLAS sgemm for GEMM, loops over the shared
// math (kernels/*_math.h) for everything else. "Device" pointers are host
// pointers; work is synchronous. Errors: INVALID_ARGUMENT for bad options.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const CpuBackendOptions& options);

}  // namespace ps::kernels

#endif  // PS_KERNELS_CPU_BACKEND_H_
