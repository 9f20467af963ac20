#include "worker/loop/metric_window.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/platform/fake_clock.h"

namespace ps::worker {
namespace {

// The points of every report, by name, and how many reports came.
struct Reports {
  int calls = 0;
  std::vector<std::map<std::string, MetricPoint>> points;
  MetricSink Sink() {
    return [this](std::vector<MetricPoint> p, bool done) {
      EXPECT_FALSE(done);
      ++calls;
      std::map<std::string, MetricPoint>& by_name = points.emplace_back();
      for (const MetricPoint& m : p) by_name[m.name()] = m;
    };
  }
};

StepSplit Split(int wait, int pull, int compute, int push) {
  return {absl::Milliseconds(wait), absl::Milliseconds(pull),
          absl::Milliseconds(compute), absl::Milliseconds(push)};
}

TEST(MetricStamp, StampsTheEpochAndTheTimeSinceTheJobStarted) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 20);
  clock.AdvanceMs(1500);
  const MetricPoint p = stamp.Point("train_loss", 2.5, 30);
  EXPECT_EQ(p.name(), "train_loss");
  EXPECT_EQ(p.value(), 2.5);
  EXPECT_EQ(p.step(), 30);
  EXPECT_EQ(p.epoch(), 1.5);
  EXPECT_EQ(p.time_ms(), 1500);
  // The wall time too: the coordinator places a restarted worker's points
  // by it (its time_ms starts again).
  EXPECT_EQ(p.unix_ms(), absl::ToUnixMillis(clock.Now()));
}

TEST(MetricWindow, ReportsMeansAndThroughputOfItsSteps) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 10);
  MetricWindow window(&stamp, &clock,
                      {.report_every_steps = 20, .batch_size = 64});
  window.AddStep(1.0f, Split(1, 2, 3, 4));
  window.AddStaleness(1, 1);
  window.AddStep(2.0f, Split(3, 4, 5, 6));
  window.AddStaleness(2, 1);
  clock.AdvanceMs(100);
  Reports r;
  window.Report(7, r.Sink());
  ASSERT_EQ(r.calls, 1);
  std::map<std::string, MetricPoint>& p = r.points[0];
  ASSERT_EQ(p.size(), 9u);
  EXPECT_DOUBLE_EQ(p["train_loss"].value(), 1.5);
  EXPECT_DOUBLE_EQ(p["examples_per_sec"].value(), 2 * 64 / 0.1);
  EXPECT_DOUBLE_EQ(p["step_time_ms"].value(), 50);
  EXPECT_DOUBLE_EQ(p["wait_ms"].value(), 2);
  EXPECT_DOUBLE_EQ(p["pull_ms"].value(), 3);
  EXPECT_DOUBLE_EQ(p["compute_ms"].value(), 4);
  EXPECT_DOUBLE_EQ(p["push_ms"].value(), 5);
  EXPECT_DOUBLE_EQ(p["staleness"].value(), 1.5);
  EXPECT_DOUBLE_EQ(p["clock"].value(), 7);
  for (const auto& [name, point] : p) {
    EXPECT_EQ(point.step(), 7) << name;
    EXPECT_DOUBLE_EQ(point.epoch(), 0.7) << name;
    EXPECT_EQ(point.time_ms(), 100) << name;
  }
}

TEST(MetricWindow, ExtraPointsGoWithEachReport) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 10);
  int calls = 0;
  MetricWindow window(
      &stamp, &clock,
      {.report_every_steps = 20, .batch_size = 1, .extra = [&calls] {
         ++calls;
         return std::vector<std::pair<std::string, double>>{
             {"topk_sent_fraction", 0.1 * calls}};
       }});
  Reports r;
  window.Report(1, r.Sink());  // no steps: nothing, not even the extras
  EXPECT_EQ(calls, 0);
  for (int i = 1; i <= 2; ++i) {
    window.AddStep(1, Split(0, 0, 1, 0));
    clock.AdvanceMs(5);
    window.Report(i, r.Sink());
  }
  ASSERT_EQ(r.calls, 2);
  EXPECT_EQ(r.points[0].size(), 10u);
  EXPECT_DOUBLE_EQ(r.points[0]["topk_sent_fraction"].value(), 0.1);
  EXPECT_DOUBLE_EQ(r.points[1]["topk_sent_fraction"].value(), 0.2);
  EXPECT_EQ(r.points[1]["topk_sent_fraction"].step(), 2);
}

TEST(MetricWindow, StalenessIsAveragedOverTheStepEndsThatReportedIt) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 10);
  MetricWindow window(&stamp, &clock, {});
  // Three steps, of which two ends reported staleness 3 and 5.
  window.AddStep(1, Split(0, 0, 1, 0));
  window.AddStep(1, Split(0, 0, 1, 0));
  window.AddStaleness(8, 2);
  window.AddStep(1, Split(0, 0, 1, 0));
  clock.AdvanceMs(3);
  Reports r;
  window.Report(3, r.Sink());
  ASSERT_EQ(r.calls, 1);
  EXPECT_DOUBLE_EQ(r.points[0]["staleness"].value(), 4);

  // None known: 0.
  window.AddStep(1, Split(0, 0, 1, 0));
  clock.AdvanceMs(1);
  window.Report(4, r.Sink());
  ASSERT_EQ(r.calls, 2);
  EXPECT_DOUBLE_EQ(r.points[1]["staleness"].value(), 0);
}

TEST(MetricWindow, DueEveryFewStepsAndAfterTheLast) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 10);
  struct Case {
    int steps;
    int64_t clock, total;
    bool due;
  } cases[] = {
      {1, 1, 100, false},  {2, 2, 100, false},  {3, 3, 100, true},
      {1, 100, 100, true}, {1, 99, 100, false}, {4, 4, 100, true},
  };
  for (const Case& c : cases) {
    MetricWindow w(&stamp, &clock, {.report_every_steps = 3});
    for (int i = 0; i < c.steps; ++i) w.AddStep(1, Split(0, 0, 0, 0));
    EXPECT_EQ(w.Due(c.clock, c.total), c.due)
        << c.steps << " steps, clock " << c.clock << " of " << c.total;
  }
}

TEST(MetricWindow, TheReportsOwnTimeCountsInNeitherWindow) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 10);
  MetricWindow window(&stamp, &clock, {.batch_size = 10});
  window.AddStep(1, Split(0, 0, 20, 0));
  clock.AdvanceMs(20);
  Reports r;
  MetricSink slow = [&](std::vector<MetricPoint> p, bool done) {
    r.Sink()(std::move(p), done);
    clock.AdvanceMs(1000);  // e.g. the RPC to the coordinator
  };
  window.Report(1, slow);
  EXPECT_EQ(window.steps(), 0);
  window.AddStep(1, Split(0, 0, 10, 0));
  clock.AdvanceMs(10);
  window.Report(2, r.Sink());
  ASSERT_EQ(r.calls, 2);
  EXPECT_DOUBLE_EQ(r.points[0]["step_time_ms"].value(), 20);
  EXPECT_DOUBLE_EQ(r.points[1]["step_time_ms"].value(), 10);
  EXPECT_DOUBLE_EQ(r.points[1]["examples_per_sec"].value(), 1000);
}

TEST(MetricWindow, AWindowOfNoStepsSendsNothing) {
  FakeClock clock;
  const MetricStamp stamp(&clock, 10);
  MetricWindow window(&stamp, &clock, {});
  Reports r;
  window.Report(0, r.Sink());
  EXPECT_EQ(r.calls, 0);
  // No wall time yet: no throughput rather than a division by zero.
  window.AddStep(1, Split(0, 0, 0, 0));
  window.Report(1, r.Sink());
  ASSERT_EQ(r.calls, 1);
  EXPECT_EQ(r.points[0]["examples_per_sec"].value(), 0);
}

}  // namespace
}  // namespace ps::worker
