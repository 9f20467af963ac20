#include "server/coordinator/reconciler.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/spec/data_plan.h"
#include "server/coordinator/leftover_data.h"
#include "server/coordinator/replicas.h"

namespace ps::coordinator {

std::vector<ShardAction> PlanShardActions(Job& job, const std::vector<bool>& up,
                                          int64_t now,
                                          int64_t poll_interval_ms) {
  const JobState state = job.record.state();
  std::vector<ShardAction> actions;
  auto add = [&](ShardAction::Kind kind, int shard,
                 const std::string& address) {
    ShardAction a;
    a.kind = kind;
    a.shard = shard;
    a.address = address;
    actions.push_back(std::move(a));
  };
  // A replicated shard's primary is polled every second at most: a failed
  // poll is how its loss is noticed before the member timeout.
  const int64_t interval = job.record.replicas_size() > 0
                               ? std::min<int64_t>(poll_interval_ms, 1000)
                               : poll_interval_ms;
  for (int i = 0; i < job.record.servers_size(); ++i) {
    ShardSync& s = job.shards[i];
    const std::string& address = job.record.servers(i);
    if (state == RUNNING) {
      if (!up[i]) continue;
      if (s.needs_check) {
        add(ShardAction::kCheck, i, address);
      } else if (s.synced_epoch < job.record.membership_epoch()) {
        add(ShardAction::kMembership, i, address);
      } else if (now - s.last_poll_ms >= interval) {
        s.last_poll_ms = now;
        add(ShardAction::kPoll, i, address);
      }
    } else if (IsTerminal(state) && !s.torn_down) {
      if (up[i]) {
        add(ShardAction::kTeardown, i, address);
        if (i < job.record.replicas_size()) {
          const auto& backups = job.record.replicas(i).backup_addresses();
          actions.back().replicas.assign(backups.begin(), backups.end());
        }
      } else {
        s.torn_down = true;  // nothing left there to tear down
      }
    }
  }
  return actions;
}

bool UpdateCounters(JobTable& table, Job& job, int shard,
                    const ShardStatus& status, WriteBatch* writes) {
  ShardSync& s = job.shards[shard];
  const int64_t new_dropped = status.dropped_pushes() - s.dropped;
  const int64_t new_rejected = status.rejected_pushes() - s.rejected;
  if (s.have_counters && new_dropped > 0) {
    table.AddEvent(job, "dropped_gradient",
                   absl::StrCat("shard ", shard, " dropped ", new_dropped,
                                " late gradient(s) (", status.dropped_pushes(),
                                " in all)"),
                   0, writes);
  }
  if (s.have_counters && new_rejected > 0) {
    table.AddEvent(
        job, "rejected_gradient",
        absl::StrCat("shard ", shard, " rejected ", new_rejected,
                     " gradient(s) (", status.rejected_pushes(), " in all)"),
        0, writes);
  }
  s.have_counters = true;
  s.dropped = status.dropped_pushes();
  s.rejected = status.rejected_pushes();
  int64_t dropped = 0;
  int64_t rejected = 0;
  for (const ShardSync& sh : job.shards) {
    dropped += sh.dropped;
    rejected += sh.rejected;
  }
  const bool changed = dropped != job.record.dropped_pushes() ||
                       rejected != job.record.rejected_pushes();
  job.record.set_dropped_pushes(dropped);
  job.record.set_rejected_pushes(rejected);
  return changed;
}

void ApplyRollback(JobTable& table, Job& job, int64_t incarnation,
                   const RollbackResult& rollback, WriteBatch* writes) {
  if (!rollback.status.ok()) {
    job.record.set_rollback_pending(true);
    table.AddEvent(job, "rollback_failed",
                   absl::StrCat("rolling the job back to a checkpoint failed (",
                                rollback.status.message(), "); will retry"),
                   0, writes);
    table.Touch(job);
    return;
  }
  // Every worker drops its step and starts again at the restored version:
  // the new incarnation in its assignment tells it to.
  const int64_t now = table.clock().NowMs();
  job.record.set_incarnation(incarnation);
  job.record.set_rollback_pending(false);
  // (Indexed by incarnation; a record from before this field has none for
  // its earlier rollbacks, whose points then all count.)
  while (job.record.rollback_steps_size() < incarnation - 1) {
    job.record.add_rollback_steps(std::numeric_limits<int64_t>::max());
  }
  job.record.add_rollback_steps(rollback.start_step);
  if (job.record.global_step() > 0) {  // epochs are steps / epoch size
    job.record.set_epoch(job.record.epoch() * rollback.start_step /
                         job.record.global_step());
  }
  job.record.set_global_step(rollback.start_step);
  // The rollback undid every worker's steps past start_step, a finished
  // worker's too: each trains again from there, and the job's evaluation of
  // its final model is to be taken again.
  job.record.set_final_evaluation(false);
  job.record.set_final_evaluation_epoch(0);
  const ConsistencySpec::Model model = job.record.spec().consistency().model();
  const bool asynchronous =
      model == ConsistencySpec::ASP || model == ConsistencySpec::SSP;
  const bool plans = UsesPlans(job.record);
  for (WorkerSlot& slot : *job.record.mutable_slots()) {
    if (!slot.active()) continue;
    slot.set_done(false);
    // A worker that joined after the restored step has no batch before its
    // plan's start: without a barrier to keep in step with (ASP, SSP) it
    // starts there, instead of training its first batch again until then.
    // (Under BSP it keeps the barrier's step and does.)
    const int64_t start = asynchronous && plans
                              ? std::max(rollback.start_step, slot.plan_start())
                              : rollback.start_step;
    slot.set_start_step(start);
    WorkerRuntime& rt = job.runtime[slot.member_id()];
    rt.clock = start;
    rt.clock_changed_ms = now;
    rt.samples.clear();
  }
  // A worker that left after the restored step had its batches from there
  // undone too: they go to the others (or are skipped and counted) as a
  // departed worker's data does, so that every batch is in the model once.
  if (plans) {
    const int64_t steps = JobShardSteps(job.record);
    for (WorkerSlot& slot : *job.record.mutable_slots()) {
      if (slot.active() || slot.leftover_pending() || steps <= 0 ||
          PlanEnd(slot.plan_start(), slot.plan(), steps) <=
              rollback.start_step) {
        continue;
      }
      MoveLeftoverData(table, job, slot, rollback.start_step, writes);
    }
  }
  for (ShardSync& sh : job.shards) {
    sh.needs_check = false;
    sh.synced_epoch = -1;  // resend the membership epoch
    sh.have_counters = false;
  }
  std::string note = rollback.note;
  if (job.record.replicas_size() > 0) {
    // The shards were set up again as primaries without backups, under the
    // next epoch (RollBack): new ones are built (replicas.h).
    for (ShardReplicas& r : *job.record.mutable_replicas()) {
      r.clear_backup_members();
      r.clear_backup_addresses();
      r.clear_building_members();
      r.set_epoch(r.epoch() + 1);
    }
    absl::StrAppend(&note,
                    "; the shards go on without backups until new ones are "
                    "built");
  }
  table.AddEvent(job, "rollback", note, 0, writes);
  job.record.set_reason("running");
  table.Touch(job);
}

void Reconciler::Reconcile(const std::string& job_id) {
  std::optional<Round> round;
  {
    absl::MutexLock l(&table_->mu());
    round = Begin(job_id);
  }
  if (!round.has_value()) return;
  const Outcome out = CallShards(*round);
  WriteBatch writes;
  {
    absl::MutexLock l(&table_->mu());
    Commit(*round, out, &writes);
  }
  writes.Flush(store_).IgnoreError();
}

std::optional<Reconciler::Round> Reconciler::Begin(const std::string& job_id) {
  auto it = table_->jobs().find(job_id);
  if (it == table_->jobs().end()) return std::nullopt;
  Job& job = *it->second;
  if (job.reconciling || job.starting) return std::nullopt;
  Round round;
  round.job_id = job_id;
  round.state = job.record.state();
  round.servers.assign(job.record.servers().begin(),
                       job.record.servers().end());
  round.incarnation = job.record.incarnation();
  for (const ShardReplicas& r : job.record.replicas()) {
    round.replica_epochs.push_back(r.epoch());
  }
  const int num_shards = job.record.servers_size();
  job.shards.resize(num_shards);
  std::vector<bool> up(num_shards);
  for (int i = 0; i < num_shards; ++i) {
    up[i] = ShardUp(job, i, *members_);
    round.all_up &= up[i];
  }
  // Replicated shards: a lost primary's backup is promoted (the shard
  // counts as down this round: no rollback), a lost backup dropped.
  std::vector<ShardAction> replica_actions;
  if (round.state == RUNNING && job.record.replicas_size() > 0) {
    for (int i = 0; i < num_shards; ++i) {
      ShardAction a;
      a.shard = i;
      if (!up[i] || job.shards[i].primary_lost) {
        Promotion p = PlanPromotion(job, i, *members_);
        if (p.backup < 0) {
          // No backup in sync left (the last one lost too, or still
          // building): the shard is checked as an unreplicated one is, and
          // rolls the job back if it lost the job.
          if (job.shards[i].primary_lost) {
            job.shards[i].primary_lost = false;
            job.shards[i].needs_check = true;
          }
          continue;
        }
        a.kind = ShardAction::kPromote;
        a.address = p.address;
        a.member = p.member;
        a.setup = std::move(p.request);
        a.backups = std::move(p.rebuilt);
        up[i] = false;
        round.all_up = false;
      } else {
        a.address = job.record.servers(i);
        a.setup = PlanBackupDrop(job, i, *members_);
        if (!a.setup.job_id().empty()) {
          a.kind = ShardAction::kDropBackups;
        } else {
          a.backups = PlanBackupAdd(job, i, *members_, &a.setup);
          if (a.backups.members.empty()) continue;
          a.kind = ShardAction::kAddBackups;
        }
      }
      replica_actions.push_back(std::move(a));
    }
  }
  // A rollback that did not reach every shard is tried again (with every
  // shard up) until it does.
  round.rollback_pending =
      round.state == RUNNING && job.record.rollback_pending() && round.all_up;
  round.actions = PlanShardActions(job, up, table_->clock().NowMs(),
                                   shard_poll_interval_ms_);
  for (ShardAction& a : replica_actions) round.actions.push_back(std::move(a));
  if (round.actions.empty() && !round.rollback_pending) return std::nullopt;
  job.reconciling = true;
  round.spec = job.record.spec();
  round.membership.set_job_id(job_id);
  round.membership.set_membership_epoch(job.record.membership_epoch());
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active()) continue;
    round.membership.add_worker_ids(s.member_id());
    round.membership.add_worker_joins(Joins(job.record, s.member_id()));
  }
  return round;
}

void Reconciler::CallShard(const Round& round, size_t k, Outcome* out) {
  const ShardAction& a = round.actions[k];
  if (a.kind == ShardAction::kPromote || a.kind == ShardAction::kDropBackups ||
      a.kind == ShardAction::kAddBackups) {
    // The backups first (at the shard's new epoch), so that they take the
    // primary's first call; one that refuses is left out.
    NewBackups& done = out->backups[k];
    for (size_t b = 0; b < a.backups.members.size(); ++b) {
      const std::string& to = a.backups.addresses[b];
      absl::StatusOr<SetupJobResponse> r =
          shards_->SetupJob(to, a.backups.setup);
      if (r.ok()) {
        done.members.push_back(a.backups.members[b]);
        done.addresses.push_back(to);
      } else {
        std::fprintf(stderr,
                     "coordinator: job %s shard %d: backup %s refused its "
                     "setup: %s\n",
                     round.job_id.c_str(), a.shard, to.c_str(),
                     std::string(r.status().message()).c_str());
      }
    }
    auto refused = [&](const std::string& address) {
      return std::find(a.backups.addresses.begin(), a.backups.addresses.end(),
                       address) != a.backups.addresses.end() &&
             std::find(done.addresses.begin(), done.addresses.end(), address) ==
                 done.addresses.end();
    };
    SetupJobRequest setup = a.setup;
    setup.clear_backup_addresses();
    for (const std::string& address : a.setup.backup_addresses()) {
      if (!refused(address)) setup.add_backup_addresses(address);
    }
    if (a.kind == ShardAction::kAddBackups && done.members.empty()) {
      out->results[k] = absl::UnavailableError("no new backup took its setup");
      return;
    }
    absl::StatusOr<SetupJobResponse> r = shards_->SetupJob(a.address, setup);
    out->results[k] = r.status();
    if (r.ok()) out->versions[k] = r->version();
    return;
  }
  GetShardStatusRequest status_req;
  status_req.set_job_id(round.job_id);
  // (A server may hold several shards of a replicated job.)
  status_req.set_shard(a.shard);
  if (a.kind == ShardAction::kTeardown) {
    // (Its status was read before any teardown: CallShards.)
    TeardownJobRequest req;
    req.set_job_id(round.job_id);
    req.set_final_checkpoint(round.state == SUCCEEDED);
    out->results[k] = shards_->TeardownJob(a.address, req);
    return;
  }
  if (a.kind == ShardAction::kPoll) {
    absl::StatusOr<ShardStatus> st =
        shards_->GetShardStatus(a.address, status_req);
    if (st.ok()) out->totals[k] = *st;
    out->results[k] = st.status();
    return;
  }
  if (a.kind == ShardAction::kCheck) {
    absl::StatusOr<ShardStatus> st =
        shards_->GetShardStatus(a.address, status_req);
    if (!st.ok() &&
        (st.status().code() == absl::StatusCode::kNotFound ||
         st.status().code() == absl::StatusCode::kFailedPrecondition)) {
      // The shard restarted without the job: the whole job rolls back to
      // its newest checkpoint (CallShards), once every shard is up.
      out->lost.push_back(a.shard);
      out->results[k] =
          round.all_up ? absl::OkStatus()
                       : absl::UnavailableError(
                             "waiting for every shard to be up to roll the "
                             "job back");
      return;
    }
    if (!st.ok()) {
      out->results[k] = st.status();
      return;
    }
  }
  out->results[k] =
      shards_->UpdateMembership(a.address, round.membership).status();
}

Reconciler::Outcome Reconciler::CallShards(const Round& round) {
  Outcome out;
  const size_t n = round.actions.size();
  out.results.resize(n);
  out.notes.resize(n);
  out.totals.resize(n);
  out.versions.resize(n);
  out.backups.resize(n);
  // Every shard's last counters first: a teardown removes all of a job's
  // shards on that server (several after a failover).
  for (size_t k = 0; k < n; ++k) {
    const ShardAction& a = round.actions[k];
    if (a.kind != ShardAction::kTeardown) continue;
    GetShardStatusRequest req;
    req.set_job_id(round.job_id);
    req.set_shard(a.shard);
    absl::StatusOr<ShardStatus> st = shards_->GetShardStatus(a.address, req);
    if (st.ok()) out.totals[k] = *st;
  }
  for (size_t k = 0; k < n; ++k) CallShard(round, k, &out);
  // Servers that hold only backups of the job, after the primaries (whose
  // teardown removes every shard of the job on their server) and without
  // a checkpoint (the primaries wrote the job's). Best effort: one that is
  // down has lost them already.
  std::set<std::string> torn(round.servers.begin(), round.servers.end());
  for (const ShardAction& a : round.actions) {
    if (a.kind != ShardAction::kTeardown) continue;
    for (const std::string& address : a.replicas) {
      if (!torn.insert(address).second) continue;
      TeardownJobRequest req;
      req.set_job_id(round.job_id);
      shards_->TeardownJob(address, req).IgnoreError();
    }
  }
  if (round.state != RUNNING || !round.all_up ||
      (out.lost.empty() && !round.rollback_pending)) {
    return out;
  }
  out.rollback = RollBack(shards_, round.job_id, round.spec, round.servers,
                          round.membership, round.incarnation + 1, out.lost,
                          round.replica_epochs);
  for (size_t k = 0; k < n; ++k) {
    const ShardAction& a = round.actions[k];
    if (a.kind != ShardAction::kCheck) continue;
    if (!out.rollback->status.ok()) {
      out.results[k] = out.rollback->status;
    } else if (std::find(out.lost.begin(), out.lost.end(), a.shard) !=
               out.lost.end()) {
      out.notes[k] =
          absl::StrCat("shard ", a.shard, " at ", a.address, " set up again",
                       out.rollback->version > 0
                           ? absl::StrCat(" from its checkpoint at version ",
                                          out.rollback->version)
                           : std::string(" (no checkpoint found)"));
    }
  }
  return out;
}

bool Reconciler::CommitAction(Job& job, const Round& round, const Outcome& out,
                              size_t k, WriteBatch* writes) {
  const ShardAction& a = round.actions[k];
  ShardSync& s = job.shards[a.shard];
  bool save = false;
  if (!out.notes[k].empty()) {
    table_->AddEvent(job, "server_restored", out.notes[k], 0, writes);
  }
  if (out.totals[k].has_value()) {
    save |= UpdateCounters(*table_, job, a.shard, *out.totals[k], writes);
    if (a.kind == ShardAction::kPoll) {
      save |= NoteBackupsInSync(*table_, job, a.shard, *out.totals[k], writes);
      NoteBackupsUnanswered(job, a.shard, *out.totals[k],
                            table_->clock().NowMs(), backup_timeout_ms_);
    }
  }
  if (a.kind == ShardAction::kPoll || a.kind == ShardAction::kMembership ||
      a.kind == ShardAction::kCheck) {
    NoteShardAnswer(job, a.shard, out.results[k], table_->clock().NowMs());
  }
  if (a.kind == ShardAction::kPoll) return save;
  if (a.kind == ShardAction::kPromote || a.kind == ShardAction::kDropBackups ||
      a.kind == ShardAction::kAddBackups) {
    if (out.rollback.has_value() && out.rollback->status.ok()) {
      // The rollback after it set every shard up again without backups:
      // what this call changed is gone (its backups are built anew).
      return save;
    }
    if (!out.results[k].ok()) {
      std::fprintf(stderr, "coordinator: job %s shard %d (%s): %s\n",
                   round.job_id.c_str(), a.shard, a.address.c_str(),
                   std::string(out.results[k].message()).c_str());
      return save;
    }
    if (a.kind == ShardAction::kPromote) {
      ApplyPromotion(*table_, job, a.shard, a.member, a.address, a.setup,
                     out.versions[k], out.backups[k], writes);
    } else if (a.kind == ShardAction::kAddBackups) {
      ApplyBackupAdd(*table_, job, a.shard, out.backups[k], writes);
    } else {
      ApplyBackupDrop(*table_, job, a.shard, a.setup, writes);
    }
    return true;
  }
  if (a.kind == ShardAction::kTeardown) {
    if (out.totals[k].has_value()) {
      const ShardStatus& t = *out.totals[k];
      table_->AddEvent(
          job, "shard_summary",
          absl::StrCat("shard ", a.shard, ": version ", t.version(), ", ",
                       t.pushes(), " pushes, ", t.dropped_pushes(),
                       " dropped, ", t.rejected_pushes(), " rejected"),
          0, writes);
      save = true;
    }
    // NOT_FOUND: gone already (with another shard of the job there).
    if (out.results[k].ok() || absl::IsNotFound(out.results[k]) ||
        ++s.teardown_attempts >= 3) {
      s.torn_down = true;
      if (!out.results[k].ok() && !absl::IsNotFound(out.results[k])) {
        table_->AddEvent(job, "teardown_failed",
                         absl::StrCat("shard ", a.shard, " at ", a.address,
                                      ": ", out.results[k].message()),
                         0, writes);
      }
    }
    return save;
  }
  if (out.results[k].ok()) {
    s.needs_check = false;
    s.synced_epoch = round.membership.membership_epoch();
  } else {
    std::fprintf(stderr, "coordinator: job %s shard %d (%s): %s\n",
                 round.job_id.c_str(), a.shard, a.address.c_str(),
                 std::string(out.results[k].message()).c_str());
  }
  return save;
}

void Reconciler::Commit(const Round& round, const Outcome& out,
                        WriteBatch* writes) {
  Job& job = *table_->jobs()[round.job_id];
  job.reconciling = false;
  bool save = false;
  if (out.rollback.has_value() && job.record.state() == RUNNING) {
    ApplyRollback(*table_, job, round.incarnation + 1, *out.rollback, writes);
    save = true;
  }
  for (size_t k = 0; k < round.actions.size(); ++k) {
    save |= CommitAction(job, round, out, k, writes);
  }
  if (save) table_->SaveRecord(job, writes);
}

}  // namespace ps::coordinator
