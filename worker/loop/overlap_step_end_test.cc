#include "worker/loop/overlap_step_end.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu_backend.h"
#include "kernels/cuda_emulated_backend.h"
#include "worker/loop/pipeline_test_util.h"

namespace ps::worker {
namespace {

// Three steps (the last one last): each step end sends the step's own
// gradient and asks for the next weights; the next step computes on those
// of the end before (the first two steps on the same weights).
void EndsEachStepOneBehind(kernels::Backend* backend) {
  SCOPED_TRACE(backend->HostAddressable() ? "host memory" : "device memory");
  std::unique_ptr<TrainableModel> model = TinyModel(backend);
  ASSERT_NE(model, nullptr);
  ParameterStaging staging(model.get(), backend->HostAddressable());
  RecordingAccess access(*model);
  access.staleness = 2;
  auto overlap =
      OverlapStepEnd::Create(model.get(), backend, &staging, &access);
  ASSERT_TRUE(overlap.ok()) << overlap.status();
  // The weights the next step computes on: the model's when direct, else
  // the staging copies (which the pipeline then loads).
  auto next_weights = [&]() -> std::vector<float> {
    if (staging.direct()) return ReadParameter(backend, model.get(), 0);
    absl::Span<float> w = staging.Weights()[0];
    return std::vector<float>(w.begin(), w.end());
  };
  const std::vector<float> initial = next_weights();

  // Step 0: nothing in flight yet; the next step keeps these weights.
  ASSERT_TRUE(model->TrainStep(TinyBatch(8, 0), {}).ok());
  const double g0 = GradientSum(model.get(), 0);
  absl::StatusOr<OverlapStepEnd::Ended> e = (*overlap)->EndStep(0, 0, false);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->next_version, 0);
  EXPECT_EQ(e->staleness_ends, 0);
  EXPECT_EQ(access.log, (std::vector<std::string>{
                            "push 0 0 0 12", "push 0 0 1 3", "push 0 0 2 6",
                            "push 0 0 3 2", "finish 0", "pull 1"}));
  EXPECT_DOUBLE_EQ((access.grad_sums[{0, 0}]), g0);
  EXPECT_EQ(next_weights(), initial);

  // Step 1: step 0's end (pull 1, version 1) becomes the next weights.
  access.log.clear();
  ASSERT_TRUE(model->TrainStep(TinyBatch(8, 1), {}).ok());
  const double g1 = GradientSum(model.get(), 0);
  ASSERT_NE(g1, g0);
  e = (*overlap)->EndStep(1, 0, false);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->next_version, 1);
  EXPECT_EQ(e->staleness_ends, 1);
  EXPECT_EQ(e->staleness, 2);
  EXPECT_EQ(access.log, (std::vector<std::string>{
                            "push 1 0 0 12", "push 1 0 1 3", "push 1 0 2 6",
                            "push 1 0 3 2", "finish 1", "pull 2"}));
  EXPECT_DOUBLE_EQ((access.grad_sums[{1, 0}]), g1);
  EXPECT_EQ(next_weights(), std::vector<float>(12, PulledValue(1)));

  // Step 2, the last: step 1's end arrives, then this step's gradient goes
  // out and the step ends before EndStep returns, with no pull.
  access.log.clear();
  ASSERT_TRUE(model->TrainStep(TinyBatch(8, 2), {}).ok());
  const double g2 = GradientSum(model.get(), 0);
  e = (*overlap)->EndStep(2, 1, true);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->next_version, 2);
  EXPECT_EQ(e->staleness_ends, 2);
  EXPECT_EQ(e->staleness, 4);
  EXPECT_EQ(access.log, (std::vector<std::string>{
                            "push 2 1 0 12", "push 2 1 1 3", "push 2 1 2 6",
                            "push 2 1 3 2", "finish 2"}));
  EXPECT_DOUBLE_EQ((access.grad_sums[{2, 0}]), g2);
  EXPECT_EQ(next_weights(), std::vector<float>(12, PulledValue(2)));
}

TEST(OverlapStepEnd, EndsEachStepOneBehindWithSwappedBuffersOnHostMemory) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  EndsEachStepOneBehind(backend->get());
}

TEST(OverlapStepEnd, EndsEachStepOneBehindWithHostCopiesOnDeviceMemory) {
  auto backend = kernels::CreateCudaEmulatedBackend();
  ASSERT_TRUE(backend.ok());
  EndsEachStepOneBehind(backend->get());
}

TEST(OverlapStepEnd, AFailedStepEndIsReportedByTheNextOne) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  std::unique_ptr<TrainableModel> model = TinyModel(backend->get());
  ASSERT_NE(model, nullptr);
  ParameterStaging staging(model.get(), true);
  RecordingAccess access(*model);
  auto overlap =
      OverlapStepEnd::Create(model.get(), backend->get(), &staging, &access);
  ASSERT_TRUE(overlap.ok());
  ASSERT_TRUE(model->TrainStep(TinyBatch(8, 0), {}).ok());
  access.push_status = absl::UnavailableError("shard down");
  // Sent without waiting: the error shows when the next step ends.
  ASSERT_TRUE((*overlap)->EndStep(0, 0, false).ok());
  ASSERT_TRUE(model->TrainStep(TinyBatch(8, 1), {}).ok());
  EXPECT_EQ((*overlap)->EndStep(1, 0, false).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps::worker
