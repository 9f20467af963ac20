#include "worker/loop/step_pipeline.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "kernels/cpu_backend.h"
#include "worker/loop/pipeline_test_util.h"

namespace ps::worker {
namespace {

// The pushes of one step: the output layer first, fc0 last.
std::vector<std::string> Pushes(int64_t clock, int64_t version) {
  return {absl::StrCat("push ", clock, " ", version, " 2 6"),
          absl::StrCat("push ", clock, " ", version, " 3 2"),
          absl::StrCat("push ", clock, " ", version, " 0 12"),
          absl::StrCat("push ", clock, " ", version, " 1 3")};
}

// The pushes of an overlapped step end: every tensor whole, in order.
std::vector<std::string> PushesInOrder(int64_t clock, int64_t version) {
  return {absl::StrCat("push ", clock, " ", version, " 0 12"),
          absl::StrCat("push ", clock, " ", version, " 1 3"),
          absl::StrCat("push ", clock, " ", version, " 2 6"),
          absl::StrCat("push ", clock, " ", version, " 3 2")};
}

std::vector<std::string> Concat(std::vector<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A tiny MLP on the CPU backend, a RecordingAccess, and a pipeline over
// them with a clock that stands still (so no time is awaited).
class StepPipelineTest : public testing::Test {
 protected:
  void SetUp() override {
    auto backend = kernels::CreateCpuBackend({});
    ASSERT_TRUE(backend.ok());
    backend_ = *std::move(backend);
    model_ = TinyModel(backend_.get());
    ASSERT_NE(model_, nullptr);
    access_ = std::make_unique<RecordingAccess>(*model_);
  }
  std::unique_ptr<StepPipeline> Make(StepPipelineOptions o) {
    o.clock = &clock_;
    o.sleep = [this](absl::Duration d) {
      access_->log.push_back(
          absl::StrCat("sleep ", absl::ToInt64Milliseconds(d)));
    };
    auto p = StepPipeline::Create(model_.get(), backend_.get(), access_.get(),
                                  std::move(o));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  // One whole step; its loss.
  float Step(StepPipeline* p, int seed) {
    absl::StatusOr<bool> more = p->Pull(false);
    EXPECT_TRUE(more.ok() && *more) << more.status();
    absl::StatusOr<std::optional<float>> loss = p->Compute(TinyBatch(8, seed));
    EXPECT_TRUE(loss.ok() && loss->has_value()) << loss.status();
    EXPECT_TRUE(p->EndStep().ok());
    p->NextStep();
    return loss.ok() && loss->has_value() ? **loss : -1;
  }
  std::vector<float> Weights0() {
    return ReadParameter(backend_.get(), model_.get(), 0);
  }

  FakeClock clock_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<TrainableModel> model_;
  std::unique_ptr<RecordingAccess> access_;
};

TEST(StepPipeline, CatchUpClockMovesOnlyABspWorkerAndOnlyForward) {
  struct Case {
    bool bsp;
    int64_t clock, version, want;
  } cases[] = {
      {true, 5, 5, 5},  {true, 5, 3, 5},  {true, 5, 9, 9},
      {false, 5, 9, 5}, {false, 5, 3, 5}, {true, 0, 0, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CatchUpClock(c.bsp, c.clock, c.version), c.want)
        << (c.bsp ? "BSP" : "not BSP") << " clock " << c.clock << " version "
        << c.version;
  }
}

TEST(StepPipeline, SlowdownFromTheSpecAndItsDelay) {
  JobSpec spec;
  auto add = [&](int rank, float factor, int64_t delay_ms) {
    StragglerInjection* s = spec.add_stragglers();
    s->set_worker_rank(rank);
    s->set_compute_factor(factor);
    s->set_delay_ms(delay_ms);
  };
  add(1, 2, 10);
  add(1, 1, 5);  // a factor of 1 (or unset) leaves the one before
  add(2, 4, 0);
  const Slowdown one = SlowdownFor(spec, 1);
  EXPECT_EQ(one.compute_factor, 2);
  EXPECT_EQ(one.extra_delay, absl::Milliseconds(15));
  EXPECT_TRUE(one.slowed());
  EXPECT_EQ(one.Delay(absl::Milliseconds(10)), absl::Milliseconds(25));
  const Slowdown two = SlowdownFor(spec, 2);
  EXPECT_EQ(two.compute_factor, 4);
  EXPECT_EQ(two.extra_delay, absl::ZeroDuration());
  EXPECT_EQ(two.Delay(absl::Milliseconds(10)), absl::Milliseconds(30));
  const Slowdown none = SlowdownFor(spec, 0);
  EXPECT_FALSE(none.slowed());
  EXPECT_EQ(none.Delay(absl::Milliseconds(10)), absl::ZeroDuration());
}

TEST_F(StepPipelineTest, EachStepEndBringsTheNextStepsWeights) {
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 0, .total_steps = 3});
  ASSERT_NE(p, nullptr);
  // Step 0 pulls; its pushes carry the pulled version.
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_EQ(Weights0(), std::vector<float>(12, PulledValue(0)));
  ASSERT_TRUE(p->Compute(TinyBatch(8, 0)).ok());
  ASSERT_TRUE(p->EndStep().ok());
  EXPECT_EQ(access_->log,
            Concat({{"pull 0"}, Pushes(0, 0), {"finish 0", "pull 1"}}));
  StepObservations seen = p->TakeObservations();
  EXPECT_EQ(seen.staleness_ends, 0);
  p->NextStep();

  // Step 1 computes on the weights step 0's end brought (version 1).
  access_->log.clear();
  access_->staleness = 3;
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_TRUE(access_->log.empty());
  ASSERT_TRUE(p->Compute(TinyBatch(8, 1)).ok());
  EXPECT_EQ(Weights0(), std::vector<float>(12, PulledValue(1)));
  ASSERT_TRUE(p->EndStep().ok());
  EXPECT_EQ(access_->log, Concat({Pushes(1, 1), {"finish 1", "pull 2"}}));
  seen = p->TakeObservations();
  EXPECT_EQ(seen.staleness_ends, 1);
  EXPECT_EQ(seen.staleness, 0);  // step 0's end
  EXPECT_EQ(seen.awaited, absl::ZeroDuration());
  p->NextStep();

  // The last step ends without asking for more weights.
  access_->log.clear();
  Step(p.get(), 2);
  EXPECT_EQ(access_->log, Concat({Pushes(2, 2), {"finish 2"}}));
  seen = p->TakeObservations();
  EXPECT_EQ(seen.staleness_ends, 2);
  EXPECT_EQ(seen.staleness, 6);
  EXPECT_EQ(p->clock(), 3);
  EXPECT_EQ(p->skipped_steps(), 0);
  EXPECT_TRUE(p->Drain().ok());

  // The final evaluation's weights.
  ASSERT_TRUE(p->PullWeights().ok());
  EXPECT_EQ(access_->log.back(), "pull 3");
  EXPECT_EQ(Weights0(), std::vector<float>(12, PulledValue(3)));
}

TEST_F(StepPipelineTest, ABspWorkerThatFellBehindContinuesAtTheJobsStep) {
  access_->version_at = [](int64_t clock) { return clock == 2 ? 5 : clock; };
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 2, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_EQ(p->clock(), 5);
  EXPECT_EQ(p->skipped_steps(), 3);
  ASSERT_TRUE(p->Compute(TinyBatch(8, 0)).ok());
  EXPECT_EQ(Lines(access_->log, "push"), Pushes(5, 5));
}

// A worker that joins a BSP job takes its clock from the shards' version,
// below the start it was given (the shards' open step counts it among its
// workers: waiting for the next version would hold that step open for
// good) or above it; the first step computes on the weights of the join.
TEST_F(StepPipelineTest, ABspWorkerJoinsAtTheStepTheShardsAreAt) {
  access_->version_at = [](int64_t) { return 4; };
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 5, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Join().ok());
  EXPECT_EQ(p->clock(), 4);
  EXPECT_EQ(p->skipped_steps(), 0);
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_EQ(p->clock(), 4);
  EXPECT_EQ(Weights0(), std::vector<float>(12, PulledValue(5)));
  ASSERT_TRUE(p->Compute(TinyBatch(8, 0)).ok());
  EXPECT_EQ(Lines(access_->log, "pull"), std::vector<std::string>{"pull 5"});
  EXPECT_EQ(Lines(access_->log, "push"), Pushes(4, 4));

  // The shards ahead of the start given: the steps between are skipped.
  access_->version_at = [](int64_t) { return 7; };
  p = Make({.bsp = true, .start_clock = 5, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Join().ok());
  EXPECT_EQ(p->clock(), 7);
  EXPECT_EQ(p->skipped_steps(), 2);

  // ASP: no join pull; the clock is the one given.
  access_->log.clear();
  p = Make({.bsp = false, .start_clock = 5, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Join().ok());
  EXPECT_EQ(p->clock(), 5);
  EXPECT_TRUE(access_->log.empty());
}

TEST_F(StepPipelineTest, AnAspWorkerComputesOnNewerWeightsWithoutSkipping) {
  access_->version_at = [](int64_t clock) { return clock == 2 ? 5 : clock; };
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = false, .start_clock = 2, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_EQ(p->clock(), 2);
  EXPECT_EQ(p->skipped_steps(), 0);
  ASSERT_TRUE(p->Compute(TinyBatch(8, 0)).ok());
  EXPECT_EQ(Lines(access_->log, "push"), Pushes(2, 5));
}

TEST_F(StepPipelineTest, CatchingUpPastTheLastStepEndsTheJob) {
  access_->version_at = [](int64_t) { return 5; };
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 2, .total_steps = 5});
  ASSERT_NE(p, nullptr);
  absl::StatusOr<bool> more = p->Pull(false);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
  EXPECT_EQ(p->clock(), 5);
  EXPECT_EQ(p->skipped_steps(), 3);
}

TEST_F(StepPipelineTest, CatchUpOnWeightsThatArriveDuringTheStep) {
  // Step 0's end brings version 4: step 1 becomes step 4 before backward,
  // so its gradients are pushed as step 4's.
  access_->version_at = [](int64_t clock) { return clock == 1 ? 4 : clock; };
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 0, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  Step(p.get(), 0);
  access_->log.clear();
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_EQ(p->clock(), 1);
  absl::StatusOr<std::optional<float>> loss = p->Compute(TinyBatch(8, 1));
  ASSERT_TRUE(loss.ok() && loss->has_value()) << loss.status();
  EXPECT_EQ(p->clock(), 4);
  EXPECT_EQ(p->skipped_steps(), 3);
  EXPECT_EQ(access_->log, Pushes(4, 4));
}

TEST_F(StepPipelineTest, TheJobEndingDuringTheStepEndsItWithoutPushes) {
  access_->version_at = [](int64_t clock) { return clock == 1 ? 10 : clock; };
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 0, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  Step(p.get(), 0);
  access_->log.clear();
  ASSERT_TRUE(*p->Pull(false));
  absl::StatusOr<std::optional<float>> loss = p->Compute(TinyBatch(8, 1));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_FALSE(loss->has_value());
  EXPECT_EQ(p->clock(), 10);
  EXPECT_TRUE(access_->log.empty());
}

TEST_F(StepPipelineTest, AnEvaluationStepHasAllItsWeightsBeforeItStarts) {
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 0, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  Step(p.get(), 0);
  access_->log.clear();
  ASSERT_TRUE(*p->Pull(true));
  // Step 0's end is awaited whole (its staleness counted): its weights are
  // step 1's, and nothing is pulled again (the pipeline used to pull them
  // a second time).
  EXPECT_TRUE(access_->log.empty());
  EXPECT_EQ(Weights0(), std::vector<float>(12, PulledValue(1)));
  EXPECT_EQ(p->TakeObservations().staleness_ends, 1);
  ASSERT_TRUE(p->Compute(TinyBatch(8, 1)).ok());
  EXPECT_EQ(Lines(access_->log, "push"), Pushes(1, 1));
}

TEST_F(StepPipelineTest, ASlowedWorkerSleepsThenSendsItsGradients) {
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true,
            .start_clock = 0,
            .total_steps = 10,
            .slowdown = {.compute_factor = 3,
                         .extra_delay = absl::Milliseconds(7)}});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(*p->Pull(false));
  ASSERT_TRUE(p->Compute(TinyBatch(8, 0)).ok());
  // The clock stands still: no compute time to multiply, the delay alone.
  EXPECT_EQ(access_->log, Concat({{"pull 0", "sleep 7"}, Pushes(0, 0)}));
}

TEST_F(StepPipelineTest, AFailedPushEndsTheStepWithItsError) {
  access_->push_status = absl::UnavailableError("shard down");
  std::unique_ptr<StepPipeline> p =
      Make({.bsp = true, .start_clock = 0, .total_steps = 10});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(*p->Pull(false));
  EXPECT_EQ(p->Compute(TinyBatch(8, 0)).status().code(),
            absl::StatusCode::kUnavailable);
  // No push after the first failed.
  EXPECT_EQ(Lines(access_->log, "push").size(), 1u);
}

// Records what the pipeline asks of the access when it is made (the
// tensors cut into parts), and the buffers its pushes ask the next weights
// into.
class SetUpAccess : public RecordingAccess {
 public:
  using RecordingAccess::RecordingAccess;
  std::vector<int64_t> PartBoundaries(int index) const override {
    asked.push_back(index);
    return {};
  }
  absl::Status Push(client::StepArgs request) override {
    if (!request.next_weights.empty()) {
      push_next_weights = request.next_weights;
    }
    return RecordingAccess::Push(std::move(request));
  }
  mutable std::vector<int> asked;
  std::vector<absl::Span<float>> push_next_weights;
};

TEST_F(StepPipelineTest, PushesBringBackWeightsIntoTheModelUnlessOverlapped) {
  SetUpAccess access(*model_);
  {
    auto p = StepPipeline::Create(model_.get(), backend_.get(), &access,
                                  {.bsp = true, .total_steps = 10});
    ASSERT_TRUE(p.ok()) << p.status();
    // Only the weight the model uses in row blocks is cut at the chunks.
    EXPECT_EQ(access.asked, std::vector<int>{0});
    Step(p->get(), 0);
    ASSERT_EQ(access.push_next_weights.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(access.push_next_weights[i].data(), model_->parameter(i).data);
    }
  }
  // Destroyed: the calls in flight were ended.
  EXPECT_EQ(access.cancels, 1);

  SetUpAccess overlapped(*model_);
  auto p = StepPipeline::Create(model_.get(), backend_.get(), &overlapped,
                                {.overlap = true, .total_steps = 10});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(overlapped.asked.empty());
  Step(p->get(), 0);
  Step(p->get(), 1);
  EXPECT_EQ(Lines(overlapped.log, "finish").size(), 2u);
  EXPECT_TRUE(overlapped.push_next_weights.empty());
}

TEST_F(StepPipelineTest, OverlappedStepsComputeOnWeightsOneStepEndBehind) {
  std::unique_ptr<StepPipeline> p =
      Make({.overlap = true, .start_clock = 0, .total_steps = 4});
  ASSERT_NE(p, nullptr);
  for (int t = 0; t < 4; ++t) Step(p.get(), t);
  // One pull of its own; every other step's weights came with a step end.
  EXPECT_EQ(Lines(access_->log, "pull"),
            (std::vector<std::string>{"pull 0", "pull 1", "pull 2", "pull 3"}));
  EXPECT_EQ(Lines(access_->log, "push"),
            Concat({PushesInOrder(0, 0), PushesInOrder(1, 0),
                    PushesInOrder(2, 1), PushesInOrder(3, 2)}));
  EXPECT_EQ(Lines(access_->log, "finish").size(), 4u);
}

}  // namespace
}  // namespace ps::worker
