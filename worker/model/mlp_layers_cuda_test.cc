// The MLP shorthand through the layer model on a real GPU against the CPU
// backend (tag requires-gpu). Where no GPU works, the case skips with the
// reason CreateCudaBackend gave.

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker::model {
namespace {

// One training step of the same MLP on CUDA and on the CPU agrees, unsplit
// and with the first layer in row blocks.
TEST(MlpLayersOnCuda, StepMatchesCpu) {
  absl::StatusOr<std::unique_ptr<kernels::Backend>> cuda =
      kernels::CreateCudaBackend({.allow_tf32 = false});
  if (!cuda.ok()) GTEST_SKIP() << "no usable GPU: " << cuda.status();
  absl::StatusOr<std::unique_ptr<kernels::Backend>> cpu =
      kernels::CreateCpuBackend({});
  ASSERT_TRUE(cpu.ok());
  const ModelSpec spec = MlpOf({20, 16, 5});
  auto on_gpu = CreateLayerModel(spec, 20, cuda->get());
  auto on_cpu = CreateLayerModel(spec, 20, cpu->get());
  ASSERT_TRUE(on_gpu.ok() && on_cpu.ok());
  InitializeMlp(cuda->get(), on_gpu->get(), RELU, 3);
  InitializeMlp(cpu->get(), on_cpu->get(), RELU, 3);
  std::vector<float> images(8 * 20);
  for (size_t i = 0; i < images.size(); ++i) images[i] = (i % 13) / 13.0f;
  const Dataset data =
      DatasetOf(images, {0, 1, 2, 3, 4, 0, 1, 2}, /*size=*/20, /*classes=*/5);
  for (const std::vector<int64_t>& splits :
       {std::vector<int64_t>{}, std::vector<int64_t>{7, 12}}) {
    SCOPED_TRACE(splits.size());
    ModelStepHooks hooks;
    hooks.row_splits = {splits};
    absl::StatusOr<float> gpu_loss =
        (*on_gpu)->TrainStep(BatchOf(data, 0, 8), hooks);
    absl::StatusOr<float> cpu_loss =
        (*on_cpu)->TrainStep(BatchOf(data, 0, 8), {});
    ASSERT_TRUE(gpu_loss.ok()) << gpu_loss.status();
    ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
    EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-5);
    for (int i = 0; i < (*on_cpu)->num_parameters(); ++i) {
      const std::vector<float> g = GradientOf(on_gpu->get(), i);
      const std::vector<float> c = GradientOf(on_cpu->get(), i);
      for (size_t j = 0; j < c.size(); ++j) {
        EXPECT_NEAR(g[j], c[j], 1e-5 + 1e-4 * std::abs(c[j]));
      }
    }
  }
}

}  // namespace
}  // namespace ps::worker::model
