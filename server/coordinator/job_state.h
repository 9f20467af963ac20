// The coordinator's state of one job, shared by its units (scheduler,
// metric intake, liveness, straggler policy, reconciler): the durable record
// and what is known about the job's workers and shards between heartbeats.
// Plain data and queries over it, with no lock of its own: a Job lives in
// the JobTable (job_table.h) and is read and changed under the table's lock.
#ifndef PS_SERVER_COORDINATOR_JOB_STATE_H_
#define PS_SERVER_COORDINATOR_JOB_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proto/coordinator_service.pb.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/metric_series.h"

namespace ps::coordinator {

bool IsTerminal(JobState s);

// The job's total steps for progress bars: max_steps, else epochs over
// Fashion-MNIST's 60,000 training examples at `num_workers` x batch size
// per step (workers decide for themselves when they are done). 0 (not
// known) for text data without max_steps: its workers count the examples.
int64_t EstimateTotalSteps(const JobSpec& spec, int num_workers);

// The largest step a worker of the job can reach: max_steps, else every
// epoch done by one worker alone (what is left after evictions); no bound
// when the total is not known.
int64_t MaxStep(const JobSpec& spec);
// The largest step a worker of this job can reach now: MaxStep, or further
// when a data plan runs past it (total_steps follows the longest plan).
int64_t MaxJobStep(const JobRecord& record);

// The job's steps per data shard: as the workers reported them (derived
// from their data: the dataset's size, or text data's counting pass),
// else data.max_steps, else 0 (not known yet), whatever the data format.
int64_t JobShardSteps(const JobRecord& record);

// How many times `member_id` joined the job: its slots (one at the start,
// one more at every rejoin). The shards learn it with the membership
// (UpdateMembershipRequest.worker_joins).
int64_t Joins(const JobRecord& record, int64_t member_id);

// Per-shard progress of bringing a job's shard in line (reconciler.h).
struct ShardSync {
  // Ask the shard whether it holds the job (after a coordinator restart or
  // a server re-registration); set it up with restore if it does not.
  bool needs_check = false;
  int64_t synced_epoch = -1;  // membership epoch the shard has
  int64_t down_since_ms = 0;  // 0: up
  bool torn_down = false;
  int teardown_attempts = 0;
  // The shard's own counters, polled while the job runs.
  int64_t last_poll_ms = 0;
  bool have_counters = false;  // false: the next poll sets a baseline
  int64_t dropped = 0;
  int64_t rejected = 0;
  // Replicated shards (replicas.h): the primary restarted without the
  // shard (fail over), and backups left the record whose primary is still
  // to be told.
  bool primary_lost = false;
  bool backups_changed = false;
  // When the shard's server first failed a call with UNAVAILABLE (the
  // process is gone: connection refused) since it last answered; 0: it
  // answers.
  int64_t unreachable_since_ms = 0;
  // Backups (member ids) the primary reported unanswered for longer than
  // the backup timeout (replicas.h NoteBackupsUnanswered): not live
  // backups of this shard, nor chosen as new ones, for kCutRetryMs.
  struct CutBackup {
    int64_t since_ms = 0;
    std::string why;
  };
  std::map<int64_t, CutBackup> cut_backups;
};

// What the coordinator knows of a worker between heartbeats (not stored).
struct WorkerRuntime {
  int64_t last_heartbeat_ms = 0;
  int64_t clock = 0;
  int64_t clock_changed_ms = 0;
  // Step-rate measurement (straggler_policy.h).
  std::deque<std::pair<int64_t, int64_t>> samples;  // (time ms, clock)
  double busy_ms = 0;  // EWMA of compute_ms, 0 = unknown
  int64_t busy_updated_ms = 0;
  int64_t below_since_median_clock = -1;
  bool flagged = false;
};

struct Job {
  JobRecord record;
  std::vector<JobEvent> events;
  // Bounded: older points of a long series are merged (metric_series.h).
  MetricSeriesSet points;
  int64_t order = 0;       // submission order
  int64_t change = 1;      // bumped on every visible change
  int64_t record_seq = 0;  // orders record writes
  bool starting = false;   // shards being set up
  bool reconciling = false;
  std::vector<ShardSync> shards;  // by shard index
  // Replicated shards: servers (member ids) found gone by their refused
  // calls before the member timeout (replicas.h): not backups any more.
  std::set<int64_t> unreachable_servers;
  std::map<int64_t, WorkerRuntime> runtime;    // by member id
  std::map<int64_t, double> examples_per_sec;  // latest, by member id
  double staleness_sum = 0;
  int64_t staleness_count = 0;
};

// The member's active slot in the job, or null.
const WorkerSlot* ActiveSlot(const Job& job, int64_t member_id);
// Whether the job has an active worker and every active worker is done.
bool AllActiveDone(const Job& job);
int CountActive(const Job& job);

// The record as callers see it: active slots carry their worker's clock, and
// a job with data plans its examples trained and in all (data_plan.h).
JobRecord Snapshot(const Job& job);

// A TRAIN assignment for the worker in `slot`.
void FillAssignment(const Job& job, const WorkerSlot& slot,
                    WorkerAssignment* a);

// A job's shard is known by the member id of the server it was set up on
// (record.server_members), whatever its address: shard `i` is up while that
// member is ALIVE. (A record without ids, from before they were kept,
// knows its shards by address: an ALIVE server at record.servers(i).)
bool ShardUp(const Job& job, int shard, const Membership& members);
// The indices of the job's shards that `server` serves: those set up on
// its member id, and those recorded at its address whose own member is not
// ALIVE (a server restarted there without its identity).
std::vector<int> ShardsServedBy(const Job& job, const Member& server,
                                const Membership& members);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_JOB_STATE_H_
