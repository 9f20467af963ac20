#include "worker/loop/plan_batches.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "common/spec/data_plan.h"

namespace ps::worker {
namespace {

TEST(PlanBatches, AClockNamesItsDataShardEpochAndBatch) {
  WorkerAssignment a;
  a.set_plan_start(10);
  *a.add_plan() = PlanSegment(1, 0, 0);  // clocks 10-109: shard 1, batches 0-99
  *a.add_plan() = PlanSegment(0, 95, 98);  // clocks 110-112: shard 0, 95-97
  *a.add_plan() = PlanSegment(2, 40, 40);  // empty
  *a.add_plan() = PlanSegment(2, 30, 32);  // clocks 113-114
  const WorkerPlan plan = PlanOf(a);
  struct Case {
    int64_t clock;
    int shard;
    int64_t batch, epoch, index;
  };
  const Case cases[] = {{10, 1, 0, 0, 0},    {34, 1, 24, 1, 4},
                        {109, 1, 99, 4, 19}, {110, 0, 95, 4, 15},
                        {112, 0, 97, 4, 17}, {113, 2, 30, 1, 10},
                        {114, 2, 31, 1, 11}};
  for (const Case& c : cases) {
    absl::StatusOr<PlannedBatch> b = PlanBatchAt(plan, c.clock, 100, 20);
    ASSERT_TRUE(b.ok()) << c.clock << ": " << b.status();
    EXPECT_EQ(std::make_tuple(b->data_shard, b->batch, b->epoch, b->index),
              std::make_tuple(c.shard, c.batch, c.epoch, c.index))
        << "clock " << c.clock;
  }
  for (int64_t outside : {0, 9, 115, 1000}) {
    EXPECT_EQ(PlanBatchAt(plan, outside, 100, 20).status().code(),
              absl::StatusCode::kOutOfRange)
        << outside;
  }
  EXPECT_EQ(PlanBatchAt(plan, 10, 0, 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanBatchAt(plan, 10, 100, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanBatches, AnAssignmentWithoutAPlanTrainsItsShardsWhole) {
  WorkerAssignment a;
  a.set_rank(2);
  WorkerPlan p = PlanOf(a);
  ASSERT_EQ(p.segments.size(), 1);
  EXPECT_EQ(p.segments[0].data_shard(), 2);
  EXPECT_EQ(p.start, 0);
  a.add_data_shards(3);
  a.add_data_shards(1);
  p = PlanOf(a);
  ASSERT_EQ(p.segments.size(), 2);
  EXPECT_EQ(PlanBatchAt(p, 50, 50, 10)->data_shard, 1);
  EXPECT_EQ(PlanBatchAt(p, 50, 50, 10)->batch, 0);
}

TEST(PlanBatches, TheCoordinatorsCutAndTheWorkersReadingAgree) {
  // What a survivor is given is what the leaver would have trained, batch
  // for batch.
  DataPlan leaver;
  *leaver.Add() = PlanSegment(0, 0, 0);
  WorkerPlan before{0, leaver};
  std::vector<DataSegment> cut = CutPlan(0, &leaver, 37, 100);
  WorkerPlan survivor;
  *survivor.segments.Add() = PlanSegment(1, 0, 0);
  for (const DataSegment& d : cut) *survivor.segments.Add() = d;
  for (int64_t k = 0; k < 63; ++k) {
    absl::StatusOr<PlannedBatch> want = PlanBatchAt(before, 37 + k, 100, 30);
    absl::StatusOr<PlannedBatch> got = PlanBatchAt(survivor, 100 + k, 100, 30);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(std::make_tuple(got->data_shard, got->epoch, got->index),
              std::make_tuple(want->data_shard, want->epoch, want->index));
  }
}

}  // namespace
}  // namespace ps::worker

namespace ps::worker {
namespace {

// The plan read again at every End(): it grows and shrinks under a running
// loop; a clock before its start trains its first batch.
TEST(LivePlan, FollowsThePlanAsItChanges) {
  WorkerAssignment a;
  a.set_plan_start(10);
  *a.add_plan() = PlanSegment(1, 0, 5);  // clocks 10-14
  WorkerPlan now = PlanOf(a);
  LivePlan plan(a, [&now] { return now; },
                {.steps_per_epoch = 20, .total_steps = 100});
  EXPECT_EQ(plan.End(), 15);
  absl::StatusOr<PlannedBatch> b = plan.BatchAt(7);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(std::make_tuple(b->data_shard, b->batch), std::make_tuple(1, 0));
  EXPECT_EQ(plan.BatchAt(12)->batch, 2);
  EXPECT_EQ(plan.BatchAt(15).status().code(), absl::StatusCode::kOutOfRange);
  // A leaver's batches appended.
  *now.segments.Add() = PlanSegment(0, 3, 5);
  EXPECT_EQ(plan.End(), 17);
  EXPECT_EQ(
      std::make_tuple(plan.BatchAt(16)->data_shard, plan.BatchAt(16)->batch),
      std::make_tuple(0, 4));
  // A rejoining worker took shard 1 back after batch 2.
  now.segments.Clear();
  *now.segments.Add() = PlanSegment(1, 0, 2);
  EXPECT_EQ(plan.End(), 12);
  // Without a source the assignment's plan stays.
  LivePlan fixed(a, nullptr, {.steps_per_epoch = 20, .total_steps = 100});
  EXPECT_EQ(fixed.End(), 15);
}

}  // namespace
}  // namespace ps::worker
