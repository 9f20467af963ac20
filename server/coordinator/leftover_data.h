// Workers' data plans (WorkerSlot.plan, common/spec/data_plan.h) and what
// becomes of a departed worker's untrained batches. A job starts with rank i's
// plan being all of data shard i from clock 0. When a worker leaves for good,
// its plan is cut at the last clock it reported and the rest is, under
// data.leftover_data:
//   TRAIN (default)  spread over the survivors, continued where it stopped:
//                    under ASP over those still training in nearly equal
//                    parts (the longer parts to the plans ending first);
//                    under BSP and SSP over all of them in exactly equal
//                    parts, so that every plan keeps the same length and the
//                    step barriers and staleness bounds keep closing (the
//                    shards count a finished worker as stopped where it
//                    ended); the few batches that do not divide evenly
//                    (fewer than the survivors) are skipped and counted.
//                    Event "data_moved".
//   SKIP             counted in JobRecord.examples_skipped. Event
//                    "data_skipped".
// A survivor that had finished gets done = false and trains its new part
// from the clock its plan had ended at. A worker that rejoins takes its
// rank's data shard back (TakeBackRankData).
//
// Functions over a job's state under the JobTable's lock. The plans are part
// of the record, so SaveRecord makes them durable.
#ifndef PS_SERVER_COORDINATOR_LEFTOVER_DATA_H_
#define PS_SERVER_COORDINATOR_LEFTOVER_DATA_H_

#include <cstdint>

#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

// Gives each slot of a starting job the plan "all of data shard `rank`".
void AssignInitialPlans(JobRecord& record);

// Whether the job's slots carry plans (records from before plans do not:
// their data shards move whole, data_assignment.h).
bool UsesPlans(const JobRecord& record);

// Cuts the plan of `gone` (already inactive) at `clock` and trains or skips
// the rest as above. Events go to the job; the caller saves the record.
// While the job's steps per data shard are unknown (JobShardSteps 0: text
// data its workers are still counting) nothing is cut: `gone` is marked
// leftover_pending at `clock` (event "data_pending").
void MoveLeftoverData(JobTable& table, Job& job, WorkerSlot& gone,
                      int64_t clock, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Once the job's steps per data shard are known, MoveLeftoverData for each
// slot marked leftover_pending (unless a worker rejoined at its rank and
// took its data shard back), and saves the record.
void MovePendingLeftovers(JobTable& table, Job& job, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// The plan of `back`, a slot rejoining as `back.rank()` at its start_step:
// the untrained tails of its rank's data shard, taken from the active
// slots' plans at the clocks they last reported, then the shard's batches
// nobody held (skipped when it left; no longer counted as skipped). Under
// BSP and SSP the plan ends where the others' do: what does not fit is
// skipped and counted.
void TakeBackRankData(JobTable& table, Job& job, WorkerSlot& back,
                      WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_LEFTOVER_DATA_H_
