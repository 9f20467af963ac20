// A job's status on a shard (psctl status, the coordinator's view): its
// version, each worker's clock, whom the job waits for, and counters.
#ifndef PS_SERVER_SHARD_SHARD_STATUS_H_
#define PS_SERVER_SHARD_SHARD_STATUS_H_

#include "proto/parameter_service.pb.h"
#include "server/shard/job.h"

namespace ps::server {

// Workers are listed by id. waiting_for: BSP, the active workers that have
// not ended the open step; ASP/SSP, the active workers at the lowest clock
// (when there are several workers).
ShardStatus JobStatus(Job& job) ABSL_LOCKS_EXCLUDED(job.mu);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SHARD_STATUS_H_
