#include "worker/loop/plan_batches.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::worker {

WorkerPlan PlanOf(const WorkerAssignment& a) {
  WorkerPlan p;
  if (a.plan_size() > 0) {
    p.start = a.plan_start();
    p.segments = a.plan();
    return p;
  }
  if (a.data_shards().empty()) {
    p.segments.Add()->set_data_shard(a.rank());
  }
  for (int shard : a.data_shards()) p.segments.Add()->set_data_shard(shard);
  return p;
}

absl::StatusOr<PlannedBatch> PlanBatchAt(const WorkerPlan& plan, int64_t clock,
                                         int64_t shard_steps,
                                         int64_t steps_per_epoch) {
  if (shard_steps < 1 || steps_per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("no batches to plan: ", shard_steps,
                     " steps per data shard, ", steps_per_epoch, " per epoch"));
  }
  for (const PlanRun& r : PlanRuns(plan.start, plan.segments, shard_steps)) {
    if (clock < r.begin || clock >= r.end) continue;
    PlannedBatch b;
    b.data_shard = r.data_shard;
    b.batch = r.first_batch + (clock - r.begin);
    b.epoch = b.batch / steps_per_epoch;
    b.index = b.batch % steps_per_epoch;
    return b;
  }
  return absl::OutOfRangeError(absl::StrCat(
      "clock ", clock, " is outside the data plan (steps ", plan.start, " to ",
      PlanEnd(plan.start, plan.segments, shard_steps), ")"));
}

int64_t LivePlan::End() {
  if (current_) plan_ = current_();
  return PlanEnd(plan_.start, plan_.segments, shape_.total_steps);
}

absl::StatusOr<PlannedBatch> LivePlan::BatchAt(int64_t clock) const {
  return PlanBatchAt(plan_, std::max(clock, plan_.start), shape_.total_steps,
                     shape_.steps_per_epoch);
}

}  // namespace ps::worker
