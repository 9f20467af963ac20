#ifndef PS_KERNELS_CUDA_BACKEND_H_
#define PS_KERNELS_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace ps::kernels {

struct CudaBackendOptions {
  // CUDA device ordinal.
  int device = 0;
  // Let cuBLAS use TF32 tensor cores for fp32 GEMM (about 10 mantissa bits of
  // product precision; Ampere and newer).
  bool allow_tf32 = false;
  // Freed device blocks kept for reuse by the caching allocator.
  int64_t max_cached_bytes = int64_t{4} << 30;
  // Pinned host buffer through which host<->device copies are staged.
  int64_t staging_bytes = int64_t{8} << 20;
  // cuBLAS workspace (cublasSetWorkspace).
  int64_t cublas_workspace_bytes = int64_t{32} << 20;
};

// A backend on one CUDA device: cuBLAS (cublasGemmEx) for GEMM, the kernels
// of kernels/cuda_kernels.cuh for the rest, all on one non-blocking stream
// owned by the backend's device context (stream, cuBLAS handle and workspace,
// pinned staging buffer; released on destruction). Device memory comes from a
// caching allocator over cudaMalloc.
//
// Errors: FAILED_PRECONDITION when no usable device or driver is present
// (the CUDA error text is in the message), INVALID_ARGUMENT for a device
// ordinal out of range, UNIMPLEMENTED in builds with --config=nocuda; later
// CUDA/cuBLAS failures become INTERNAL (RESOURCE_EXHAUSTED when out of
// memory) with the library's error text. Never aborts.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options);

}  // namespace ps::kernels

#endif  // PS_KERNELS_CUDA_BACKEND_H_
