// The step pipeline on a model with sparse tables (matrix factorization
// over two embedding tables), against the in-process parameter access:
// rows fetched ahead with a step's end, without overlap.
#include <gtest/gtest.h>

#include "worker/loop/sparse_pipeline_test_util.h"

namespace ps::worker::sparse_testing {
namespace {

TEST(StepPipelineSparse, MatrixFactorizationLearnsThroughTheSeam) {
  for (const bool rows_ahead : {false, true}) {
    SCOPED_TRACE(rows_ahead ? "rows ahead" : "every step pulls its rows");
    Twins t;
    ASSERT_TRUE(t.ok());
    CallRecorder access(t.access);
    Ratings ratings;
    constexpr int kSteps = 600;
    std::vector<data::Batch> batches;
    for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(32));
    std::unique_ptr<StepPipeline> p = t.Make(Options(false, kSteps), &access);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->lookahead(), 1);
    double first = 0, last = 0;
    for (int step = 0; step < kSteps; ++step) {
      const data::Batch* ahead =
          rows_ahead && step + 1 < kSteps ? &batches[step + 1] : nullptr;
      absl::StatusOr<StepOutcome> r = RunStep(*p, batches[step], ahead);
      ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status();
      if (step < 20) first += r->loss / 20;
      if (step >= kSteps - 20) last += r->loss / 20;
    }
    EXPECT_EQ(p->clock(), kSteps);
    EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
    EXPECT_EQ(t.access.table_size(0), kUsers);
    EXPECT_EQ(t.access.table_size(1), kItems);
    EXPECT_EQ(t.access.sparse_pushes(), 2 * kSteps);
    EXPECT_EQ(t.access.steps_ended(), kSteps);
    EXPECT_EQ(t.access.row_pulls(), rows_ahead ? 1 : kSteps);
    EXPECT_EQ(t.access.pushes_with_rows(), rows_ahead ? kSteps - 1 : 0);
    EXPECT_NEAR(t.access.dense(0)[0], 1.0f, 0.3f);  // the planted offset
    ASSERT_EQ(access.stepped.size(), static_cast<size_t>(kSteps));
    for (const auto& [clock, s] : access.stepped) {
      ASSERT_EQ(s.row_keys.size(), 2u) << "step " << clock;
      for (const std::vector<uint64_t>& keys : s.row_keys) {
        EXPECT_LE(keys.size(), 16u) << "step " << clock;
        EXPECT_TRUE(std::adjacent_find(keys.begin(), keys.end(),
                                       std::greater_equal<uint64_t>()) ==
                    keys.end())
            << "step " << clock << ": keys not unique and ascending";
      }
    }
  }
}

// The access's errors return: a pull of rows of a table the access lacks
// fails the step's Compute with the access's INVALID_ARGUMENT, and nothing
// of the step is pushed.
TEST(StepPipelineSparse, ErrorsOfTheAccessReturn) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  std::unique_ptr<TrainableModel> model = MfModel(backend->get());
  ASSERT_NE(model, nullptr);
  // One table only: the pull of the second fails.
  LocalParameterAccess access({{0.0f}}, {{"users", 4, 0.3f}}, 0.1f, 9);
  auto p = StepPipeline::Create(model.get(), backend->get(), &access,
                                Options(false, 4));
  ASSERT_TRUE(p.ok()) << p.status();
  Ratings ratings;
  const data::Batch batch = ratings.Next(4);
  absl::StatusOr<bool> more = (*p)->Pull(false);
  ASSERT_TRUE(more.ok() && *more) << more.status();
  absl::StatusOr<std::optional<float>> loss = (*p)->Compute(batch);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument)
      << loss.status();
  EXPECT_EQ(access.sparse_pushes(), 0);
  EXPECT_EQ(access.steps_ended(), 0);
}

// A step end that fails on its way returns its error where it is awaited:
// the next step's Pull (the end of the job's last step: its EndStep). The
// rows it brought are not used: a step after the error pulls its weights
// and its rows itself.
TEST(StepPipelineSparse, AFailedStepEndReturnsAndTheNextStepPullsEverything) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  access.fail_ends = {1, 3};
  Ratings ratings;
  std::vector<data::Batch> b;
  for (int i = 0; i < 4; ++i) b.push_back(ratings.Next(16));
  std::unique_ptr<StepPipeline> p = t.Make(Options(false, 4), &access);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(RunStep(*p, b[0], &b[1]).ok());
  // Step 1's end (asking b[2]'s rows) leaves on its way.
  absl::StatusOr<StepOutcome> r = RunStep(*p, b[1], &b[2]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(access.stepped[1].next_row_tables, (std::vector<int>{0, 1}));
  absl::StatusOr<bool> more = p->Pull(false);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kUnavailable)
      << more.status();
  EXPECT_EQ(access.pulled.count(2), 0u);
  // Step 2 again: everything pulled.
  r = RunStep(*p, b[2], &b[3]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(access.pulled[2].tensors, 1);
  EXPECT_EQ(access.pulled[2].tables, (std::vector<int>{0, 1}));
  EXPECT_EQ(access.pulled[2].keys, KeysOf(*t.plain_model, b[2]));
  // The last step's end is waited for in its EndStep.
  more = p->Pull(false);
  ASSERT_TRUE(more.ok() && *more) << more.status();
  absl::StatusOr<std::optional<float>> loss = p->Compute(b[3]);
  ASSERT_TRUE(loss.ok() && loss->has_value()) << loss.status();
  EXPECT_EQ(p->EndStep(nullptr).code(), absl::StatusCode::kUnavailable);
  // Step 3's rows had come with step 2's end.
  EXPECT_EQ(access.pulled.count(3), 0u);
}

// The same steps with the next batch's rows riding on each step's end give
// exactly the losses and weights of plain steps (the in-process access
// applies each gradient at once, so both see the same weights), with one
// pull of rows and of weights in all (the first step's; the evaluations'
// own rows aside), and evaluations between steps (Pull of all weights,
// another batch's rows in the model) do not disturb them.
TEST(StepPipelineSparse, PrefetchedStepsEqualPlainSteps) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  std::vector<data::Batch> batches;
  constexpr int kSteps = 40;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(16));
  const data::Batch probe = ratings.Next(8);

  std::unique_ptr<StepPipeline> p = t.Make(Options(false, kSteps));
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->lookahead(), 1);
  int evaluations = 0;
  int64_t ends = 0;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<PlainResult> want =
        PlainStep(*t.plain_model, t.plain_access, step, batches[step]);
    ASSERT_TRUE(want.ok()) << want.status();
    const data::Batch* ahead = step + 1 < kSteps ? &batches[step + 1] : nullptr;
    std::function<absl::Status()> evaluation;
    if (step % 10 == 5) {
      evaluation = [&, step] {
        ++evaluations;
        return EvaluateProbe(*t.model, t.access, step, probe);
      };
    }
    absl::StatusOr<StepOutcome> got =
        RunStep(*p, batches[step], ahead, evaluation);
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    EXPECT_EQ(got->loss, want->loss) << "step " << step;
    // Each step's end went out on its way; the next step's Pull completed
    // it (the last step's: its EndStep).
    EXPECT_EQ(got->seen.staleness_ends, EndsSeenAt(step, kSteps))
        << "step " << step;
    EXPECT_EQ(got->seen.staleness, 0);
    ends += got->seen.staleness_ends;
  }
  EXPECT_EQ(evaluations, 4);
  EXPECT_EQ(ends, kSteps);
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));
  EXPECT_EQ(t.access.row_pulls(), 1 + evaluations);  // the first step's
  // The first step's weights too; the others came with the step ends.
  EXPECT_EQ(t.access.dense_pulls(), 1);
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 1);
  EXPECT_EQ(t.access.steps_ended(), kSteps);
  EXPECT_EQ(t.plain_access.row_pulls(), kSteps);
  EXPECT_EQ(t.plain_access.dense_pulls(), kSteps);
  EXPECT_EQ(t.plain_access.steps_ended(), kSteps);
  ExpectSameRows(t.access, t.plain_access);
}

// A step whose batch is not the one announced (the plan moved) pulls its
// rows itself. Rows fetched for one step are not used at another: a BSP
// worker that catches up (the job moved on without it) pulls the rows of
// its new step even for the very keys it fetched. (The old stepper took the
// clock per call; the pipeline's clock moves only by NextStep and BSP
// catch-up, so catch-up is the way a step's clock differs from the one its
// rows were fetched for.)
TEST(StepPipelineSparse, AnotherBatchOrClockIsPulledAgain) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  const data::Batch b0 = ratings.Next(16), b1 = ratings.Next(16),
                    other = ratings.Next(16), b2 = ratings.Next(16);
  std::unique_ptr<StepPipeline> p = t.Make(Options(false, 4, /*bsp=*/true));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Join().ok());
  ASSERT_EQ(p->clock(), 0);

  absl::StatusOr<PlainResult> want =
      PlainStep(*t.plain_model, t.plain_access, 0, b0);
  absl::StatusOr<StepOutcome> got = RunStep(*p, b0, &b1);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  EXPECT_EQ(got->loss, want->loss) << "clock 0";
  EXPECT_EQ(t.access.row_pulls(), 1);

  // Step 1 on another batch than b1, whose rows came.
  want = PlainStep(*t.plain_model, t.plain_access, 1, other);
  absl::StatusOr<bool> more = p->Pull(false);
  ASSERT_TRUE(more.ok() && *more) << more.status();
  ASSERT_EQ(p->clock(), 1);
  absl::StatusOr<std::optional<float>> loss = p->Compute(other);
  ASSERT_TRUE(want.ok() && loss.ok() && loss->has_value())
      << want.status() << loss.status();
  EXPECT_EQ(**loss, want->loss) << "clock 1";
  EXPECT_EQ(t.access.row_pulls(), 2);
  // Meanwhile another worker ended a step: the job is at step 3 when step
  // 1 ends (it asks b2's rows for step 2).
  client::StepArgs elsewhere;
  elsewhere.clock = 1;
  ASSERT_TRUE(t.access.EndStep(std::move(elsewhere)).Wait().ok());
  ASSERT_TRUE(p->EndStep(&b2).ok());
  EXPECT_EQ(t.access.pushes_with_rows(), 2);
  p->NextStep();

  // Catch-up: the worker continues at step 3, on b2, whose rows were
  // fetched for step 2.
  more = p->Pull(false);
  ASSERT_TRUE(more.ok() && *more) << more.status();
  EXPECT_EQ(p->clock(), 3);
  EXPECT_EQ(p->skipped_steps(), 1);
  want = PlainStep(*t.plain_model, t.plain_access, 3, b2);
  loss = p->Compute(b2);
  ASSERT_TRUE(want.ok() && loss.ok() && loss->has_value())
      << want.status() << loss.status();
  EXPECT_EQ(**loss, want->loss) << "clock 3";
  ASSERT_TRUE(p->EndStep(nullptr).ok());  // the last step

  EXPECT_EQ(t.access.row_pulls(), 3);
  EXPECT_EQ(t.access.pushes_with_rows(), 2);
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));
  ExpectSameRows(t.access, t.plain_access);
}

// A next batch the model cannot read is not fetched for; its own step
// reports it (and only that one: the step that announced it ends well).
TEST(StepPipelineSparse, BadNextBatchFailsAtItsOwnStep) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  const data::Batch good = ratings.Next(8);
  data::Batch bad = ratings.Next(8);
  bad.sparse.pop_back();  // no "item" field
  std::unique_ptr<StepPipeline> p = t.Make(Options(false, 3));
  ASSERT_NE(p, nullptr);
  absl::StatusOr<StepOutcome> r = RunStep(*p, good, &bad);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(t.access.pushes_with_rows(), 0);
  EXPECT_EQ(t.access.sparse_pushes(), 2);  // the good step's rows went out
  absl::StatusOr<bool> more = p->Pull(false);
  ASSERT_TRUE(more.ok() && *more) << more.status();
  EXPECT_EQ(t.access.steps_ended(), 1);
  EXPECT_EQ(p->Compute(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.access.sparse_pushes(), 2);
}

// Through an access that only forwards the three calls, steps give the
// plain steps' losses and weights, and each step asks for what it needs
// once: the first step pulls the weights and both tables' rows (its
// batch's keys), every step pushes its dense gradient and both tables'
// rows (its batch's unique keys) on the weights it computed on, and ends
// once, asking back the next step's weights and the next batch's rows but
// for the last; every call's answer is waited for, and destroying the
// pipeline cancels the access's calls.
TEST(StepPipelineSparse, WorksThroughAnAccessThatOnlyForwardsTheCalls) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  Ratings ratings;
  constexpr int kSteps = 5;
  std::vector<data::Batch> batches;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(16));
  std::unique_ptr<StepPipeline> p = t.Make(Options(false, kSteps), &access);
  ASSERT_NE(p, nullptr);
  std::vector<Keys> keys;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<PlainResult> want =
        PlainStep(*t.plain_model, t.plain_access, step, batches[step]);
    const data::Batch* ahead = step + 1 < kSteps ? &batches[step + 1] : nullptr;
    absl::StatusOr<StepOutcome> got = RunStep(*p, batches[step], ahead);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_EQ(got->loss, want->loss);
    EXPECT_EQ(got->seen.staleness_ends, EndsSeenAt(step, kSteps));
    keys.push_back(want->keys);
  }
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));

  ASSERT_EQ(access.pulled.size(), 1u);  // the first step's
  const CallRecorder::Pulled& first = access.pulled[0];
  EXPECT_EQ(first.tensors, 1);
  EXPECT_EQ(first.tables, (std::vector<int>{0, 1}));
  EXPECT_EQ(first.keys, keys[0]);
  for (const auto& r : first.results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->version, 0);
  }
  ASSERT_EQ(access.stepped.size(), static_cast<size_t>(kSteps));
  for (int64_t clock = 0; clock < kSteps; ++clock) {
    SCOPED_TRACE("step " + std::to_string(clock));
    const CallRecorder::Stepped& s = access.stepped[clock];
    const bool last = clock == kSteps - 1;
    // Each step computes on the weights of the steps ended before it.
    EXPECT_EQ(s.base_versions, std::set<int64_t>{clock});
    EXPECT_EQ(s.dense_elements, (std::map<int, int64_t>{{0, 1}}));
    EXPECT_EQ(s.row_tables, (std::vector<int>{0, 1}));
    EXPECT_EQ(s.row_keys, keys[clock]);
    EXPECT_EQ(s.next_row_tables,
              last ? std::vector<int>{} : (std::vector<int>{0, 1}));
    EXPECT_EQ(s.next_row_keys, last ? Keys() : keys[clock + 1]);
    EXPECT_EQ(s.ends, 1);
    EXPECT_EQ(s.next_weights, last ? 0u : 1u);
    ASSERT_EQ(s.end_results.size(), 1u);
    ASSERT_TRUE(s.end_results[0].ok()) << s.end_results[0].status();
    EXPECT_EQ(s.end_results[0]->version, last ? 0 : clock + 1);
    EXPECT_EQ(s.end_results[0]->staleness, 0);
  }
  // What the access counted agrees: rows pulled once, asked back by every
  // step but the last, pushed by every step.
  EXPECT_EQ(t.access.row_pulls(), 1);
  EXPECT_EQ(t.access.dense_pulls(), 1);
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 1);
  EXPECT_EQ(t.access.sparse_pushes(), 2 * kSteps);
  EXPECT_EQ(t.access.steps_ended(), kSteps);
  ExpectSameRows(t.access, t.plain_access);
  const int64_t cancels = t.access.cancels();
  p.reset();
  EXPECT_EQ(t.access.cancels(), cancels + 1);
}

}  // namespace
}  // namespace ps::worker::sparse_testing
