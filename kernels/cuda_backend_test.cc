// The op suite, and the layer ops against the CPU backend, on a real GPU
// (tag requires-gpu). Where no GPU works, every case skips with the reason
// CreateCudaBackend gave.

#include "kernels/cuda_backend.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_test_suite.h"

namespace ps::kernels {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCuda() {
  return CreateCudaBackend({.allow_tf32 = false});
}

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOpsTest,
                         testing::Values(BackendFactory{
                             "cuda", &MakeCuda, /*skip_if_unavailable=*/true}),
                         BackendFactoryName);
INSTANTIATE_TEST_SUITE_P(Cuda, LayerOpsAgreeWithCpuTest,
                         testing::Values(BackendFactory{
                             "cuda", &MakeCuda, /*skip_if_unavailable=*/true}),
                         BackendFactoryName);

}  // namespace
}  // namespace ps::kernels
