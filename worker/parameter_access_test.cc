#include "worker/parameter_access.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps::worker {
namespace {

// Implements only the three required calls, logging each, so that the
// defaults built on them can be watched.
class Logged : public ParameterAccess {
 public:
  absl::StatusOr<int64_t> Pull(int64_t clock,
                               std::vector<absl::Span<float>> t) override {
    log.push_back(absl::StrCat("pull ", clock));
    if (!pull_status.ok()) return pull_status;
    for (absl::Span<float> s : t) {
      for (float& x : s) x = static_cast<float>(clock);
    }
    return clock * 10;
  }
  absl::Status Push(int64_t clock, int64_t base_version, int index,
                    absl::Span<const float> grad) override {
    log.push_back(absl::StrCat("push ", clock, " ", base_version, " ", index,
                               " ", grad.size()));
    return push_status;
  }
  absl::StatusOr<int64_t> Finish(int64_t clock) override {
    log.push_back(absl::StrCat("finish ", clock));
    return 7;
  }
  std::vector<std::string> log;
  absl::Status pull_status, push_status;
};

TEST(ParameterAccess, PushPartTakesWholeTensorsOnly) {
  Logged p;
  const std::vector<float> g(4);
  EXPECT_TRUE(p.PushPart(3, 2, 1, 0, g).ok());
  EXPECT_EQ(p.PushPart(3, 2, 1, 2, g).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(p.log, (std::vector<std::string>{"push 3 2 1 4"}));
  EXPECT_TRUE(p.PartBoundaries(0).empty());
}

TEST(ParameterAccess, FinishAndPullFinishesThenPullsTheNextStep) {
  Logged p;
  std::vector<float> w(3);
  absl::StatusOr<ParameterAccess::StepEnd> end =
      p.FinishAndPull(4, {absl::MakeSpan(w)});
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->staleness, 7);
  EXPECT_EQ(end->version, 50);
  EXPECT_EQ(w, (std::vector<float>{5, 5, 5}));
  EXPECT_EQ(p.log, (std::vector<std::string>{"finish 4", "pull 5"}));
}

TEST(ParameterAccess, StartFinishAndPullIsOverWhenItReturns) {
  Logged p;
  std::vector<float> w(2);
  auto in = p.StartFinishAndPull(1, {absl::MakeSpan(w)});
  EXPECT_EQ(p.log, (std::vector<std::string>{"finish 1", "pull 2"}));
  EXPECT_TRUE(in->AwaitWeights(0, 0, 2).ok());
  absl::StatusOr<ParameterAccess::StepEnd> end = in->Wait();
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->version, 20);

  // A failed pull: every wait returns its error.
  p.pull_status = absl::UnavailableError("down");
  auto failed = p.StartFinishAndPull(2, {absl::MakeSpan(w)});
  EXPECT_EQ(failed->AwaitWeights(0, 0, 1).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed->Wait().status().code(), absl::StatusCode::kUnavailable);
}

TEST(ParameterAccess, StartStepEndPushesEveryTensorThenEndsTheStep) {
  Logged p;
  const std::vector<float> g0(2), g1(5);
  std::vector<float> w0(2), w1(5);
  ParameterAccess::PendingStepEnd pending =
      p.StartStepEnd(6, 4, {g0, g1}, {absl::MakeSpan(w0), absl::MakeSpan(w1)});
  EXPECT_EQ(p.log, (std::vector<std::string>{"push 6 4 0 2", "push 6 4 1 5",
                                             "finish 6", "pull 7"}));
  absl::StatusOr<ParameterAccess::StepEnd> end = pending();
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->version, 70);
  EXPECT_EQ(w1[4], 7);

  // A failed push: no end of step, and the wait returns the error.
  p.log.clear();
  p.push_status = absl::InvalidArgumentError("bad");
  pending =
      p.StartStepEnd(7, 5, {g0, g1}, {absl::MakeSpan(w0), absl::MakeSpan(w1)});
  EXPECT_EQ(p.log, (std::vector<std::string>{"push 7 5 0 2"}));
  EXPECT_EQ(pending().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParameterAccessDefaults, SparseTablesAreUnimplemented) {
  Logged access;
  std::vector<float> rows(2);
  const std::vector<uint64_t> keys = {1, 2};
  EXPECT_EQ(access.PullSparse(0, 0, keys, absl::MakeSpan(rows)).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(access.PushSparse(0, 0, 0, keys, rows).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(access.log.empty());
}

}  // namespace
}  // namespace ps::worker
