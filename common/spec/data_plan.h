// A worker's data plan (WorkerAssignment.plan): runs of consecutive batches
// of data shards, trained one batch per step from clock plan_start on. The
// coordinator cuts and hands out plans (a worker that leaves gives the
// survivors what it had not trained, continued where it stopped); the
// worker follows its plan batch by batch. Both use this arithmetic, so a
// clock means the same batch on either side.
//
// `shard_steps` is the job's steps per data shard (data.max_steps, else
// epochs x steps_per_epoch): a segment with end_batch 0 runs to it.
#ifndef PS_COMMON_SPEC_DATA_PLAN_H_
#define PS_COMMON_SPEC_DATA_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/coordinator_service.pb.h"

namespace ps {

using DataPlan = google::protobuf::RepeatedPtrField<DataSegment>;

// The segment of batches [first, end) of data shard `data_shard` (end 0:
// to the shard's end).
DataSegment PlanSegment(int data_shard, int64_t first, int64_t end = 0);

// A segment with its clocks: batches first_batch.. at clocks [begin, end).
struct PlanRun {
  int data_shard = 0;
  int64_t first_batch = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

// One past the segment's last batch (end_batch, or shard_steps for 0).
int64_t SegmentEnd(const DataSegment& s, int64_t shard_steps);
// The segment's batches; 0 when it is empty.
int64_t SegmentBatches(const DataSegment& s, int64_t shard_steps);

// The plan's non-empty segments with their clocks, from plan_start.
std::vector<PlanRun> PlanRuns(int64_t plan_start, const DataPlan& plan,
                              int64_t shard_steps);
// The clock after the plan's last batch (plan_start for an empty plan).
int64_t PlanEnd(int64_t plan_start, const DataPlan& plan, int64_t shard_steps);
// The plan's batches, all of them.
int64_t PlanBatches(const DataPlan& plan, int64_t shard_steps);
// The batches a worker at `clock` has trained: those at clocks below it.
int64_t PlanBatchesBefore(int64_t plan_start, const DataPlan& plan,
                          int64_t clock, int64_t shard_steps);

// Removes from `plan` what comes at clocks >= `clock` and returns it, in
// order (the plan then ends at `clock`, or earlier).
std::vector<DataSegment> CutPlan(int64_t plan_start, DataPlan* plan,
                                 int64_t clock, int64_t shard_steps);
// Removes from the end of `plan` the segments of `data_shard` at clocks
// >= `clock` (the last of them cut at `clock` when it straddles it) and
// returns them in order. Only the plan's tail is taken, so no other batch
// moves to another clock.
std::vector<DataSegment> CutShardTail(int64_t plan_start, DataPlan* plan,
                                      int data_shard, int64_t clock,
                                      int64_t shard_steps);
// Cuts `segments` (in order) into at most `parts` consecutive pieces of
// nearly equal batches (the first ones one batch longer), each a list of
// segments with explicit end batches. Fewer pieces when there are fewer
// batches; none when there are none.
std::vector<std::vector<DataSegment>> SplitSegments(
    const std::vector<DataSegment>& segments, int parts, int64_t shard_steps);

// The data shards of the plan, in order of first appearance.
std::vector<int> PlanShards(const DataPlan& plan);
// "shard 2 batches 40-99" per segment, joined with ", ".
std::string DescribeSegments(const std::vector<DataSegment>& segments,
                             int64_t shard_steps);

}  // namespace ps

#endif  // PS_COMMON_SPEC_DATA_PLAN_H_
