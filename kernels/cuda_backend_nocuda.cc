// CreateCudaBackend for builds without the CUDA toolkit (--config=nocuda).

#include "absl/status/status.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& /*options*/) {
  return absl::UnimplementedError(
      "this binary was built without CUDA (--config=nocuda); use the CPU "
      "backend");
}

}  // namespace ps::kernels
