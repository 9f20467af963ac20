// A replicated shard's state transfer (ShardImage, parameter_service.proto):
// a job's whole state on a shard, taken between two changes, and made
// again on a new backup, which then applies the primary's log from the
// entry after it (replicated_shard.h). The image is the tables'
// checkpoint (weights, optimizer slots and step counts, sparse rows oldest
// first) plus what a checkpoint leaves out: each row's recency and each
// admission filter's counters, the workers' clocks and exactly-once
// sequence numbers, the version and the membership epoch, so that the new
// backup holds what the primary holds bit for bit.
//
// Under BSP an image is taken only with nothing staged for the open step
// (right after a step closed): staged gradients are not part of it.
#ifndef PS_SERVER_SHARD_SHARD_IMAGE_H_
#define PS_SERVER_SHARD_SHARD_IMAGE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/job.h"

namespace ps::server {

// The job's state now (index left 0 for the caller), or FAILED_PRECONDITION
// while a BSP step has something staged or a push is being applied. Takes
// job.apply_mu exclusively, then job.mu; the caller keeps changes out
// (ReplicatedShard's turn).
absl::StatusOr<ShardImage> ImageOf(Job& job);

// Makes `job` (set up from the same spec and layout) the state in `image`.
// FAILED_PRECONDITION if the image does not fit the job's tables; the
// job's state is then undefined (the backup is dropped and built again).
absl::Status InstallImage(Job& job, const ShardImage& image);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SHARD_IMAGE_H_
