#include "worker/loop/parameter_staging.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/cpu_backend.h"
#include "kernels/cuda_emulated_backend.h"
#include "worker/loop/pipeline_test_util.h"

namespace ps::worker {
namespace {

TEST(ParameterStaging, OnHostMemoryPullsAndPushesUseTheModelsBuffers) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->HostAddressable());
  std::unique_ptr<TrainableModel> model = TinyModel(backend->get());
  ASSERT_NE(model, nullptr);
  ParameterStaging staging(model.get(), true);
  EXPECT_TRUE(staging.direct());
  std::vector<absl::Span<float>> w = staging.Weights();
  ASSERT_EQ(w.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].data(), model->parameter(i).data) << i;
    EXPECT_EQ(static_cast<int64_t>(w[i].size()), model->parameter(i).size);
  }
  EXPECT_TRUE(staging.LoadAll().ok());
  EXPECT_TRUE(staging.Load(0, 0, 3).ok());
  absl::StatusOr<absl::Span<const float>> g = staging.Gradient(0, 3, 9);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->data(), model->gradient(0).data + 3);
  EXPECT_EQ(g->size(), 6u);

  // A swapped parameter buffer shows in the next Weights().
  auto spare = (*backend)->AllocateArray<float>(12);
  ASSERT_TRUE(spare.ok());
  ASSERT_TRUE(model->SwapParameterBuffer(0, *spare).ok());
  EXPECT_EQ(staging.Weights()[0].data(), model->parameter(0).data);
  EXPECT_NE(staging.Weights()[0].data(), w[0].data());
}

TEST(ParameterStaging, OnDeviceMemoryHostCopiesMoveByRange) {
  auto backend = kernels::CreateCudaEmulatedBackend();
  ASSERT_TRUE(backend.ok());
  ASSERT_FALSE((*backend)->HostAddressable());
  std::unique_ptr<TrainableModel> model = TinyModel(backend->get());
  ASSERT_NE(model, nullptr);
  ParameterStaging staging(model.get(), false);
  EXPECT_FALSE(staging.direct());
  std::vector<absl::Span<float>> w = staging.Weights();
  ASSERT_EQ(w.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(w[i].data(), model->parameter(i).data) << i;
    EXPECT_EQ(static_cast<int64_t>(w[i].size()), model->parameter(i).size);
    for (size_t j = 0; j < w[i].size(); ++j) w[i][j] = 100 * i + j;
  }
  // Elements [3, 9) of fc0/weight only.
  const std::vector<float> before =
      ReadParameter(backend->get(), model.get(), 0);
  ASSERT_TRUE(staging.Load(0, 3, 9).ok());
  std::vector<float> now = ReadParameter(backend->get(), model.get(), 0);
  for (int j = 0; j < 12; ++j) {
    EXPECT_EQ(now[j], j >= 3 && j < 9 ? j : before[j]) << j;
  }
  // All of them.
  ASSERT_TRUE(staging.LoadAll().ok());
  for (int i = 0; i < 4; ++i) {
    now = ReadParameter(backend->get(), model.get(), i);
    for (size_t j = 0; j < now.size(); ++j) {
      EXPECT_EQ(now[j], 100 * i + j) << i << " " << j;
    }
  }

  // A gradient range comes out to the host.
  ASSERT_TRUE(model->TrainStep(TinyBatch(8, 1), {}).ok());
  kernels::DeviceSpan<const float> d = model->gradient(2);
  std::vector<float> all(d.size);
  ASSERT_TRUE(
      (*backend)->CopyToHost(d.data, all.data(), d.size * sizeof(float)).ok());
  absl::StatusOr<absl::Span<const float>> g = staging.Gradient(2, 2, 5);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 3u);
  EXPECT_NE(g->data(), d.data + 2);
  for (int j = 0; j < 3; ++j) EXPECT_EQ((*g)[j], all[2 + j]) << j;

  EXPECT_EQ(staging.Load(4, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(staging.Gradient(-1, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker
