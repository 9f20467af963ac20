// Runs on every machine: without a GPU (or in a --config=nocuda build),
// creating the CUDA backend returns a status that says why; it never aborts.

#include "gtest/gtest.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels {
namespace {

TEST(CudaBackendFactory, ReturnsABackendOrAClearError) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend({});
  if (backend.ok()) {
    EXPECT_EQ((*backend)->Name(), "cuda:0");
    return;
  }
  const absl::StatusCode code = backend.status().code();
  EXPECT_TRUE(code == absl::StatusCode::kFailedPrecondition ||
              code == absl::StatusCode::kUnimplemented)
      << backend.status();
  EXPECT_FALSE(backend.status().message().empty());
}

TEST(CudaBackendFactory, RejectsBadOptions) {
  EXPECT_EQ(CreateCudaBackend({.staging_bytes = 0}).status().code() ==
                absl::StatusCode::kOk,
            false);
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateCudaBackend({.device = 1 << 20});
  EXPECT_FALSE(backend.ok());
}

}  // namespace
}  // namespace ps::kernels
