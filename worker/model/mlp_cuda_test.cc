// The Mlp on a real GPU against the CPU backend (tag requires-gpu). Where no
// GPU works, the case skips with the reason CreateCudaBackend gave.

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "worker/model/mlp.h"

namespace ps::worker::model {
namespace {

// One training step of the same MLP on CUDA and on the CPU agrees.
TEST(MlpOnCuda, StepMatchesCpu) {
  absl::StatusOr<std::unique_ptr<kernels::Backend>> cuda =
      kernels::CreateCudaBackend({.allow_tf32 = false});
  if (!cuda.ok()) GTEST_SKIP() << "no usable GPU: " << cuda.status();
  absl::StatusOr<std::unique_ptr<kernels::Backend>> cpu =
      kernels::CreateCpuBackend({});
  ASSERT_TRUE(cpu.ok());
  const MlpOptions options{.layer_sizes = {20, 16, 5}};
  auto on_gpu = Mlp::Create(cuda->get(), options);
  auto on_cpu = Mlp::Create(cpu->get(), options);
  ASSERT_TRUE(on_gpu.ok() && on_cpu.ok());
  ASSERT_TRUE((*on_gpu)->InitializeParameters(3).ok());
  ASSERT_TRUE((*on_cpu)->InitializeParameters(3).ok());
  std::vector<float> images(8 * 20);
  for (size_t i = 0; i < images.size(); ++i) images[i] = (i % 13) / 13.0f;
  const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 0, 1, 2};
  absl::StatusOr<float> gpu_loss = (*on_gpu)->TrainStep(images, labels);
  absl::StatusOr<float> cpu_loss = (*on_cpu)->TrainStep(images, labels);
  ASSERT_TRUE(gpu_loss.ok()) << gpu_loss.status();
  ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
  EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-5);
  for (int i = 0; i < (*on_cpu)->num_parameters(); ++i) {
    const int64_t n = (*on_cpu)->parameters()[i].size;
    std::vector<float> g(n), c(n);
    ASSERT_TRUE((*on_gpu)->GetGradient(i, absl::MakeSpan(g)).ok());
    ASSERT_TRUE((*on_cpu)->GetGradient(i, absl::MakeSpan(c)).ok());
    for (int64_t j = 0; j < n; ++j)
      EXPECT_NEAR(g[j], c[j], 1e-5 + 1e-4 * std::abs(c[j]));
  }
}

}  // namespace
}  // namespace ps::worker::model
