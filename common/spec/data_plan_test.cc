#include "common/spec/data_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ps {
namespace {

DataPlan Plan(const std::vector<DataSegment>& segments) {
  DataPlan p;
  for (const DataSegment& s : segments) *p.Add() = s;
  return p;
}

std::string Str(const std::vector<DataSegment>& segments) {
  return DescribeSegments(segments, 100);
}

std::string Str(const DataPlan& plan) {
  return Str(std::vector<DataSegment>(plan.begin(), plan.end()));
}

constexpr int64_t kSteps = 100;  // steps per data shard

TEST(DataPlan, OpenEndedSegmentsRunToTheShardsEnd) {
  const DataPlan plan =
      Plan({PlanSegment(2, 0), PlanSegment(0, 40), PlanSegment(1, 10, 20)});
  const std::vector<PlanRun> runs = PlanRuns(5, plan, kSteps);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].data_shard, 2);
  EXPECT_EQ(runs[0].begin, 5);
  EXPECT_EQ(runs[0].end, 105);
  EXPECT_EQ(runs[1].first_batch, 40);
  EXPECT_EQ(runs[1].begin, 105);
  EXPECT_EQ(runs[1].end, 165);
  EXPECT_EQ(runs[2].begin, 165);
  EXPECT_EQ(runs[2].end, 175);
  EXPECT_EQ(PlanEnd(5, plan, kSteps), 175);
  EXPECT_EQ(PlanBatches(plan, kSteps), 170);
  EXPECT_EQ(PlanShards(plan), (std::vector<int>{2, 0, 1}));
}

TEST(DataPlan, EmptySegmentsTakeNoClock) {
  const DataPlan plan =
      Plan({PlanSegment(0, 100), PlanSegment(1, 7, 7), PlanSegment(2, 90)});
  const std::vector<PlanRun> runs = PlanRuns(0, plan, kSteps);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].data_shard, 2);
  EXPECT_EQ(PlanEnd(0, plan, kSteps), 10);
  EXPECT_EQ(PlanEnd(30, DataPlan(), kSteps), 30);
}

TEST(DataPlan, BatchesBeforeAClock) {
  const DataPlan plan = Plan({PlanSegment(0, 0), PlanSegment(1, 50)});
  struct Case {
    int64_t clock, want;
  } cases[] = {{0, 0}, {10, 0}, {11, 1}, {110, 100}, {130, 120}, {999, 150}};
  for (const Case& c : cases) {
    EXPECT_EQ(PlanBatchesBefore(10, plan, c.clock, kSteps), c.want)
        << "clock " << c.clock;
  }
}

TEST(DataPlan, CutKeepsWhatCameBeforeTheClock) {
  DataPlan plan = Plan({PlanSegment(0, 0), PlanSegment(1, 50)});
  const std::vector<DataSegment> rest = CutPlan(0, &plan, 30, kSteps);
  EXPECT_EQ(Str(plan), "shard 0 batches 0-29");
  EXPECT_EQ(Str(rest), "shard 0 batches 30-99, shard 1 batches 50-99");
  EXPECT_EQ(PlanEnd(0, plan, kSteps), 30);

  DataPlan inside = Plan({PlanSegment(0, 0), PlanSegment(1, 50)});
  EXPECT_EQ(Str(CutPlan(0, &inside, 120, kSteps)), "shard 1 batches 70-99");
  EXPECT_EQ(Str(inside), "shard 0 batches 0-99, shard 1 batches 50-69");

  DataPlan all = Plan({PlanSegment(0, 0, 0)});
  EXPECT_TRUE(CutPlan(0, &all, 100, kSteps).empty());
  EXPECT_EQ(Str(all), "shard 0 batches 0-99");
  EXPECT_EQ(Str(CutPlan(0, &all, 0, kSteps)), "shard 0 batches 0-99");
  EXPECT_TRUE(all.empty());
}

TEST(DataPlan, OnlyTheTailOfAShardIsTakenBack) {
  // Shard 1's runs: one in the middle (kept: taking it would move shard
  // 2's batches to other clocks) and the last two.
  DataPlan plan =
      Plan({PlanSegment(0, 0), PlanSegment(1, 0, 10), PlanSegment(2, 0, 10),
            PlanSegment(1, 40, 60), PlanSegment(1, 80)});
  // Clocks: shard 0 0-99, shard 1 100-109, shard 2 110-119, shard 1
  // 120-139 and 140-159.
  EXPECT_EQ(Str(CutShardTail(0, &plan, 1, 130, kSteps)),
            "shard 1 batches 50-59, shard 1 batches 80-99");
  EXPECT_EQ(Str(plan),
            "shard 0 batches 0-99, shard 1 batches 0-9, shard 2 batches 0-9, "
            "shard 1 batches 40-49");
  EXPECT_TRUE(CutShardTail(0, &plan, 2, 0, kSteps).empty())
      << "shard 2 is not at the tail";
  EXPECT_TRUE(CutShardTail(0, &plan, 1, 130, kSteps).empty())
      << "nothing of shard 1 left after clock 130";
  EXPECT_EQ(Str(CutShardTail(0, &plan, 1, 0, kSteps)), "shard 1 batches 40-49");
}

TEST(DataPlan, SplitsIntoNearlyEqualConsecutivePieces) {
  const std::vector<DataSegment> left = {PlanSegment(3, 93),
                                         PlanSegment(1, 0, 4)};  // 11
  const auto pieces = SplitSegments(left, 3, kSteps);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(Str(pieces[0]), "shard 3 batches 93-96");
  EXPECT_EQ(Str(pieces[1]), "shard 3 batches 97-99, shard 1 batches 0-0");
  EXPECT_EQ(Str(pieces[2]), "shard 1 batches 1-3");
  EXPECT_EQ(SplitSegments({PlanSegment(0, 98)}, 5, kSteps).size(), 2u)
      << "no more pieces than batches";
  EXPECT_TRUE(SplitSegments({PlanSegment(0, 100)}, 2, kSteps).empty());
  EXPECT_TRUE(SplitSegments({}, 2, kSteps).empty());
}

}  // namespace
}  // namespace ps
