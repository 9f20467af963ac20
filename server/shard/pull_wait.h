// When a pull may read: BSP, once the parts it reads (or with whole_step,
// the job) are at min_version; SSP, once every active worker's clock is
// within the job's staleness of the pull's; ASP at once. With after_seq, the
// worker's pushes up to that number must have landed first.
#ifndef PS_SERVER_SHARD_PULL_WAIT_H_
#define PS_SERVER_SHARD_PULL_WAIT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/shard/job.h"
#include "server/shard/push_pull.h"

namespace ps::server {

// Waits (on job.mu, until `deadline`) until `args` may read; returns the
// lowest clock of the active workers (PullResult::min_clock). An SSP pull first
// moves the worker's clock up to the pull's. Errors: FAILED_PRECONDITION (not
// an active member), DEADLINE_EXCEEDED (saying what it waited for), UNAVAILABLE
// (the job is rolling back, the server is shutting down), NOT_FOUND (torn
// down).
absl::StatusOr<int64_t> AwaitPull(Job& job, const PullArgs& args,
                                  absl::Time deadline)
    ABSL_LOCKS_EXCLUDED(job.mu);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_PULL_WAIT_H_
