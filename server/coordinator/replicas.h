// Replicated shards on the coordinator (JobSpec.replication): where each
// shard's backups go, and what a replica's loss changes.
//
// Placement: the job's servers in member order are 0..n-1, shard i's
// primary is server i, and its backups are BackupServers (placement.h):
// servers i+1, ..., i+factor-1 (mod n), never two replicas of a shard on
// one server, so a factor above the servers is refused at submit (and a
// pending job waits for enough).
//
// Losses (the reconciler acts, the RPCs outside the table's lock):
// - A shard's primary dies (its member is DEAD) or comes back without the
//   job (restarted): its first live backup in sync is promoted (SetupJob
//   with PRIMARY and the next epoch) and becomes servers(i); event
//   `failover`. Its other live backups are set up again at the new epoch
//   and given to it, each rebuilt by a state transfer. No rollback: the
//   workers retry what was not acknowledged at the new address. Only a
//   shard with no live backup in sync rolls the job back.
// - A backup dies, or its primary reports it unanswered for longer than
//   the coordinator's --backup_timeout_ms (a link cut between the two, the
//   coordinator still reaching both): its primary is told to drop it
//   (SetupJob again with the remaining backups), so that its answers stop
//   waiting for it; event `backup_lost`, saying which. The coordinator's
//   word decides: a cut-off backup is never promoted, and a new one is
//   built elsewhere.
// Replacements: a shard with fewer backups than factor - 1 gets one on a
// live server that holds no replica of it (PlanBackupAdd): SetupJob BACKUP
// there, then the primary's SetupJob with it added; the primary builds it
// by a state transfer (server/shard/replicated_shard.h). It is "building"
// (never promoted) until a poll of the primary shows it in sync; events
// `backup_added` and `backup_ready`.
#ifndef PS_SERVER_COORDINATOR_REPLICAS_H_
#define PS_SERVER_COORDINATOR_REPLICAS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"
#include "proto/coordinator_service.pb.h"
#include "proto/parameter_service.pb.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership.h"

namespace ps::coordinator {

// The job's replicas per shard (1: unreplicated).
int ReplicationFactor(const JobSpec& spec);

// Why `spec` cannot run on `num_servers` servers ("" if it can; always ""
// unreplicated, whose jobs wait for a first server).
std::string ReplicationShortfall(const JobSpec& spec, int num_servers);

// Fills record.replicas from record.servers / server_members (a starting
// job); clears it when unreplicated.
void AssignReplicas(JobRecord& record);

// The SetupJob a server is sent for shard `shard` of a starting job:
// BACKUP on a backup, PRIMARY (with its backups' addresses) on the primary.
SetupJobRequest ReplicaSetup(const JobRecord& record, int shard,
                             SetupJobRequest::ReplicaRole role,
                             const std::vector<int64_t>& workers);

// Shard `shard`'s backups whose member is alive (and not found gone by
// NoteShardAnswer, nor cut off by NoteBackupsUnanswered), in order; with
// `in_sync`, only those not building.
std::vector<int> LiveBackups(const Job& job, int shard,
                             const Membership& members, bool in_sync = false);

// Servers to set up as a shard's new backups before its primary is given
// them (SetupJob `setup`, BACKUP at the shard's epoch, to each).
struct NewBackups {
  std::vector<int64_t> members;
  std::vector<std::string> addresses;
  SetupJobRequest setup;
};

// A promotion to plan: the backup (index in replicas(shard)), the SetupJob
// that makes it the primary, and the shard's other live backups, set up
// again at the new epoch and rebuilt by the new primary.
struct Promotion {
  int backup = -1;
  int64_t member = 0;
  std::string address;
  SetupJobRequest request;
  NewBackups rebuilt;
};
// The promotion of shard `shard`'s first live backup in sync; backup -1:
// none.
Promotion PlanPromotion(const Job& job, int shard, const Membership& members);

// A new backup for shard `shard` when it has fewer than factor - 1 (and
// none lost still to drop): the live server holding the fewest replicas of
// the job's shards (ties: the lowest member id) among those holding none
// of this shard. `primary` is the SetupJob that gives the shard's primary
// its backups with the new one; empty members when there is none to add.
NewBackups PlanBackupAdd(const Job& job, int shard, const Membership& members,
                         SetupJobRequest* primary);

// The SetupJob that tells shard `shard`'s primary to keep only its live
// backups; an empty job_id when none of them is lost.
SetupJobRequest PlanBackupDrop(const Job& job, int shard,
                               const Membership& members);

// Records a done promotion (`setup` sent to `member` at `address`, which
// answered `version`): it is shard `shard`'s primary, and `rebuilt` (those
// of the plan that took their setup) its backups, building.
void ApplyPromotion(JobTable& table, Job& job, int shard, int64_t member,
                    const std::string& address, const SetupJobRequest& setup,
                    int64_t version, const NewBackups& rebuilt,
                    WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Records shard `shard`'s new backups `added` (building); event
// `backup_added`.
void ApplyBackupAdd(JobTable& table, Job& job, int shard,
                    const NewBackups& added, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// A poll of shard `shard`'s primary answered `status`: its building
// backups that it reports in sync become promotable (event
// `backup_ready`). Returns whether the record changed.
bool NoteBackupsInSync(JobTable& table, Job& job, int shard,
                       const ShardStatus& status, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Records that shard `shard` keeps only the backups at `kept` addresses.
void ApplyBackupDrop(JobTable& table, Job& job, int shard,
                     const SetupJobRequest& kept, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// A replicated shard's primary answered a call with `result` at `now_ms`:
// UNAVAILABLE twice at least kUnreachableMs apart (its process is gone)
// makes it lost, to fail over without waiting for the member timeout (and
// its server is no backup any more); an answer clears it. Unreplicated
// shards are left to that timeout.
inline constexpr int64_t kUnreachableMs = 500;
void NoteShardAnswer(Job& job, int shard, const absl::Status& result,
                     int64_t now_ms);

// A poll of shard `shard`'s primary answered `status` at `now_ms`: a
// backup it has waited for `timeout_ms` or longer is cut off (it leaves the
// shard's live backups: the next round drops it). One cut off for
// kCutRetryMs and no longer a backup may be chosen again (the link may be
// back); a failover clears the list (the new primary has links of its
// own).
inline constexpr int64_t kCutRetryMs = 30000;
void NoteBackupsUnanswered(Job& job, int shard, const ShardStatus& status,
                           int64_t now_ms, int64_t timeout_ms);

// A server whose process restarted (the state it held is gone): the
// backups it held leave the record (their primaries are told, next round),
// and the shards it was the primary of fail over.
void NoteServerRestarted(JobTable& table, int64_t member, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_REPLICAS_H_
