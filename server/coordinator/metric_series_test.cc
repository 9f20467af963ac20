#include "server/coordinator/metric_series.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps::coordinator {
namespace {

MetricPoint Point(const std::string& name, int64_t member, int64_t step,
                  double value, int64_t incarnation = 0) {
  MetricPoint p;
  p.set_name(name);
  p.set_member_id(member);
  p.set_step(step);
  p.set_value(value);
  p.set_epoch(step / 100.0);
  p.set_time_ms(step * 10);
  p.set_incarnation(incarnation);
  return p;
}

int64_t Weight(const MetricPoint& p) { return p.merged() > 1 ? p.merged() : 1; }

TEST(MetricSeries, ShortSeriesAreKeptAsReported) {
  MetricSeriesSet set(16);
  for (int64_t s = 0; s < 16; ++s) set.Add(Point("train_loss", 1, s, s * 0.5));
  const std::vector<MetricPoint> points = set.Points();
  ASSERT_EQ(points.size(), 16u);
  for (int64_t s = 0; s < 16; ++s) {
    EXPECT_EQ(points[s].step(), s);
    EXPECT_EQ(points[s].value(), s * 0.5);
    EXPECT_EQ(points[s].merged(), 0) << "as reported";
  }
  EXPECT_EQ(set.reported(), 16);
  EXPECT_EQ(set.size(), 16);
}

TEST(MetricSeries, AnEvaluationOfTheFinalModelStaysMarked) {
  MetricSeriesSet set(16);
  set.Add(Point("test_accuracy", 1, 100, 0.8));
  MetricPoint last = Point("test_accuracy", 1, 200, 0.85);
  last.set_final_model(true);
  set.Add(last);
  const std::vector<MetricPoint> points = set.Points();
  ASSERT_EQ(points.size(), 2u);
  EXPECT_FALSE(points[0].final_model());
  EXPECT_TRUE(points[1].final_model());
}

TEST(MetricSeries, APastTheCapSeriesKeepsItsFirstAndLastPointsAndTheCap) {
  for (int cap : {8, 16, 100, 4096}) {
    MetricSeriesSet set(cap);
    const int64_t n = 50 * cap + 7;
    double sum = 0;
    for (int64_t s = 0; s < n; ++s) {
      const double v = std::sin(s * 0.01) + s;
      sum += v;
      set.Add(Point("train_loss", 1, s, v));
      ASSERT_LE(set.size(), cap) << "cap " << cap << " after step " << s;
    }
    const std::vector<MetricPoint> points = set.Points();
    ASSERT_FALSE(points.empty());
    EXPECT_EQ(points.front().step(), 0) << "cap " << cap;
    EXPECT_EQ(points.front().merged(), 0) << "cap " << cap;
    EXPECT_EQ(points.back().step(), n - 1) << "cap " << cap;
    EXPECT_EQ(points.back().merged(), 0) << "cap " << cap;
    EXPECT_EQ(points.back().value(), std::sin((n - 1) * 0.01) + (n - 1));
    // The newest quarter is as reported, step by step.
    for (int i = 0; i < cap / 4; ++i) {
      const MetricPoint& p = points[points.size() - 1 - i];
      EXPECT_EQ(p.step(), n - 1 - i) << "cap " << cap;
      EXPECT_EQ(p.merged(), 0) << "cap " << cap;
    }
    // Every reported point is counted once, the weighted mean is exact,
    // and the step axis stays in order.
    int64_t weights = 0;
    double weighted = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      weights += Weight(points[i]);
      weighted += points[i].value() * Weight(points[i]);
      if (i > 0) {
        EXPECT_LT(points[i - 1].step(), points[i].step());
      }
    }
    EXPECT_EQ(weights, n) << "cap " << cap;
    EXPECT_NEAR(weighted / n, sum / n, 1e-9 * std::abs(sum / n));
    EXPECT_EQ(set.reported(), n);
    EXPECT_EQ(set.size(), static_cast<int64_t>(points.size()));
  }
}

TEST(MetricSeries, MemoryPerSeriesIsBounded) {
  MetricSeriesSet set(1024);
  int64_t at_cap = 0;
  for (int64_t s = 0; s < 200000; ++s) {
    set.Add(Point("examples_per_sec", 1, s, 1));
    if (s == 1024) at_cap = set.bytes();
  }
  EXPECT_GT(at_cap, 0);
  EXPECT_EQ(set.bytes(), at_cap) << "no growth past the cap";
  EXPECT_LE(set.bytes(), 2 * 1024 * 64 + 64)
      << "a point is at most 64 bytes (and the name)";
}

TEST(MetricSeries, MergedPointsCarryMeansAndRange) {
  MetricSeriesSet set(8);
  // Values 0..99 at steps 0..99: each merged point's mean lies inside its
  // range, and its step, time and epoch are its points' means.
  for (int64_t s = 0; s < 100; ++s) set.Add(Point("x", 1, s, s));
  bool some_merged = false;
  for (const MetricPoint& p : set.Points()) {
    if (p.merged() <= 1) continue;
    some_merged = true;
    EXPECT_LE(p.min_value(), p.value());
    EXPECT_GE(p.max_value(), p.value());
    EXPECT_EQ(p.max_value() - p.min_value(), p.merged() - 1)
        << "neighbours only: a run of consecutive steps";
    EXPECT_NEAR(p.value(), (p.min_value() + p.max_value()) / 2, 1e-9);
    EXPECT_NEAR(static_cast<double>(p.step()), p.value(), 0.5001);
    EXPECT_NEAR(static_cast<double>(p.time_ms()), p.value() * 10, 0.5001);
    EXPECT_NEAR(p.epoch(), p.value() / 100, 1e-9);
  }
  EXPECT_TRUE(some_merged);
}

TEST(MetricSeries, OlderPointsAreEvenlyMerged) {
  for (int cap : {64, 200, 4096}) {
    for (int64_t n : {cap * 3, cap * 37, cap * 100 + 5}) {
      MetricSeriesSet set(cap);
      for (int64_t s = 0; s < n; ++s) set.Add(Point("x", 1, s, 1));
      // Most of the merged part's points stand for about as many reported
      // points each (within a factor of two of the heaviest), so a plot's
      // older part is evenly spaced.
      int64_t heaviest = 0, merged = 0, near_heaviest = 0;
      const std::vector<MetricPoint> points = set.Points();
      for (const MetricPoint& p : points)
        heaviest = std::max(heaviest, Weight(p));
      for (const MetricPoint& p : points) {
        if (p.merged() <= 1) continue;
        ++merged;
        near_heaviest += 2 * Weight(p) >= heaviest;
      }
      ASSERT_GT(merged, 0) << "cap " << cap << " n " << n;
      EXPECT_GE(near_heaviest, merged * 8 / 10) << "cap " << cap << " n " << n;
      // Weights never grow towards the newest points.
      for (size_t i = 2; i < points.size(); ++i) {
        EXPECT_GE(Weight(points[i - 1]), Weight(points[i]))
            << "cap " << cap << " n " << n << " point " << i;
      }
    }
  }
}

TEST(MetricSeries, SeriesAreByNameMemberAndIncarnation) {
  MetricSeriesSet set(8);
  for (int64_t s = 0; s < 100; ++s) {
    set.Add(Point("train_loss", 1, s, 1));
    set.Add(Point("train_loss", 2, s, 2));
    set.Add(Point("examples_per_sec", 1, s, 3));
  }
  set.Add(Point("train_loss", 1, 50, 4, /*incarnation=*/1));
  EXPECT_EQ(set.num_series(), 4);
  EXPECT_EQ(set.reported(), 301);
  EXPECT_LE(set.size(), 3 * 8 + 1);
  for (const MetricPoint& p : set.Points()) {
    // Merging stays within a series: its values never mix.
    if (p.name() == "train_loss" && p.incarnation() == 0) {
      EXPECT_EQ(p.value(), p.member_id() == 1 ? 1 : 2);
    } else if (p.name() == "examples_per_sec") {
      EXPECT_EQ(p.value(), 3);
    } else {
      EXPECT_EQ(p.value(), 4);
      EXPECT_EQ(p.incarnation(), 1);
    }
  }
}

// In the order added across series, not by time: a restarted worker's
// times start at 0 again (its step 5 here, reported last, has time 0).
TEST(MetricSeries, PointsComeInTheOrderAddedAndFiltered) {
  MetricSeriesSet set;
  set.Add(Point("b", 1, 3, 0));
  set.Add(Point("a", 2, 1, 0));
  set.Add(Point("a", 1, 2, 0));
  MetricPoint restarted = Point("a", 1, 5, 1);
  restarted.set_time_ms(0);
  set.Add(restarted);
  std::vector<int64_t> steps;
  for (const MetricPoint& p : set.Points()) steps.push_back(p.step());
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 1, 2, 5}));
  const std::vector<MetricPoint> only_a =
      set.Points([](const MetricPoint& p) { return p.name() == "a"; });
  ASSERT_EQ(only_a.size(), 3u);
  EXPECT_EQ(only_a[0].member_id(), 2);
}

TEST(MetricSeries, TooSmallCapsAreRaised) {
  MetricSeriesSet set(1);
  EXPECT_EQ(set.max_points_per_series(), MetricSeriesSet::kMinPointsPerSeries);
  for (int64_t s = 0; s < 1000; ++s) set.Add(Point("x", 1, s, 1));
  EXPECT_LE(set.size(), MetricSeriesSet::kMinPointsPerSeries);
}

}  // namespace
}  // namespace ps::coordinator
