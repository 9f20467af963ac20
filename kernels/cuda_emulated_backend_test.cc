// The CUDA backend's kernels (kernels/cuda_kernels.cuh) compiled as host code
// and run under the launch emulation: the full op suite, plus agreement with
// the CPU backend.

#include "kernels/cuda_emulated_backend.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_test_suite.h"
#include "kernels/backend_test_util.h"
#include "kernels/cpu_backend.h"

namespace ps::kernels {
namespace {

INSTANTIATE_TEST_SUITE_P(CudaEmulated, BackendOpsTest,
                         testing::Values(BackendFactory{
                             "cuda_emulated", &CreateCudaEmulatedBackend}),
                         BackendFactoryName);
INSTANTIATE_TEST_SUITE_P(CudaEmulated, LayerOpsAgreeWithCpuTest,
                         testing::Values(BackendFactory{
                             "cuda_emulated", &CreateCudaEmulatedBackend}),
                         BackendFactoryName);

std::vector<float> InitOn(Backend& b, Initializer kind, int64_t n) {
  absl::StatusOr<DeviceBuffer> buf = b.AllocateArray<float>(n);
  EXPECT_TRUE(buf.ok());
  EXPECT_TRUE(b.Initialize(kind, 7, 31, 17, buf->Span<float>(n)).ok());
  std::vector<float> host(static_cast<size_t>(n));
  EXPECT_TRUE(b.CopyToHost(buf->data(), host.data(), n * 4).ok());
  return host;
}

TEST(CudaEmulatedBackend, InitializersMatchTheCpuBackendBitForBit) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend({});
  absl::StatusOr<std::unique_ptr<Backend>> emu = CreateCudaEmulatedBackend();
  ASSERT_TRUE(cpu.ok() && emu.ok());
  // 5000 elements: more than one grid-stride block.
  for (Initializer kind :
       {Initializer::kHeUniform, Initializer::kHeNormal,
        Initializer::kXavierUniform, Initializer::kXavierNormal}) {
    EXPECT_EQ(InitOn(**cpu, kind, 5000), InitOn(**emu, kind, 5000));
  }
}

// The CUDA kernels cannot see the bags' ids from the host: an id outside the
// rows makes its bag NaN in the forward pass and is skipped in the backward
// pass; offsets outside [0, nnz] are clamped. Nothing is read or written out
// of bounds (the sanitizer builds run this).
TEST(CudaEmulatedBackend, OutOfRangeBagIdsGiveNanAndAreSkipped) {
  absl::StatusOr<std::unique_ptr<Backend>> emu = CreateCudaEmulatedBackend();
  ASSERT_TRUE(emu.ok());
  Backend& b = **emu;
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // 3 rows of 2
  const std::vector<int32_t> indices = {0, 7, 2, -1, 1};
  const std::vector<int32_t> offsets = {0, 2, 3, 9};  // last bag: [3, 5)
  DeviceBuffer drows = ToDevice(b, rows), dindices = ToDevice(b, indices),
               doffsets = ToDevice(b, offsets);
  DeviceBuffer out = Zeros<float>(b, 6);
  ASSERT_OK(b.EmbeddingBagForward(
      EmbeddingBagMode::kSum, drows.Matrix<float>(3, 2),
      dindices.Span<int32_t>(5), doffsets.Span<int32_t>(4), std::nullopt,
      out.Matrix<float>(3, 2)));
  const std::vector<float> got = ToHost<float>(b, out, 6);
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));  // has id 7
  EXPECT_EQ(got[2], 5.0f);                                // row 2
  EXPECT_EQ(got[3], 6.0f);
  EXPECT_TRUE(std::isnan(got[4]) && std::isnan(got[5]));  // has id -1
  DeviceBuffer dout = ToDevice(b, std::vector<float>(6, 1.0f));
  DeviceBuffer grad = Zeros<float>(b, 6);
  ASSERT_OK(b.EmbeddingBagBackward(
      EmbeddingBagMode::kSum, dindices.Span<int32_t>(5),
      doffsets.Span<int32_t>(4), std::nullopt, dout.Matrix<float>(3, 2),
      grad.Matrix<float>(3, 2)));
  EXPECT_EQ(ToHost<float>(b, grad, 6),
            (std::vector<float>{1, 1, 1, 1, 1, 1}));  // rows 0, 2, 1 once each
}

}  // namespace
}  // namespace ps::kernels
