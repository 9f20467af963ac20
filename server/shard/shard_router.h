// ps_server's shard store: every shard this server holds, of every job,
// with its replica role (SetupJobRequest.replica_role).
//
// A ShardStore holds one shard per job; a server holds several shards of
// one job when it keeps a backup of a neighbour's shard (replica j of shard
// i is on server (i + j) mod servers) or took one over in a failover. The
// router keeps as many stores as it needs for that and sends each call to
// the store of its (job, shard): PushRequest.shard and PullRequest.shard
// name it; a call without one goes to the job's only primary here.
//
// Roles:
// - UNREPLICATED: the store answers as it always did.
// - PRIMARY: its pushes, pulls and membership updates go through a
//   ReplicatedShard (replicated_shard.h), which feeds the backups.
// - BACKUP: the store is fed by Replicate (a ReplicaApplier,
//   replica_entry.h) and the workers' calls are refused with UNAVAILABLE
//   (the primary answers them).
// A SetupJob with PRIMARY for a shard held here as BACKUP promotes it: its
// state goes on from the last entry it holds, and nothing is restored; the
// backups it is given get a state transfer. A repeated SetupJob with
// PRIMARY drops the backups no longer listed (the coordinator's way of
// removing a dead backup) and adds the new ones, each built by a state
// transfer (replicated_shard.h).
#ifndef PS_SERVER_SHARD_SHARD_ROUTER_H_
#define PS_SERVER_SHARD_SHARD_ROUTER_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/metrics.h"
#include "server/shard/replica_entry.h"
#include "server/shard/replicated_shard.h"
#include "server/shard/shard_store.h"

namespace ps::server {

using StoreFactory =
    std::function<absl::StatusOr<std::unique_ptr<ShardStore>>()>;

class ShardRouter final : public ShardStore {
 public:
  // `new_store` makes each store (the first at once); `links` connects a
  // primary to a backup's address. With `metrics`, each backup counts the
  // changes it answered otherwise than its primary in
  // shard_replica_mismatches_total{job, shard}, and each replicated shard
  // held here shows at every collection (PublishReplicas):
  //   shard_replica_role{job, shard}      1 primary, 2 backup (0: gone)
  //   shard_replica_epoch{job, shard}     raised at every failover
  //   shard_replica_backups{job, shard, state="in_sync"|"building"}
  //   shard_replica_lag_entries{job, shard}  a primary's farthest backup's
  //                                           changes not yet held
  static absl::StatusOr<std::unique_ptr<ShardRouter>> Create(
      StoreFactory new_store, ReplicaLinkFactory links,
      MetricsRegistry* metrics = nullptr);
  ~ShardRouter() override;

  absl::StatusOr<SetupJobResponse> SetupJob(
      const SetupJobRequest& request) override;
  absl::Status TeardownJob(const TeardownJobRequest& request) override;
  absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const UpdateMembershipRequest& request) override;
  absl::StatusOr<PushResult> Push(const PushArgs& args,
                                  absl::Time deadline) override;
  bool PushMayWait(const PushArgs& args) override;
  absl::StatusOr<PullResult> PullWithRows(const PullArgs& args,
                                          absl::Time deadline, ChunkSink sink,
                                          const SparseSink* rows) override;
  absl::StatusOr<CheckpointResponse> Checkpoint(
      absl::string_view job_id) override;
  absl::Status CheckpointDue() override;
  void WaitForCheckpointWork(absl::Duration timeout) override;
  absl::Status CheckpointAll() override;
  using ShardStore::GetShardStatus;
  absl::StatusOr<ShardStatus> GetShardStatus(absl::string_view job_id,
                                             int shard) override;
  absl::StatusOr<ReplicateResponse> Replicate(
      const ReplicateRequest& request) override;
  absl::StatusOr<ShardImage> Image(absl::string_view) override {
    return absl::UnimplementedError(
        "a server's shards transfer their state through Replicate");
  }
  absl::Status Install(absl::string_view, const ShardImage&) override {
    return absl::UnimplementedError(
        "a server's shards transfer their state through Replicate");
  }
  void Shutdown() override;
  absl::StatusOr<std::shared_ptr<const Placement>> GetPlacement(
      absl::string_view job_id) override;

 private:
  struct Held {
    int shard = 0;
    ShardStore* store = nullptr;
    SetupJobRequest::ReplicaRole role = SetupJobRequest::UNREPLICATED;
    std::shared_ptr<ReplicatedShard> primary;  // PRIMARY
    std::shared_ptr<ReplicaApplier> backup;    // BACKUP
  };
  // Where a worker's call goes: the store, and its ReplicatedShard if
  // replicated (kept alive for the call).
  struct Route {
    ShardStore* store = nullptr;
    std::shared_ptr<ReplicatedShard> primary;
  };

  ShardRouter(StoreFactory new_store, ReplicaLinkFactory links,
              MetricsRegistry* metrics, std::unique_ptr<ShardStore> first);

  absl::StatusOr<Route> RouteFor(absl::string_view job_id, int shard);
  // The held shards of a job (none: empty).
  std::vector<Held*> HeldOf(absl::string_view job_id)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A store holding no shard of `job_id` (made if needed).
  absl::StatusOr<ShardStore*> FreeStore(absl::string_view job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `transfer`: the backups start from an image (replicated_shard.h).
  std::shared_ptr<ReplicatedShard> MakePrimary(ShardStore* store,
                                               const SetupJobRequest& request,
                                               bool transfer);
  std::vector<ShardStore*> Stores() const;
  // Releases every replicated shard's waiting answers and stops its senders.
  void StopPrimaries();
  // Sets the replica gauges (Create's comment) of every replicated shard
  // held here, and zeroes those of shards gone since the last call.
  void PublishReplicas();

  const StoreFactory new_store_;
  const ReplicaLinkFactory links_;
  MetricsRegistry* const metrics_;  // may be null
  // Serialises SetupJob and TeardownJob (the role changes).
  absl::Mutex setup_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<ShardStore>> stores_ ABSL_GUARDED_BY(mu_);
  // By job id, then shard index.
  std::map<std::string, std::map<int, std::unique_ptr<Held>>, std::less<>> held_
      ABSL_GUARDED_BY(mu_);
  // (job, shard) whose replica gauges PublishReplicas set last time.
  absl::Mutex publish_mu_;
  std::set<std::pair<std::string, int>> published_ ABSL_GUARDED_BY(publish_mu_);
  // Last: removed before the rest goes.
  std::unique_ptr<MetricsRegistry::CollectHook> replica_hook_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SHARD_ROUTER_H_
