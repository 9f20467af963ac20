#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/status.h"
#include "common/spec/config.h"
#include "server/coordinator/data_assignment.h"
#include "server/coordinator/explain.h"
#include "server/coordinator/job_liveness.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/metric_intake.h"
#include "server/coordinator/metrics_format.h"
#include "server/coordinator/reconciler.h"
#include "server/coordinator/replicas.h"
#include "server/coordinator/scheduler.h"
#include "server/coordinator/straggler_policy.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {
namespace {

constexpr size_t kMaxEventsInExplain = 8;

// The Coordinator over its units: Membership (the member table), JobTable
// (the jobs and their lock), and the units acting on them: job_liveness
// (heartbeats, failure detection), data_assignment, metric_intake,
// straggler_policy, Scheduler and Reconciler (with rollback). Each method
// takes the table's lock for its in-memory change, queues durable writes
// in a WriteBatch, and flushes it (and calls shards) after releasing it.
class CoordinatorImpl : public Coordinator {
 public:
  CoordinatorImpl(const CoordinatorOptions& options, const Clock* clock,
                  JobStore* store, ShardClient* shards, int64_t first_member_id)
      : options_(options),
        clock_(clock),
        store_(store),
        shards_(shards),
        membership_(clock, {.heartbeat_timeout_ms = options.member_timeout_ms,
                            .first_member_id = first_member_id}),
        table_(clock),
        scheduler_(options.heartbeat_interval_ms, &table_, &membership_, shards,
                   store),
        reconciler_(options.shard_poll_interval_ms, options.backup_timeout_ms,
                    &table_, &membership_, shards, store) {}

  absl::Status Load();

  absl::StatusOr<RegisterResponse> Register(
      const RegisterRequest& request) override;
  absl::StatusOr<HeartbeatResponse> Heartbeat(
      const HeartbeatRequest& request) override;
  absl::StatusOr<SubmitJobResponse> SubmitJob(
      const SubmitJobRequest& request) override;

  absl::StatusOr<JobRecord> GetJob(absl::string_view job_id) override {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(job_id));
    return Snapshot(*job);
  }

  ListJobsResponse ListJobs() override {
    absl::MutexLock l(&table_.mu());
    std::vector<const Job*> ordered;
    for (const auto& [id, job] : table_.jobs()) ordered.push_back(job.get());
    std::sort(ordered.begin(), ordered.end(),
              [](const Job* a, const Job* b) { return a->order < b->order; });
    ListJobsResponse response;
    for (const Job* job : ordered) *response.add_jobs() = Snapshot(*job);
    return response;
  }

  absl::StatusOr<CancelJobResponse> CancelJob(
      const CancelJobRequest& request) override;
  absl::Status ReportMetrics(const ReportMetricsRequest& request) override;
  absl::Status ReportFailure(const ReportFailureRequest& request) override;
  absl::StatusOr<GetMetricsResponse> GetMetrics(
      const GetMetricsRequest& request) override;

  absl::StatusOr<GetEventsResponse> GetEvents(
      absl::string_view job_id) override {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(job_id));
    GetEventsResponse response;
    for (const JobEvent& e : job->events) *response.add_events() = e;
    return response;
  }

  ListMembersResponse ListMembers() override {
    ListMembersResponse response;
    for (Member& m : membership_.List()) *response.add_members() = m;
    return response;
  }

  absl::StatusOr<ExplainJobResponse> ExplainJob(
      absl::string_view job_id) override;

  absl::StatusOr<JobRecord> WaitForJobChange(absl::string_view job_id,
                                             int64_t* seen,
                                             absl::Duration timeout) override {
    return table_.WaitForChange(job_id, seen, timeout);
  }

  void Tick() override;

  void Shutdown() override { table_.Shutdown(); }

 private:
  // A stored job back in memory after a restart: its summary replayed from
  // its points; a RUNNING job waits for its members to re-register (its
  // shards are checked), a job that was being started starts again.
  void Restore(StoredJob stored, int64_t now, WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());

  const CoordinatorOptions options_;
  // The end of the grace period after a restart that found running jobs
  // (set by Load, before any other thread runs; 0: none).
  int64_t grace_until_ms_ = 0;
  const Clock* const clock_;
  JobStore* const store_;
  ShardClient* const shards_;
  Membership membership_;
  JobTable table_;
  Scheduler scheduler_;
  Reconciler reconciler_;
};

absl::Status CoordinatorImpl::Load() {
  PS_ASSIGN_OR_RETURN(std::vector<StoredJob> stored, store_->LoadAll());
  // Submission order (job ids sort as strings: "job-10" < "job-2").
  std::stable_sort(
      stored.begin(), stored.end(), [](const StoredJob& a, const StoredJob& b) {
        return a.record.submit_time_ms() < b.record.submit_time_ms();
      });
  const int64_t now = clock_->NowMs();
  WriteBatch writes;
  {
    absl::MutexLock l(&table_.mu());
    for (StoredJob& s : stored) {
      if (s.record.state() == RUNNING) {
        grace_until_ms_ = now + options_.restart_grace_ms;
      }
      Restore(std::move(s), now, &writes);
    }
  }
  return writes.Flush(store_);
}

void CoordinatorImpl::Restore(StoredJob s, int64_t now, WriteBatch* writes) {
  auto job = std::make_unique<Job>();
  job->record = std::move(s.record);
  job->events = std::move(s.events);
  job->order = table_.NextOrder();
  ResetSummary(*job);
  job->points = MetricSeriesSet(options_.max_points_per_series);
  for (const MetricPoint& p : s.points) {
    ApplyPoint(*job, p);
    job->points.Add(p);
  }
  s.points = {};  // the whole stored series: gone before the next job loads
  for (const WorkerSlot& slot : job->record.slots()) {
    if (ActiveSlot(*job, slot.member_id()) == nullptr) {
      ForgetThroughput(*job, slot.member_id());
    }
  }
  job->record.set_num_events(static_cast<int64_t>(job->events.size()));
  table_.NoteJobId(job->record.job_id());
  Job& j = table_.Insert(std::move(job));
  if (j.record.state() == RUNNING) {
    j.shards.assign(j.record.servers_size(), ShardSync{});
    for (ShardSync& sh : j.shards) sh.needs_check = true;
    for (const WorkerSlot& slot : j.record.slots()) {
      if (!slot.active()) continue;
      WorkerRuntime& rt = j.runtime[slot.member_id()];
      rt.last_heartbeat_ms = now;
      rt.clock_changed_ms = now;
    }
    table_.AddEvent(
        j, "coordinator",
        "coordinator restarted; waiting for the members to re-register", 0,
        writes);
  } else if (j.record.state() == PENDING && j.record.slots_size() > 0) {
    // It was being started: start again from scratch.
    j.record.clear_slots();
    j.record.clear_servers();
    j.record.clear_server_members();
    j.record.clear_workers();
    table_.SaveRecord(j, writes);
  } else if (IsTerminal(j.record.state())) {
    j.shards.assign(j.record.servers_size(), ShardSync{});
    for (ShardSync& sh : j.shards) sh.torn_down = true;
  }
}

absl::StatusOr<RegisterResponse> CoordinatorImpl::Register(
    const RegisterRequest& request) {
  const int64_t before = membership_.next_member_id();
  std::optional<Member> previous;
  if (request.member_id() != 0) previous = membership_.Get(request.member_id());
  PS_ASSIGN_OR_RETURN(Member m, membership_.Register(request));
  if (membership_.next_member_id() != before) {
    // Ids are never reused, even across coordinator restarts.
    PS_RETURN_IF_ERROR(store_->PutNextMemberId(membership_.next_member_id()));
  }
  if (m.role() == SERVER) {
    WriteBatch writes;
    {
      absl::MutexLock l(&table_.mu());
      CheckShardsServedBy(table_, m, membership_, &writes);
      if (previous.has_value() && previous->pid() != request.pid()) {
        // Its process restarted: the replicas it held are gone.
        NoteServerRestarted(table_, m.member_id(), &writes);
      }
    }
    PS_RETURN_IF_ERROR(writes.Flush(store_));
  }
  if (m.role() == WORKER && previous.has_value() &&
      previous->pid() != request.pid()) {
    // The worker restarted under its old id: it lost its state, so it
    // leaves its job and rejoins it at the current step (next Tick).
    WriteBatch writes;
    {
      absl::MutexLock l(&table_.mu());
      for (auto& [id, job] : table_.jobs()) {
        if (job->record.state() == RUNNING &&
            ActiveSlot(*job, m.member_id()) != nullptr) {
          Evict(table_, *job, m.member_id(), "the worker restarted",
                /*banned=*/false, &writes);
        }
      }
    }
    PS_RETURN_IF_ERROR(writes.Flush(store_));
  }
  RegisterResponse response;
  response.set_member_id(m.member_id());
  response.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return response;
}

absl::StatusOr<HeartbeatResponse> CoordinatorImpl::Heartbeat(
    const HeartbeatRequest& request) {
  HeartbeatResponse response;
  if (!membership_.Heartbeat(request.member_id()).ok()) {
    response.set_reregister(true);
    return response;
  }
  std::optional<Member> member = membership_.Get(request.member_id());
  if (!member.has_value() || member->role() != WORKER) return response;
  const int64_t now = clock_->NowMs();
  absl::MutexLock l(&table_.mu());
  AnswerHeartbeat(table_, request, now, options_.rate_window_ms,
                  response.mutable_assignment());
  return response;
}

absl::StatusOr<SubmitJobResponse> CoordinatorImpl::SubmitJob(
    const SubmitJobRequest& request) {
  ValidationOptions vo;
  vo.check_dataset_files = options_.check_dataset_files;
  absl::Status valid = ValidateJobSpec(request.spec(), vo);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec:\n", valid.message()));
  }
  if (const std::string shortfall = ReplicationShortfall(
          request.spec(), static_cast<int>(membership_.Alive(SERVER).size()));
      !shortfall.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec does not fit the cluster: ", shortfall));
  }
  JobSpec spec = NormalizeJobSpec(request.spec());
  auto job = std::make_unique<Job>();
  job->points = MetricSeriesSet(options_.max_points_per_series);
  {
    absl::MutexLock l(&table_.mu());
    job->record.set_job_id(table_.NewJobId());
    job->order = table_.NextOrder();
  }
  JobRecord& r = job->record;
  *r.mutable_spec() = std::move(spec);
  r.set_state(PENDING);
  r.set_reason("queued");
  r.set_submit_time_ms(clock_->NowMs());
  r.set_total_steps(EstimateTotalSteps(r.spec(), r.spec().num_workers()));
  // Durable before anyone can see it: appends for it may follow at once.
  PS_RETURN_IF_ERROR(store_->PutRecord(r, 0));
  WriteBatch writes;
  SubmitJobResponse response;
  response.set_job_id(r.job_id());
  {
    absl::MutexLock l(&table_.mu());
    Job& j = table_.Insert(std::move(job));
    table_.AddEvent(j, "state",
                    absl::StrCat("submitted \"", j.record.spec().name(), "\""),
                    0, &writes);
  }
  PS_RETURN_IF_ERROR(writes.Flush(store_));
  return response;
}

absl::StatusOr<CancelJobResponse> CoordinatorImpl::CancelJob(
    const CancelJobRequest& request) {
  WriteBatch writes;
  CancelJobResponse response;
  {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(request.job_id()));
    const JobState state = job->record.state();
    if (state == SUCCEEDED || state == FAILED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", request.job_id(), " already ended: ", JobState_Name(state),
          " (", job->record.reason(), ")"));
    }
    if (state != CANCELLED) {
      table_.SetState(*job, CANCELLED,
                      request.reason().empty()
                          ? std::string("cancelled by the user")
                          : absl::StrCat("cancelled: ", request.reason()),
                      &writes);
    }
    response.set_state(job->record.state());
  }
  PS_RETURN_IF_ERROR(writes.Flush(store_));
  reconciler_.Reconcile(request.job_id());
  return response;
}

absl::Status CoordinatorImpl::ReportMetrics(
    const ReportMetricsRequest& request) {
  WriteBatch writes;
  bool ended = false;
  {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(request.job_id()));
    PS_ASSIGN_OR_RETURN(ended, IntakeMetrics(table_, *job, request, &writes));
  }
  PS_RETURN_IF_ERROR(writes.Flush(store_));
  if (ended) reconciler_.Reconcile(request.job_id());
  return absl::OkStatus();
}

absl::Status CoordinatorImpl::ReportFailure(
    const ReportFailureRequest& request) {
  WriteBatch writes;
  {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(request.job_id()));
    const bool server = !request.server_address().empty();
    const bool crashed = !server && request.crashed();
    table_.AddEvent(
        *job,
        server    ? "server_failure"
        : crashed ? "worker_crash"
                  : "worker_failure",
        server ? absl::StrCat("member ", request.member_id(),
                              " cannot reach shard ", request.server_address(),
                              ": ", request.message())
               : absl::StrCat("member ", request.member_id(), ": ",
                              request.message()),
        request.member_id(), &writes);
    // A worker that gave up on the job (diverged, a shard gone past its
    // retry deadline, bad data) leaves it, so that no barrier waits for it
    // and a job whose every worker failed ends FAILED instead of hanging.
    // One whose process crashed leaves it too, but comes back to its rank
    // (FillVacancies) as a restarted worker does.
    if (!server && job->record.state() == RUNNING) {
      Evict(table_, *job, request.member_id(),
            absl::StrCat(crashed ? "crashed: " : "failed: ", request.message()),
            /*banned=*/!crashed, &writes);
    }
  }
  return writes.Flush(store_);
}

absl::StatusOr<GetMetricsResponse> CoordinatorImpl::GetMetrics(
    const GetMetricsRequest& request) {
  std::vector<MetricPoint> points;
  {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(request.job_id()));
    points = SelectPoints(*job, request);
  }
  GetMetricsResponse response;
  if (!request.format().empty()) {
    PS_ASSIGN_OR_RETURN(
        *response.mutable_text(),
        FormatMetrics(request.format(), request.job_id(), points));
  }
  response.mutable_points()->Reserve(static_cast<int>(points.size()));
  for (MetricPoint& p : points) *response.add_points() = std::move(p);
  return response;
}

void CoordinatorImpl::Tick() {
  membership_.DetectDead();
  const int64_t now = clock_->NowMs();
  const LivenessOptions liveness{
      .server_wait_timeout_ms = options_.server_wait_timeout_ms,
      .rate_window_ms = options_.rate_window_ms,
      .grace_until_ms = grace_until_ms_};
  WriteBatch writes;
  std::vector<std::string> to_reconcile;
  {
    absl::MutexLock l(&table_.mu());
    const std::vector<int64_t> idle_workers =
        IdleWorkers(table_, membership_, now, options_.heartbeat_interval_ms);
    std::set<int64_t> idle(idle_workers.begin(), idle_workers.end());
    for (auto& [id, job] : table_.jobs()) {
      if (job->record.state() == RUNNING) {
        CheckRunningJob(table_, *job, membership_, now, liveness, &writes);
        if (job->record.state() == RUNNING) {
          // Only workers of the job's kind (Python or not) fill it.
          const std::vector<int64_t> fit =
              WorkersFor(std::vector<int64_t>(idle.begin(), idle.end()),
                         membership_, job->record.spec());
          std::set<int64_t> candidates(fit.begin(), fit.end());
          const std::set<int64_t> offered = candidates;
          FillVacancies(table_, *job, &candidates, &writes);
          for (int64_t id : offered) {
            if (!candidates.count(id)) idle.erase(id);
          }
        }
      }
      bool needs_shards = job->record.state() == RUNNING;
      if (IsTerminal(job->record.state())) {
        for (const ShardSync& s : job->shards) needs_shards |= !s.torn_down;
      }
      if (needs_shards) to_reconcile.push_back(id);
    }
  }
  // A failed write is already reported; the state to retry is in memory.
  writes.Flush(store_).IgnoreError();
  scheduler_.StartNextJob(&writes);
  for (const std::string& id : to_reconcile) reconciler_.Reconcile(id);
}

absl::StatusOr<ExplainJobResponse> CoordinatorImpl::ExplainJob(
    absl::string_view job_id) {
  ExplainInput in;
  in.now_ms = clock_->NowMs();
  in.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  {
    absl::MutexLock l(&table_.mu());
    PS_ASSIGN_OR_RETURN(Job * job, table_.Find(job_id));
    in.record = Snapshot(*job);
    for (const auto& [id, rt] : job->runtime) {
      in.workers[id] = {rt.last_heartbeat_ms,
                        StepRate(rt, in.now_ms, options_.rate_window_ms,
                                 /*use_busy=*/false)};
    }
    const size_t first = job->events.size() > kMaxEventsInExplain
                             ? job->events.size() - kMaxEventsInExplain
                             : 0;
    in.recent_events.assign(job->events.begin() + first, job->events.end());
  }
  for (const auto& [id, worker] : in.workers) {
    if (std::optional<Member> m = membership_.Get(id)) in.members[id] = *m;
  }
  if (in.record.state() == RUNNING) {
    for (int i = 0; i < in.record.servers_size(); ++i) {
      GetShardStatusRequest req;
      req.set_job_id(in.record.job_id());
      req.set_shard(i);
      in.shards.push_back(shards_->GetShardStatus(in.record.servers(i), req));
    }
  }
  ExplainJobResponse response;
  response.set_text(FormatExplanation(in));
  for (const absl::StatusOr<ShardStatus>& s : in.shards) {
    if (s.ok()) *response.add_shards() = *s;
  }
  return response;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const CoordinatorOptions& options, const Clock* clock, JobStore* store,
    ShardClient* shards) {
  PS_ASSIGN_OR_RETURN(int64_t first_member_id, store->GetNextMemberId());
  auto c = std::make_unique<CoordinatorImpl>(options, clock, store, shards,
                                             first_member_id);
  PS_RETURN_IF_ERROR(c->Load());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace ps::coordinator
