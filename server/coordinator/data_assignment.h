// Which worker trains what in a job: ranks, data shards and the evaluator.
// A job starts with rank i training data shard i and rank 0 evaluating; an
// evicted worker's data shards go to a survivor (the evaluator role moves
// to the lowest rank left); an idle worker takes a vacant rank back with
// its data shard. Every change bumps the membership epoch, which the
// reconciler sends to the shards and workers see in their assignment.
//
// Functions over a job's state under the JobTable's lock.
#ifndef PS_SERVER_COORDINATOR_DATA_ASSIGNMENT_H_
#define PS_SERVER_COORDINATOR_DATA_ASSIGNMENT_H_

#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

// The slots of a job starting on `workers` (rank = index), and
// num_data_shards, membership epoch 1 and total_steps to match.
void AssignInitialSlots(JobRecord& record, const std::vector<int64_t>& workers);

// The active slot that inherits an evicted worker's data shards: one not
// done before one done, then the fewest data shards, then the first in
// slot order. Null when no slot is active.
WorkerSlot* ChooseHeir(JobRecord& record);

// Removes the worker from the job (no-op unless it holds an active slot):
// banned workers are never given a rank of the job again. A job with data
// plans trains or skips its untrained batches (leftover_data.h); in a
// record from before plans its data shards go to ChooseHeir's pick. The job
// FAILS when it was the last worker and SUCCEEDS when every worker left is
// done.
void Evict(JobTable& table, Job& job, int64_t member_id,
           absl::string_view reason, bool banned, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Gives the job's vacant ranks, lowest first, to members of `idle` (taken
// out of it): the member that held the rank before if it is idle and not
// banned, else the lowest idle member not banned from the job. The new
// slot starts at the job's current step and takes the rank's data shard
// back from whoever inherited it (with plans: the shard's untrained tails,
// leftover_data.h).
void FillVacancies(JobTable& table, Job& job, std::set<int64_t>* idle,
                   WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_DATA_ASSIGNMENT_H_
