#include "server/coordinator/job_liveness.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/coordinator/data_assignment.h"
#include "server/coordinator/leftover_data.h"
#include "server/coordinator/replicas.h"
#include "server/coordinator/straggler_policy.h"

namespace ps::coordinator {
namespace {

using Evictions = std::vector<std::pair<int64_t, std::string>>;

std::string Seconds(int64_t ms) { return absl::StrFormat("%.1fs", ms / 1e3); }

void EvictSilentWorkers(JobTable& table, Job& job, int64_t now,
                        WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  const int64_t timeout =
      job.record.spec().consistency().heartbeat_timeout_ms();
  Evictions evict;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active()) continue;
    const WorkerRuntime& rt = job.runtime[s.member_id()];
    const int64_t age = now - rt.last_heartbeat_ms;
    if (age > timeout) {
      evict.emplace_back(s.member_id(),
                         absl::StrCat("no heartbeat for ", Seconds(age),
                                      " (timeout ", Seconds(timeout), ")"));
    }
  }
  for (const auto& [id, reason] : evict) {
    Evict(table, job, id, reason, /*banned=*/false, writes);
  }
}

// Notes shards going down and coming back; FAILS the job when one stays
// down past the wait timeout.
void TrackShards(JobTable& table, Job& job, const Membership& members,
                 int64_t now, int64_t wait_timeout_ms, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  for (int i = 0; i < job.record.servers_size(); ++i) {
    const std::string& address = job.record.servers(i);
    ShardSync& sh = job.shards[i];
    const bool up = ShardUp(job, i, members);
    if (!up && !LiveBackups(job, i, members, /*in_sync=*/true).empty()) {
      continue;  // a backup takes over (replicas.h), no wait
    }
    if (!up && sh.down_since_ms == 0) {
      sh.down_since_ms = now;
      table.AddEvent(
          job, "server_failure",
          absl::StrCat("shard ", i, " at ", address, " is down; waiting up to ",
                       Seconds(wait_timeout_ms), " for it to come back"),
          0, writes);
      job.record.set_reason(
          absl::StrCat("waiting for shard ", i, " at ", address));
    } else if (!up && now - sh.down_since_ms > wait_timeout_ms) {
      table.SetState(
          job, FAILED,
          absl::StrCat("shard ", i, " at ", address, " was down for ",
                       Seconds(now - sh.down_since_ms)),
          writes);
      return;
    } else if (up && sh.down_since_ms != 0) {
      sh.down_since_ms = 0;
      sh.needs_check = true;
      table.AddEvent(job, "server_recovered",
                     absl::StrCat("shard ", i, " at ", address, " is back"), 0,
                     writes);
      job.record.set_reason("running");
    }
  }
}

// BSP barrier: a worker behind the others whose clock has not moved for
// the barrier timeout holds every shard's step. (With backup workers the
// step does not wait for it, so it is left alone.) While a shard is down
// every worker stalls on it, whatever its clock: the barrier timer starts
// again once the shard is back.
void EvictBarrierHolders(JobTable& table, Job& job, int64_t now,
                         WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  const ConsistencySpec& c = job.record.spec().consistency();
  bool shard_down = false;
  for (const ShardSync& sh : job.shards) shard_down |= sh.down_since_ms != 0;
  if (shard_down) {
    for (auto& [id, rt] : job.runtime) rt.clock_changed_ms = now;
    return;
  }
  if ((c.model() != ConsistencySpec::BSP &&
       c.model() != ConsistencySpec::MODEL_UNSPECIFIED) ||
      c.backup_workers() != 0) {
    return;
  }
  int64_t max_clock = std::numeric_limits<int64_t>::min();
  int active = 0;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active() || s.done()) continue;
    ++active;
    max_clock = std::max(max_clock, job.runtime[s.member_id()].clock);
  }
  Evictions evict;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active() || s.done() || active < 2) continue;
    const WorkerRuntime& rt = job.runtime[s.member_id()];
    const int64_t stuck = now - rt.clock_changed_ms;
    if (rt.clock < max_clock && stuck > c.barrier_timeout_ms()) {
      evict.emplace_back(s.member_id(),
                         absl::StrCat("barrier timeout: held step ", rt.clock,
                                      " for ", Seconds(stuck), " (timeout ",
                                      Seconds(c.barrier_timeout_ms()), ")"));
    }
  }
  for (const auto& [id, reason] : evict) {
    if (job.record.state() == RUNNING) {
      Evict(table, job, id, reason, /*banned=*/true, writes);
    }
  }
}

// Each straggler becomes an event; with policy.evict it is evicted too, as
// long as another worker is left.
void ActOnStragglers(JobTable& table, Job& job, int64_t now,
                     int64_t rate_window_ms, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  const std::vector<Straggler> stragglers =
      DetectStragglers(job, now, rate_window_ms);
  for (const Straggler& s : stragglers) {
    table.AddEvent(
        job, "straggler",
        absl::StrCat("member ", s.member_id, " (rank ", s.rank, "): ", s.why),
        s.member_id, writes);
  }
  if (!job.record.spec().straggler_policy().evict()) return;
  for (const Straggler& s : stragglers) {
    if (CountActive(job) < 2 || job.record.state() != RUNNING) break;
    Evict(table, job, s.member_id, absl::StrCat("straggler: ", s.why),
          /*banned=*/true, writes);
  }
}

}  // namespace

void ObserveClock(JobTable& table, Job& job, WorkerRuntime& rt, int64_t clock,
                  int64_t now, int64_t rate_window_ms) {
  // A clock no worker of this job can reach is a peer bug; it must not
  // become the job's step (nor a rejoining worker's start step).
  if (clock < 0 || clock > MaxJobStep(job.record)) return;
  if (clock != rt.clock) {
    rt.clock = clock;
    rt.clock_changed_ms = now;
    table.Touch(job);
  }
  if (clock > job.record.global_step()) job.record.set_global_step(clock);
  RecordClockSample(rt, clock, now, rate_window_ms);
}

void AnswerHeartbeat(JobTable& table, const HeartbeatRequest& request,
                     int64_t now, int64_t rate_window_ms, WorkerAssignment* a) {
  for (auto& [id, job] : table.jobs()) {
    if (job->record.state() != RUNNING) continue;
    const WorkerSlot* slot = ActiveSlot(*job, request.member_id());
    if (slot == nullptr) continue;
    WorkerRuntime& rt = job->runtime[request.member_id()];
    rt.last_heartbeat_ms = now;
    if (request.job_id() == id &&
        request.incarnation() == job->record.incarnation()) {
      ObserveClock(table, *job, rt, request.clock(), now, rate_window_ms);
      // The data's shape, as the worker counted it, for the plans' cuts;
      // saved with the record's next write.
      if (request.shard_steps() > 0 && job->record.shard_steps() == 0) {
        job->record.set_shard_steps(request.shard_steps());
        job->record.set_steps_per_epoch(request.steps_per_epoch());
        // Text data has no estimate before its count: the progress bar's
        // total is now known.
        if (job->record.total_steps() == 0) {
          job->record.set_total_steps(request.shard_steps());
        }
      }
    }
    FillAssignment(*job, *slot, a);
    return;
  }
  if (!request.job_id().empty()) {
    a->set_command(WorkerAssignment::STOP);
    a->set_job_id(request.job_id());
  } else {
    a->set_command(WorkerAssignment::IDLE);
  }
}

void CheckShardsServedBy(JobTable& table, const Member& server,
                         const Membership& members, WriteBatch* writes) {
  for (auto& [id, job] : table.jobs()) {
    if (job->record.state() != RUNNING) continue;
    JobRecord& r = job->record;
    bool moved = false;
    for (int i : ShardsServedBy(*job, server, members)) {
      job->shards[i].needs_check = true;
      while (r.server_members_size() <= i) r.add_server_members(0);
      if (r.servers(i) == server.address() &&
          r.server_members(i) == server.member_id()) {
        continue;
      }
      table.AddEvent(
          *job, "server_moved",
          absl::StrCat("shard ", i, " (member ", r.server_members(i), " at ",
                       r.servers(i), ") is now served by member ",
                       server.member_id(), " at ", server.address()),
          server.member_id(), writes);
      r.set_servers(i, server.address());
      r.set_server_members(i, server.member_id());
      moved = true;
    }
    if (moved) table.SaveRecord(*job, writes);
  }
}

void CheckRunningJob(JobTable& table, Job& job, const Membership& members,
                     int64_t now, const LivenessOptions& options,
                     WriteBatch* writes) {
  if (now < options.grace_until_ms) {
    // Every worker counts as heard from, and its clock as moving, at the
    // end of the grace period at the earliest.
    for (auto& [id, rt] : job.runtime) {
      rt.last_heartbeat_ms = std::max(rt.last_heartbeat_ms, now);
      rt.clock_changed_ms = std::max(rt.clock_changed_ms, now);
    }
  }
  EvictSilentWorkers(table, job, now, writes);
  if (job.record.state() != RUNNING) return;
  MovePendingLeftovers(table, job, writes);
  TrackShards(table, job, members, now, options.server_wait_timeout_ms, writes);
  if (job.record.state() != RUNNING) return;
  EvictBarrierHolders(table, job, now, writes);
  if (job.record.state() != RUNNING || now < options.grace_until_ms) return;
  ActOnStragglers(table, job, now, options.rate_window_ms, writes);
}

}  // namespace ps::coordinator
