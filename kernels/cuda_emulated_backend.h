#ifndef PS_KERNELS_CUDA_EMULATED_BACKEND_H_
#define PS_KERNELS_CUDA_EMULATED_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace ps::kernels {

// Test-only: the CUDA backend's own kernels and launch helpers
// (kernels/cuda_kernels.cuh), compiled as host code and run under the launch
// emulation of kernels/cuda_emulation.h, on host memory. GEMM, which the real
// backend hands to cuBLAS, goes to OpenBLAS here. Launch errors the emulation
// records (bad grid/block, barrier divergence) come back as INTERNAL.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaEmulatedBackend();

}  // namespace ps::kernels

#endif  // PS_KERNELS_CUDA_EMULATED_BACKEND_H_
