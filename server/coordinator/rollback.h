// The job-wide rollback after shards lost a running job (they restarted):
// every shard sets the job up again (SetupJob with replace) at the next
// incarnation, restored from one checkpoint version, and the workers start
// again from the matching step.
//  - BSP: every shard at exactly one version, the newest the restarted
//    shards restore that the others hold too (a shard without it lowers the
//    target for all). If none is common, every shard restores its newest at
//    or below the restarted shards' and all continue as that version.
//  - ASP / SSP: each shard restores its own newest checkpoint (their
//    versions count worker steps, written at different moments, so they
//    differ by about a checkpoint interval, which asynchronous training
//    tolerates); the workers restart at the lowest version / workers.
#ifndef PS_SERVER_COORDINATOR_ROLLBACK_H_
#define PS_SERVER_COORDINATOR_ROLLBACK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/shard_client.h"

namespace ps::coordinator {

struct RollbackResult {
  absl::Status status;     // the first setup that failed, or a BSP mismatch
  int64_t version = 0;     // the restored version (BSP: of every shard)
  int64_t start_step = 0;  // where the workers start again
  std::string note;        // the "rollback" event's message
};

// Sets shard `shard` up again and returns the version it restored.
// max_version < 0: its newest checkpoint; 0: none (the initial weights);
// > 0: its newest at or below. start_version > 0: it continues as that
// version whatever it restored.
using SetUpShard = std::function<absl::StatusOr<int64_t>(
    int shard, int64_t max_version, int64_t start_version)>;

// The choice of versions (above), as a sequence of setups. `lost`: the
// shards that restarted (empty: a retried rollback, starting from every
// shard). Stops at the first failed setup.
RollbackResult ChooseRollback(int num_shards, bool bsp, int num_workers,
                              int64_t incarnation, std::vector<int> lost,
                              const SetUpShard& setup);

// ChooseRollback over the job's shards through `shards` (no lock held),
// with `workers`' ids and joins as the active workers.
// `replica_epochs` (a replicated job's, by shard; empty: unreplicated):
// each shard is set up as a PRIMARY without backups at its epoch + 1, so
// that new backups join it by a state transfer (replicas.h).
RollbackResult RollBack(ShardClient* shards, const std::string& job_id,
                        const JobSpec& spec,
                        const std::vector<std::string>& servers,
                        const UpdateMembershipRequest& workers,
                        int64_t incarnation, std::vector<int> lost,
                        const std::vector<int64_t>& replica_epochs = {});

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_ROLLBACK_H_
