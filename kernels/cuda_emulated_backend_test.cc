// The CUDA backend's kernels (kernels/cuda_kernels.cuh) compiled as host code
// and run under the launch emulation: the full op suite, plus agreement with
// the CPU backend.

#include "kernels/cuda_emulated_backend.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_test_suite.h"
#include "kernels/cpu_backend.h"

namespace ps::kernels {
namespace {

INSTANTIATE_TEST_SUITE_P(CudaEmulated, BackendOpsTest,
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

}  // namespace
}  // namespace ps::kernels
