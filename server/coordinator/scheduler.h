// The scheduler: starts queued jobs, oldest first, one at a time. A job
// starts when at least one server is ALIVE and enough workers are idle
// (spec.num_workers, or every idle worker when 0): it is laid out on every
// ALIVE server (shard i on the i-th in member id order) and set up there;
// its workers get ranks (data_assignment.h) and the job turns RUNNING. A
// job that cannot start says why in its reason; a failed setup is undone
// on the shards that took it and retried on a later Tick, unless a shard
// refused it for good (RefusedForGood): then the job FAILS once, with that
// shard's reason.
#ifndef PS_SERVER_COORDINATOR_SCHEDULER_H_
#define PS_SERVER_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/shard_client.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

// Whether the member heartbeated within a few heartbeat intervals: only
// such a worker gets a rank (one evicted for silence is still ALIVE until
// the member timeout, and must not be taken back before it speaks again).
bool Fresh(const Member& m, int64_t now, int64_t heartbeat_interval_ms);

// Whether the member holds an active slot in a job that is RUNNING or
// being started.
bool IsBusy(JobTable& table, int64_t member_id)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Of `workers`, those that can train `spec`: Python workers (registered
// with device "python", the ps package) take the jobs with `python {}`
// and no script; ps_worker daemons every other job (a python.script they
// start themselves).
std::vector<int64_t> WorkersFor(const std::vector<int64_t>& workers,
                                const Membership& members, const JobSpec& spec);

// ALIVE workers, fresh and not busy, in member id order.
std::vector<int64_t> IdleWorkers(JobTable& table, const Membership& members,
                                 int64_t now, int64_t heartbeat_interval_ms)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// Whether a shard's SetupJob error is one that a retry cannot change:
// INVALID_ARGUMENT (the shard refuses the spec, e.g. a stale ps_server
// that does not know one of its fields) or UNIMPLEMENTED. Others
// (UNAVAILABLE, DEADLINE_EXCEEDED, ...) are retried.
bool RefusedForGood(const absl::Status& setup);

// Why the job cannot start with these servers and idle workers, or empty
// when it can (with `want` workers).
std::string WhyPending(int num_servers, int num_idle, int want);

// Thread-safe (the table's lock guards every job). Holds no state of its
// own; none of the pointers is owned.
class Scheduler {
 public:
  Scheduler(int64_t heartbeat_interval_ms, JobTable* table,
            const Membership* members, ShardClient* shards, JobStore* store)
      : heartbeat_interval_ms_(heartbeat_interval_ms),
        table_(table),
        members_(members),
        shards_(shards),
        store_(store) {}

  // Starts the oldest queued job if the cluster can hold it (SetupJob on
  // every shard, without the lock). `writes` is flushed to the store.
  void StartNextJob(WriteBatch* writes) ABSL_LOCKS_EXCLUDED(table_->mu());

 private:
  // A job on its way to RUNNING: what the shards are set up with.
  struct Start {
    std::string job_id;
    JobSpec spec;
    std::vector<std::string> servers;
    std::vector<int64_t> workers;
    // Per shard, the SetupJob calls in order (address, request): a
    // replicated shard's backups first, then its primary.
    std::vector<std::vector<std::pair<std::string, SetupJobRequest>>> setups;
  };
  // Picks the oldest PENDING job not being started; lays it out (the job is
  // then `starting`) or updates its reason. nullopt when none starts now.
  std::optional<Start> Plan(WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_->mu());
  // With the setup results: RUNNING, or back to PENDING (the job's shards
  // are marked torn down). Returns the servers whose setup must be undone.
  std::vector<std::string> Finish(const Start& start,
                                  const std::vector<absl::Status>& results,
                                  WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_->mu());

  const int64_t heartbeat_interval_ms_;
  JobTable* const table_;
  const Membership* const members_;
  ShardClient* const shards_;
  JobStore* const store_;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_SCHEDULER_H_
