// BSP step aggregation: a step closes once enough active workers have
// ended it (all of them, less the job's backup workers); then every table
// applies the average of the counted workers' gradients of the step, late
// gradients are dropped, the version moves on, and pulls waiting for it
// are answered.
#ifndef PS_SERVER_SHARD_BSP_STEP_H_
#define PS_SERVER_SHARD_BSP_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/shard/apply_pool.h"
#include "server/shard/job.h"
#include "server/shard/push_pull.h"

namespace ps::server {

// Counts the end of step of push `args` once the worker's pushes numbered
// below it have landed (waiting on job.mu up to `deadline`), and takes the
// step into `take` if that completes it (TakeStepIfReady). An end of step
// for a step already closed (or closing) counts as dropped and sets
// result->dropped. For a `retry` (a duplicate of a push whose first attempt
// may have timed out in that wait, its data applied but its end of step not
// counted) it counts the end of step if that is still missing, and never
// counts a drop. DEADLINE_EXCEEDED if the earlier pushes did not land in
// time (or the server is shutting down).
absl::Status EndBspStep(Job& job, const PushArgs& args, absl::Time deadline,
                        bool retry, PushResult* result,
                        std::vector<int64_t>* take)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);

// If the open step has enough ends of step, moves the workers that ended it
// into `workers`, marks the step closing and returns true; the caller then
// runs ApplyStep without job.mu.
bool TakeStepIfReady(Job& job, std::vector<int64_t>* workers)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);

// Applies step `step` with the gradients of `workers` (Table::ApplyStep on
// every table, the chunks spread over `pool`), then sets the version to
// step + 1, reopens staging and moves the counted workers' clocks on.
// With `aligned_snapshots` (the shard writes checkpoints), at a multiple of
// the job's checkpoint.every_versions it also queues the state at step + 1
// in job.aligned_snapshots and calls `snapshot_queued`.
void ApplyStep(Job& job, int64_t step, const std::vector<int64_t>& workers,
               ApplyPool& pool, bool aligned_snapshots,
               absl::FunctionRef<void()> snapshot_queued)
    ABSL_LOCKS_EXCLUDED(job.apply_mu, job.mu);

// Whether a push's end of step would wait in EndBspStep for the worker's
// earlier pushes (ShardStore::PushMayWait).
bool EndOfStepMayWait(Job& job, const PushArgs& args)
    ABSL_LOCKS_EXCLUDED(job.mu);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_BSP_STEP_H_
