// The step pipeline on a model with sparse tables under ASP with
// overlap_communication: step t + 1 computes while step t's end travels, on
// the rows step t - 1's end brought.
#include <gtest/gtest.h>

#include "worker/loop/sparse_pipeline_test_util.h"

namespace ps::worker::sparse_testing {
namespace {

// Under overlap a step's EndStep waits for the previous step's end: its
// error returns there, the calls in flight are cancelled, and the next step
// pulls its weights and rows itself (those the failed end fetched are not
// used).
TEST(StepPipelineOverlapSparse,
     AFailedStepEndUnderOverlapCancelsAndPullsAgain) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  access.fail_ends = {1};
  Ratings ratings;
  std::vector<data::Batch> b;
  for (int i = 0; i < 5; ++i) b.push_back(ratings.Next(16));
  std::unique_ptr<StepPipeline> p = t.Make(Options(true, 5), &access);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->lookahead(), 2);
  ASSERT_TRUE(RunStep(*p, b[0], &b[2]).ok());
  ASSERT_TRUE(RunStep(*p, b[1], &b[3]).ok());  // its end fails
  absl::StatusOr<bool> more = p->Pull(false);
  ASSERT_TRUE(more.ok() && *more) << more.status();
  absl::StatusOr<std::optional<float>> loss = p->Compute(b[2]);
  ASSERT_TRUE(loss.ok() && loss->has_value()) << loss.status();
  const int64_t cancels = t.access.cancels();
  EXPECT_EQ(p->EndStep(&b[4]).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(t.access.cancels(), cancels + 1);
  p->NextStep();
  // Step 3: b[3]'s rows came with step 1's end, which failed.
  absl::StatusOr<StepOutcome> r = RunStep(*p, b[3], nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(access.pulled[3].tensors, 1);
  EXPECT_EQ(access.pulled[3].tables, (std::vector<int>{0, 1}));
  r = RunStep(*p, b[4], nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(p->Drain().ok());
}

// With overlap (ASP, overlap_communication), step t + 1 computes while step
// t's end travels, on the weights and rows step t - 1's end brought: after
// the first two steps no row is pulled on its own (step t's end asks the
// rows of batch t + 2), each step's dense gradient travels with its end
// (no push of its own) on weights one more step behind, each step
// completes the previous step's end (the first none, the last its own
// too), and the model still learns.
TEST(StepPipelineOverlapSparse, OverlappedStepsLearnOnRowsOfTheEndBeforeLast) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  Ratings ratings;
  std::vector<data::Batch> batches;
  constexpr int kSteps = 600;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(32));
  std::unique_ptr<StepPipeline> p = t.Make(Options(true, kSteps), &access);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->lookahead(), 2);
  double first = 0, last = 0;
  int64_t ends = 0;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch* ahead = step + 2 < kSteps ? &batches[step + 2] : nullptr;
    absl::StatusOr<StepOutcome> r = RunStep(*p, batches[step], ahead);
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status();
    EXPECT_EQ(r->seen.staleness_ends, EndsSeenAt(step, kSteps))
        << "step " << step;
    ends += r->seen.staleness_ends;
    if (step < 20) first += r->loss / 20;
    if (step >= kSteps - 20) last += r->loss / 20;
  }
  EXPECT_EQ(ends, kSteps);
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
  EXPECT_EQ(t.access.row_pulls(), 2);  // steps 0 and 1
  EXPECT_EQ(t.access.dense_pulls(), 1);
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 2);
  EXPECT_EQ(t.access.sparse_pushes(), 2 * kSteps);
  EXPECT_EQ(t.access.steps_ended(), kSteps);
  EXPECT_TRUE(p->Drain().ok());  // nothing left on its way
  EXPECT_EQ(p->TakeObservations().staleness_ends, 0);

  ASSERT_EQ(access.pulled.size(), 2u);
  EXPECT_EQ(access.pulled[0].tensors, 1);
  EXPECT_EQ(access.pulled[0].keys, KeysOf(*t.plain_model, batches[0]));
  EXPECT_EQ(access.pulled[1].tensors, 0);
  EXPECT_EQ(access.pulled[1].keys, KeysOf(*t.plain_model, batches[1]));
  ASSERT_EQ(access.stepped.size(), static_cast<size_t>(kSteps));
  for (int64_t clock = 0; clock < kSteps; ++clock) {
    SCOPED_TRACE("step " + std::to_string(clock));
    const CallRecorder::Stepped& s = access.stepped[clock];
    EXPECT_EQ(s.pushes, 0);
    EXPECT_EQ(s.ends, 1);
    EXPECT_EQ(s.dense_elements, (std::map<int, int64_t>{{0, 1}}));
    EXPECT_EQ(s.row_tables, (std::vector<int>{0, 1}));
    // Steps 0 and 1 on the first weights, then one step end behind.
    EXPECT_EQ(s.base_versions,
              std::set<int64_t>{std::max<int64_t>(0, clock - 1)});
    EXPECT_EQ(s.next_row_keys, clock + 2 < kSteps
                                   ? KeysOf(*t.plain_model, batches[clock + 2])
                                   : Keys());
    ASSERT_EQ(s.end_results.size(), 1u);
    EXPECT_TRUE(s.end_results[0].ok()) << s.end_results[0].status();
  }
}

// Drain completes a step end on its way (before an evaluation uses the
// access), and its staleness counts in the observations; the rows that end
// brought (for the step after next) still serve their step, while a step
// on other keys than those fetched pulls its rows.
TEST(StepPipelineOverlapSparse, DrainCompletesTheEndOnItsWay) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  Ratings ratings;
  const data::Batch b0 = ratings.Next(16), b1 = ratings.Next(16),
                    b2 = ratings.Next(16), b3 = ratings.Next(16),
                    other = ratings.Next(16);
  std::unique_ptr<StepPipeline> p = t.Make(Options(true, 4), &access);
  ASSERT_NE(p, nullptr);
  absl::StatusOr<StepOutcome> r = RunStep(*p, b0, &b2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seen.staleness_ends, 0);
  ASSERT_EQ(access.stepped[0].end_results.size(), 1u);
  EXPECT_EQ(access.stepped[0].end_results[0].status().code(),
            absl::StatusCode::kUnknown);  // on its way: never waited for
  ASSERT_TRUE(p->Drain().ok());
  EXPECT_TRUE(access.stepped[0].end_results[0].ok())
      << access.stepped[0].end_results[0].status();
  EXPECT_EQ(p->TakeObservations().staleness_ends, 1);  // step 0's
  r = RunStep(*p, b1, &b3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seen.staleness_ends, 0);  // step 0's was Drain's
  r = RunStep(*p, b2, nullptr);          // its rows came with step 0's end
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seen.staleness_ends, 1);
  r = RunStep(*p, other, nullptr);  // step 1's end brought b3's rows
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seen.staleness_ends, 2);
  EXPECT_EQ(t.access.row_pulls(), 3);  // b0, b1, other
  EXPECT_EQ((std::vector<int64_t>{0, 1, 3}), [&] {
    std::vector<int64_t> clocks;
    for (const auto& [clock, pulled] : access.pulled) clocks.push_back(clock);
    return clocks;
  }());
  EXPECT_EQ(access.pulled[3].keys, KeysOf(*t.plain_model, other));
  EXPECT_EQ(t.access.steps_ended(), 4);
  EXPECT_TRUE(p->Drain().ok());
  EXPECT_EQ(p->TakeObservations().staleness_ends, 0);
}

// Under overlap, a Pull of all the weights (an evaluation is due)
// completes the end on its way, so the evaluation finds the access and the
// model free; the step then computes on the rows that had arrived for it,
// and the steps go on to the end.
TEST(StepPipelineOverlapSparse, AnEvaluationUnderOverlapFindsTheCallsComplete) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  Ratings ratings;
  constexpr int kSteps = 8;
  constexpr int kEval = 3;
  std::vector<data::Batch> batches;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(16));
  const data::Batch probe = ratings.Next(8);
  std::unique_ptr<StepPipeline> p = t.Make(Options(true, kSteps), &access);
  ASSERT_NE(p, nullptr);
  int64_t ends = 0;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch* ahead = step + 2 < kSteps ? &batches[step + 2] : nullptr;
    std::function<absl::Status()> evaluation;
    if (step == kEval) {
      evaluation = [&]() -> absl::Status {
        // The end of the step before is over.
        const auto& results = access.stepped[kEval - 1].end_results;
        EXPECT_EQ(results.size(), 1u);
        EXPECT_TRUE(!results.empty() && results[0].ok());
        EXPECT_EQ(t.access.steps_ended(), kEval);
        const StepObservations seen = p->TakeObservations();
        EXPECT_EQ(seen.staleness_ends, 1);
        ends += seen.staleness_ends;
        return EvaluateProbe(*t.model, access, kEval, probe);
      };
    }
    absl::StatusOr<StepOutcome> r =
        RunStep(*p, batches[step], ahead, evaluation);
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status();
    EXPECT_TRUE(std::isfinite(r->loss));
    ends += r->seen.staleness_ends;
  }
  EXPECT_EQ(ends, kSteps);
  EXPECT_EQ(t.access.steps_ended(), kSteps);
  // Rows were pulled at steps 0 and 1 and, at step kEval, the probe's for
  // the evaluation only: step kEval's own came with the end of step
  // kEval - 2, and those of step kEval + 1 with the end the evaluation's
  // Pull completed.
  std::vector<int64_t> clocks;
  for (const auto& [clock, pulled] : access.pulled) clocks.push_back(clock);
  EXPECT_EQ(clocks, (std::vector<int64_t>{0, 1, kEval}));
  EXPECT_EQ(access.pulled[kEval].tensors, 0);
  EXPECT_EQ(access.pulled[kEval].keys, KeysOf(*t.plain_model, probe));
  EXPECT_EQ(t.access.row_pulls(), 3);
  EXPECT_TRUE(p->Drain().ok());
  for (const auto& [clock, s] : access.stepped) {
    ASSERT_EQ(s.end_results.size(), 1u) << "step " << clock;
    EXPECT_TRUE(s.end_results[0].ok()) << "step " << clock;
  }
}

}  // namespace
}  // namespace ps::worker::sparse_testing
