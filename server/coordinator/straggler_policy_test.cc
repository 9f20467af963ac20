#include "server/coordinator/straggler_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace ps::coordinator {
namespace {

constexpr int64_t kWindow = 10000;

MetricPoint Compute(double ms) {
  MetricPoint p;
  p.set_name("compute_ms");
  p.set_value(ms);
  return p;
}

// A job of `n` active workers (member ids 1..n, rank = id - 1) under the
// policy.
Job JobWith(int n, float slow_ratio, int window_steps) {
  Job job;
  job.record.mutable_spec()->mutable_straggler_policy()->set_slow_ratio(
      slow_ratio);
  job.record.mutable_spec()->mutable_straggler_policy()->set_window_steps(
      window_steps);
  for (int i = 1; i <= n; ++i) {
    WorkerSlot* s = job.record.add_slots();
    s->set_member_id(i);
    s->set_rank(i - 1);
    s->set_active(true);
  }
  return job;
}

// Every worker reports its clock at `now`: steps_per_sec[i] x seconds.
void Beat(Job& job, int64_t now, const std::vector<int>& steps_per_sec,
          int64_t t0) {
  for (size_t i = 0; i < steps_per_sec.size(); ++i) {
    WorkerRuntime& rt = job.runtime[static_cast<int64_t>(i) + 1];
    rt.clock = steps_per_sec[i] * (now - t0) / 1000;
    RecordClockSample(rt, rt.clock, now, kWindow);
  }
}

TEST(StragglerPolicy, ClockSamplesCoverTheWindow) {
  WorkerRuntime rt;
  for (int64_t t = 0; t <= 30000; t += 1000) {
    RecordClockSample(rt, t / 100, t, kWindow);
  }
  ASSERT_GE(rt.samples.size(), 2u);
  EXPECT_EQ(rt.samples.back().first, 30000);
  // The oldest kept sample is the last one at least a window old.
  EXPECT_EQ(rt.samples.front().first, 20000);
}

TEST(StragglerPolicy, RateNeedsHalfAWindowOfFreshSamples) {
  WorkerRuntime rt;
  EXPECT_FALSE(StepRate(rt, 0, kWindow, false).has_value());
  RecordClockSample(rt, 0, 0, kWindow);
  RecordClockSample(rt, 20, 4000, kWindow);
  EXPECT_FALSE(StepRate(rt, 4000, kWindow, false).has_value())
      << "4 s of a 10 s window";
  RecordClockSample(rt, 30, 6000, kWindow);
  ASSERT_TRUE(StepRate(rt, 6000, kWindow, false).has_value());
  EXPECT_DOUBLE_EQ(*StepRate(rt, 6000, kWindow, false), 5.0);
  EXPECT_FALSE(StepRate(rt, 6000 + kWindow + 1, kWindow, false).has_value())
      << "the newest sample is older than the window";
}

TEST(StragglerPolicy, ComputeTimeIsAnAverageOfTheReports) {
  WorkerRuntime rt;
  MetricPoint other = Compute(50);
  other.set_name("push_ms");
  ObserveComputeTime(rt, other, 100);
  ObserveComputeTime(rt, Compute(0), 100);
  EXPECT_EQ(rt.busy_ms, 0) << "only positive compute_ms counts";
  ObserveComputeTime(rt, Compute(10), 100);
  EXPECT_DOUBLE_EQ(rt.busy_ms, 10);
  ObserveComputeTime(rt, Compute(20), 200);
  EXPECT_DOUBLE_EQ(rt.busy_ms, 13);  // 0.7 x 10 + 0.3 x 20
  EXPECT_EQ(rt.busy_updated_ms, 200);
  EXPECT_DOUBLE_EQ(*StepRate(rt, 200, kWindow, /*use_busy=*/true), 1000.0 / 13);
}

TEST(StragglerPolicy, SlowWorkerIsFlaggedOnceAfterTheWindowSteps) {
  Job job = JobWith(3, 0.5f, 30);
  std::vector<Straggler> flagged;
  int64_t flagged_at = -1;
  for (int64_t t = 1000; t <= 20000; t += 1000) {
    Beat(job, t, {10, 10, 2}, 0);  // worker 3 is 5x slower
    std::vector<Straggler> now = DetectStragglers(job, t, kWindow);
    if (!now.empty() && flagged_at < 0) flagged_at = t;
    flagged.insert(flagged.end(), now.begin(), now.end());
  }
  ASSERT_EQ(flagged.size(), 1u) << "flagged once per slow spell";
  EXPECT_EQ(flagged[0].member_id, 3);
  EXPECT_EQ(flagged[0].rank, 2);
  EXPECT_NE(flagged[0].why.find("below 0.50 x the median 10.00/s"),
            std::string::npos)
      << flagged[0].why;
  // Rates exist once the samples span half the window (at 6 s: 1 s to
  // 6 s); the slow spell starts there at median clock 60, and the median
  // clock moves 10 steps/s: 30 steps later is 9 s.
  EXPECT_EQ(flagged_at, 9000);
  EXPECT_TRUE(job.runtime[3].flagged);
  EXPECT_FALSE(job.runtime[1].flagged);
}

TEST(StragglerPolicy, AWorkerThatCatchesUpIsForgiven) {
  Job job = JobWith(2, 0.5f, 1);
  WorkerRuntime& slow = job.runtime[2];
  slow.below_since_median_clock = 3;
  slow.flagged = true;
  for (int64_t t = 1000; t <= 6000; t += 1000) {
    Beat(job, t, {10, 10}, 0);
    EXPECT_TRUE(DetectStragglers(job, t, kWindow).empty());
  }
  EXPECT_EQ(slow.below_since_median_clock, -1);
  EXPECT_FALSE(slow.flagged);
}

TEST(StragglerPolicy, NothingIsDecidedWithoutAPolicyOrMeasurements) {
  struct Case {
    const char* name;
    float slow_ratio;
    int workers;
    int64_t now;
  };
  for (const Case& c : std::vector<Case>{
           {"policy off", 0, 3, 20000},
           {"a single worker", 0.5f, 1, 20000},
           {"rates not measured yet", 0.5f, 3, 3000},
       }) {
    Job job = JobWith(c.workers, c.slow_ratio, 1);
    std::vector<int> rates = {10, 10, 1};
    rates.resize(c.workers);
    for (int64_t t = 1000; t <= c.now; t += 1000) {
      Beat(job, t, rates, 0);
      EXPECT_TRUE(DetectStragglers(job, t, kWindow).empty()) << c.name;
    }
  }
}

TEST(StragglerPolicy, FinishedWorkersAreNotCompared) {
  Job job = JobWith(3, 0.5f, 1);
  job.record.mutable_slots(2)->set_done(true);  // the slow one is done
  std::vector<Straggler> flagged;
  for (int64_t t = 1000; t <= 20000; t += 1000) {
    Beat(job, t, {10, 10, 1}, 0);
    for (const Straggler& s : DetectStragglers(job, t, kWindow)) {
      flagged.push_back(s);
    }
  }
  EXPECT_TRUE(flagged.empty());
}

// In BSP every clock moves at the slowest worker's pace: when every worker
// reports its compute time, that decides.
TEST(StragglerPolicy, ComputeTimeDecidesWhenEveryWorkerReportsIt) {
  Job job = JobWith(3, 0.5f, 5);
  std::vector<Straggler> flagged;
  for (int64_t t = 1000; t <= 10000; t += 1000) {
    Beat(job, t, {2, 2, 2}, 0);
    for (int64_t id = 1; id <= 3; ++id) {
      ObserveComputeTime(job.runtime[id], Compute(id == 3 ? 30 : 10), t);
    }
    for (const Straggler& s : DetectStragglers(job, t, kWindow)) {
      flagged.push_back(s);
    }
  }
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].member_id, 3);
  // A stale compute time (older than three windows) falls back to clocks,
  // which are equal: nobody is slow.
  Job stale = JobWith(3, 0.5f, 1);
  for (int64_t id = 1; id <= 3; ++id) {
    ObserveComputeTime(stale.runtime[id], Compute(id == 3 ? 30 : 10), 0);
  }
  for (int64_t t = 1000; t <= 40000; t += 1000) {
    Beat(stale, t, {2, 2, 2}, 0);
    if (t > 3 * kWindow) {
      EXPECT_TRUE(DetectStragglers(stale, t, kWindow).empty()) << t;
    }
  }
}

}  // namespace
}  // namespace ps::coordinator
