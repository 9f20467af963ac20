// Which batch a worker trains at a clock: its data plan
// (WorkerAssignment.plan, common/spec/data_plan.h) read batch by batch. Batch b
// of a data shard is batch b % steps_per_epoch of epoch b / steps_per_epoch
// of that shard's slice of the epoch's permutation (worker/data/sharding.h), so
// a clock names the same examples on the coordinator's side and on any
// worker that is given the plan. Readers of other formats address their
// data the same way: (data shard, batch).
#ifndef PS_WORKER_LOOP_PLAN_BATCHES_H_
#define PS_WORKER_LOOP_PLAN_BATCHES_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "common/spec/data_plan.h"
#include "proto/coordinator_service.pb.h"

namespace ps::worker {

// A worker's plan: trained from clock `start`, one batch per step.
struct WorkerPlan {
  int64_t start = 0;
  DataPlan segments;
};

// The assignment's plan; for an assignment without one (a coordinator
// from before plans), all of each of its data shards (its rank's when it
// names none), one after the other, from clock 0.
WorkerPlan PlanOf(const WorkerAssignment& a);

// Where the batch of one clock comes from.
struct PlannedBatch {
  int data_shard = 0;
  int64_t batch = 0;  // of the data shard, from 0 across epochs
  int64_t epoch = 0;  // batch / steps_per_epoch
  int64_t index = 0;  // batch % steps_per_epoch: within the epoch
};

// The batch `plan` trains at `clock`. OUT_OF_RANGE for a clock before the
// plan's start or at or past its end; INVALID_ARGUMENT for shard_steps or
// steps_per_epoch < 1.
absl::StatusOr<PlannedBatch> PlanBatchAt(const WorkerPlan& plan, int64_t clock,
                                         int64_t shard_steps,
                                         int64_t steps_per_epoch);

// A job's data shape as a worker derives it from its data (the same on
// every worker): full batches per epoch of a data shard, and the steps of
// each data shard (data.max_steps, else epochs x steps_per_epoch).
struct DataShape {
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
};

// A worker's plan while it trains: read again (from
// `current`, when set) by End(), before every step, since it may grow (a
// survivor takes on a leaver's batches) or shrink (a rejoining worker takes
// its data shard back). Not thread-safe.
class LivePlan {
 public:
  LivePlan(const WorkerAssignment& a, std::function<WorkerPlan()> current,
           DataShape shape)
      : plan_(PlanOf(a)), current_(std::move(current)), shape_(shape) {}

  // The clock after the plan's last batch, the plan read again first.
  int64_t End();
  // The batch of `clock` (PlanBatchAt). A clock before the plan's start (a
  // BSP worker that joined at the shards' step, below the start its
  // assignment named) trains the plan's first batch, which its start
  // trains again: the plan still ends where the others' do.
  absl::StatusOr<PlannedBatch> BatchAt(int64_t clock) const;

 private:
  WorkerPlan plan_;
  const std::function<WorkerPlan()> current_;
  const DataShape shape_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_PLAN_BATCHES_H_
