#include "server/coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/coordinator/data_assignment.h"
#include "server/coordinator/leftover_data.h"
#include "server/coordinator/replicas.h"

namespace ps::coordinator {

bool Fresh(const Member& m, int64_t now, int64_t heartbeat_interval_ms) {
  return now - m.last_heartbeat_ms() <= 3 * heartbeat_interval_ms;
}

bool IsBusy(JobTable& table, int64_t member_id) {
  for (const auto& [id, job] : table.jobs()) {
    if (job->record.state() != RUNNING && !job->starting) continue;
    if (ActiveSlot(*job, member_id) != nullptr) return true;
  }
  return false;
}

std::string WhyPending(int num_servers, int num_idle, int want) {
  if (num_servers == 0) return "waiting for a parameter server to register";
  if (num_idle < want) {
    return absl::StrCat("waiting for ", want, " idle worker(s), ", num_idle,
                        " available");
  }
  return "";
}

std::vector<int64_t> IdleWorkers(JobTable& table, const Membership& members,
                                 int64_t now, int64_t heartbeat_interval_ms) {
  std::vector<int64_t> idle;
  for (const Member& m : members.Alive(WORKER)) {
    if (!IsBusy(table, m.member_id()) && Fresh(m, now, heartbeat_interval_ms)) {
      idle.push_back(m.member_id());
    }
  }
  return idle;
}

std::vector<int64_t> WorkersFor(const std::vector<int64_t>& workers,
                                const Membership& members,
                                const JobSpec& spec) {
  std::vector<int64_t> out;
  for (int64_t id : workers) {
    const std::optional<Member> m = members.Get(id);
    // A Python job with a script runs on ps_worker daemons, which start it.
    const bool wants_python =
        spec.has_python() && spec.python().script().empty();
    if (m.has_value() && (m->device() == "python") == wants_python) {
      out.push_back(id);
    }
  }
  return out;
}

bool RefusedForGood(const absl::Status& setup) {
  return absl::IsInvalidArgument(setup) || absl::IsUnimplemented(setup);
}

std::optional<Scheduler::Start> Scheduler::Plan(WriteBatch* writes) {
  Job* next = nullptr;
  for (auto& [id, job] : table_->jobs()) {
    if (job->record.state() == PENDING && !job->starting &&
        (next == nullptr || job->order < next->order)) {
      next = job.get();
    }
  }
  if (next == nullptr) return std::nullopt;
  std::vector<Member> alive_servers = members_->Alive(SERVER);
  std::vector<int64_t> idle =
      WorkersFor(IdleWorkers(*table_, *members_, table_->clock().NowMs(),
                             heartbeat_interval_ms_),
                 *members_, next->record.spec());
  const int want = next->record.spec().num_workers() > 0
                       ? next->record.spec().num_workers()
                       : std::max<int>(1, static_cast<int>(idle.size()));
  std::string reason = WhyPending(static_cast<int>(alive_servers.size()),
                                  static_cast<int>(idle.size()), want);
  if (reason.empty()) {
    reason = ReplicationShortfall(next->record.spec(),
                                  static_cast<int>(alive_servers.size()));
  }
  if (!reason.empty()) {
    if (next->record.reason() != reason) {
      next->record.set_reason(reason);
      table_->SaveRecord(*next, writes);
    }
    return std::nullopt;
  }
  Start start;
  JobRecord& r = next->record;
  start.job_id = r.job_id();
  start.spec = r.spec();
  r.clear_servers();
  r.clear_server_members();
  for (const Member& m : alive_servers) {
    r.add_servers(m.address());
    r.add_server_members(m.member_id());
    start.servers.push_back(m.address());
  }
  start.workers.assign(idle.begin(), idle.begin() + want);
  AssignReplicas(r);
  // Before the setups: they tell the shards each worker's joins (slots).
  AssignInitialSlots(r, start.workers);
  AssignInitialPlans(r);
  const int n = r.servers_size();
  start.setups.resize(n);
  for (int i = 0; i < n; ++i) {
    if (i < r.replicas_size()) {
      const SetupJobRequest backup =
          ReplicaSetup(r, i, SetupJobRequest::BACKUP, start.workers);
      for (const std::string& a : r.replicas(i).backup_addresses()) {
        start.setups[i].emplace_back(a, backup);
      }
    }
    start.setups[i].emplace_back(
        r.servers(i),
        ReplicaSetup(r, i, SetupJobRequest::PRIMARY, start.workers));
  }
  r.set_reason(absl::StrCat("setting up ", start.servers.size(), " shard(s)"));
  next->starting = true;
  next->shards.assign(start.servers.size(), ShardSync{});
  return start;
}

std::vector<std::string> Scheduler::Finish(
    const Start& start, const std::vector<absl::Status>& results,
    WriteBatch* writes) {
  const int n = static_cast<int>(start.servers.size());
  Job* job = table_->jobs()[start.job_id].get();
  job->starting = false;
  std::string failure;
  bool for_good = false;
  for (int i = 0; i < n; ++i) {
    if (results[i].ok() || (!failure.empty() && for_good)) continue;
    // A refusal that no retry can change ends the job: the first such one
    // is its reason, else the first failure.
    const bool refused = RefusedForGood(results[i]);
    if (failure.empty() || refused) {
      failure = absl::StrCat("setup failed on shard ", i, " (",
                             start.servers[i], "): ", results[i].message());
      for_good = refused;
    }
  }
  if (job->record.state() == PENDING && failure.empty()) {
    const int64_t now = table_->clock().NowMs();
    for (int64_t w : start.workers) {
      WorkerRuntime& rt = job->runtime[w];
      rt.last_heartbeat_ms = now;
      rt.clock_changed_ms = now;
    }
    for (ShardSync& s : job->shards) {
      s.synced_epoch = 1;
      s.have_counters = true;  // a fresh job: the counters start at 0
    }
    table_->SetState(*job, RUNNING,
                     absl::StrCat("running on ", start.workers.size(),
                                  " worker(s) and ", n, " shard(s)"),
                     writes);
    return {};
  }
  std::vector<std::string> teardown;
  for (int i = 0; i < n; ++i) {
    if (results[i].ok()) teardown.push_back(start.servers[i]);
  }
  if (job->record.state() == PENDING) {
    job->record.clear_slots();
    job->record.clear_servers();
    table_->AddEvent(*job, "setup_failed", failure, 0, writes);
    if (for_good) {
      table_->SetState(*job, FAILED, failure, writes);
    } else {
      job->record.set_reason(absl::StrCat(failure, "; will retry"));
      table_->SaveRecord(*job, writes);
    }
  }
  for (ShardSync& s : job->shards) s.torn_down = true;
  return teardown;
}

void Scheduler::StartNextJob(WriteBatch* writes) {
  std::optional<Start> start;
  {
    absl::MutexLock l(&table_->mu());
    start = Plan(writes);
  }
  writes->Flush(store_).IgnoreError();
  if (!start.has_value()) return;
  const int n = static_cast<int>(start->servers.size());
  std::vector<absl::Status> results(n);
  for (int i = 0; i < n; ++i) {
    for (const auto& [address, req] : start->setups[i]) {
      results[i] = shards_->SetupJob(address, req).status();
      if (!results[i].ok()) break;
    }
  }
  std::vector<std::string> teardown;
  {
    absl::MutexLock l(&table_->mu());
    teardown = Finish(*start, results, writes);
  }
  writes->Flush(store_).IgnoreError();
  for (const std::string& address : teardown) {
    TeardownJobRequest req;
    req.set_job_id(start->job_id);
    shards_->TeardownJob(address, req).IgnoreError();
  }
}

}  // namespace ps::coordinator
