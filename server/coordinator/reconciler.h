// Bringing a job's shards in line with the coordinator's record, one round
// per call (every Tick for jobs that are running or not yet torn down, and
// at once when a job ends):
//  - a shard to check (a server re-registered, or the coordinator
//    restarted) is asked whether it still holds the job; one that lost it
//    (restarted) makes the whole job roll back (rollback.h) once every
//    shard is up; a rollback that failed is retried on later rounds;
//  - a shard behind the job's membership epoch is sent the active workers;
//  - a running job's shards are polled for their counters every
//    shard_poll_interval_ms (dropped and rejected gradients become events
//    and record totals);
//  - an ended job's shards are torn down (a final checkpoint if it
//    SUCCEEDED), after a last poll whose counters become a "shard_summary"
//    event; a shard that is down, or failed three teardowns, is left.
// The shard calls are made without the JobTable's lock; one round per job
// runs at a time (Job::reconciling), and none while the job is starting.
#ifndef PS_SERVER_COORDINATOR_RECONCILER_H_
#define PS_SERVER_COORDINATOR_RECONCILER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator_service.pb.h"
#include "proto/parameter_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/replicas.h"
#include "server/coordinator/rollback.h"
#include "server/coordinator/shard_client.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

// A shard call a round makes.
struct ShardAction {
  // kPromote: make a backup the primary; kDropBackups: tell a primary to
  // keep only its live backups; kAddBackups: give a primary a new backup
  // (replicas.h). Each sends `setup`, after `backups.setup` to each of
  // `backups` (kPromote: the other backups rebuilt; kAddBackups: the new
  // one); one that refuses is left out of `setup`.
  enum Kind {
    kCheck,
    kMembership,
    kPoll,
    kTeardown,
    kPromote,
    kDropBackups,
    kAddBackups
  } kind;
  int shard = 0;
  std::string address;
  int64_t member = 0;  // kPromote: the backup promoted
  SetupJobRequest setup;
  NewBackups backups;
  // kTeardown: the shard's backups, torn down too where no primary of the
  // job is (a spare or restarted server holding only backups).
  std::vector<std::string> replicas;
};

// The calls for the job's shards given which are up (by shard index),
// at most one per shard. A poll is stamped (ShardSync::last_poll_ms) when
// planned; an ended job's shard that is down is marked torn down.
std::vector<ShardAction> PlanShardActions(Job& job, const std::vector<bool>& up,
                                          int64_t now,
                                          int64_t poll_interval_ms);

// Folds a shard's push counters into the record; dropped and rejected
// gradients since the last poll become one event each (the first poll after
// a (re)setup only sets the baseline). Returns whether the totals changed.
bool UpdateCounters(JobTable& table, Job& job, int shard,
                    const ShardStatus& status, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// A finished rollback to `incarnation` on a RUNNING job: on success every
// worker restarts at the restored step (the slots' start step, clocks and
// rate samples, the record's step and epoch) and every shard is to be sent
// the membership again; on failure the rollback stays pending.
void ApplyRollback(JobTable& table, Job& job, int64_t incarnation,
                   const RollbackResult& rollback, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Thread-safe (the table's lock guards every job). Holds no state of its
// own; none of the pointers is owned.
class Reconciler {
 public:
  // `backup_timeout_ms`: a replicated shard's backup its primary has
  // waited for this long is dropped (replicas.h NoteBackupsUnanswered).
  Reconciler(int64_t shard_poll_interval_ms, int64_t backup_timeout_ms,
             JobTable* table, const Membership* members, ShardClient* shards,
             JobStore* store)
      : shard_poll_interval_ms_(shard_poll_interval_ms),
        backup_timeout_ms_(backup_timeout_ms),
        table_(table),
        members_(members),
        shards_(shards),
        store_(store) {}

  // One round for the job (nothing if unknown, starting, or in a round).
  void Reconcile(const std::string& job_id) ABSL_LOCKS_EXCLUDED(table_->mu());

 private:
  // What a round works from, copied under the lock.
  struct Round {
    std::string job_id;
    JobState state = PENDING;
    JobSpec spec;
    std::vector<std::string> servers;
    UpdateMembershipRequest membership;  // the active workers and epoch
    int64_t incarnation = 0;
    std::vector<int64_t> replica_epochs;  // by shard; empty: unreplicated
    bool all_up = true;
    bool rollback_pending = false;
    std::vector<ShardAction> actions;
  };
  // What the shards answered, by action.
  struct Outcome {
    std::vector<absl::Status> results;
    std::vector<std::string> notes;  // "server_restored" events
    std::vector<std::optional<ShardStatus>> totals;
    std::vector<int> lost;          // shards that restarted without the job
    std::vector<int64_t> versions;  // kPromote: the new primary's version
    // kPromote, kAddBackups: the backups that took their setup.
    std::vector<NewBackups> backups;
    std::optional<RollbackResult> rollback;
  };

  // Plans the round and marks the job reconciling; nullopt when there is
  // nothing to do.
  std::optional<Round> Begin(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_->mu());
  // The shard calls, and the rollback if one is due.
  Outcome CallShards(const Round& round) ABSL_LOCKS_EXCLUDED(table_->mu());
  void CallShard(const Round& round, size_t k, Outcome* out);
  void Commit(const Round& round, const Outcome& out, WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_->mu());
  // One action's answer; returns whether the record must be saved.
  bool CommitAction(Job& job, const Round& round, const Outcome& out, size_t k,
                    WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_->mu());

  const int64_t shard_poll_interval_ms_;
  const int64_t backup_timeout_ms_;
  JobTable* const table_;
  const Membership* const members_;
  ShardClient* const shards_;
  JobStore* const store_;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_RECONCILER_H_
