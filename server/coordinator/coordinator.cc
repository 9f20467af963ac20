#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/status.h"
#include "server/coordinator/explain.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/metrics_format.h"

namespace ps::coordinator {
namespace {

// Fashion-MNIST's training set: used only to estimate total_steps for
// progress bars; workers decide when they are done.
constexpr int64_t kTrainExamples = 60000;
constexpr size_t kMaxEventsInExplain = 8;

bool IsTerminal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

std::string Seconds(int64_t ms) { return absl::StrFormat("%.1fs", ms / 1e3); }

// Per-shard progress of bringing a running job's shard in line.
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
};

// What the coordinator knows of a worker between heartbeats (not stored).
struct WorkerRuntime {
  int64_t last_heartbeat_ms = 0;
  int64_t clock = 0;
  int64_t clock_changed_ms = 0;
  std::deque<std::pair<int64_t, int64_t>> samples;  // (time ms, clock)
  double busy_ms = 0;  // EWMA of step_time_ms - wait_ms, 0 = unknown
  int64_t busy_updated_ms = 0;
  int64_t below_since_median_clock = -1;
  bool flagged = false;
};

struct Job {
  JobRecord record;
  std::vector<JobEvent> events;
  std::vector<MetricPoint> points;
  int64_t order = 0;       // submission order
  int64_t change = 1;      // bumped on every visible change
  int64_t record_seq = 0;  // orders record writes
  bool starting = false;   // shards being set up
  bool reconciling = false;
  std::vector<ShardSync> shards;
  std::map<int64_t, WorkerRuntime> runtime;    // by member id
  std::map<int64_t, double> examples_per_sec;  // latest, by member id
  double staleness_sum = 0;
  int64_t staleness_count = 0;
};

// Durable writes collected under the lock and done after it is released.
struct Writes {
  std::vector<std::pair<JobRecord, int64_t>> records;
  std::map<std::string,
           std::pair<std::vector<JobEvent>, std::vector<MetricPoint>>>
      appends;
  bool empty() const { return records.empty() && appends.empty(); }
};

// A shard call the reconciler makes outside the lock.
struct ShardAction {
  enum Kind { kCheck, kMembership, kPoll, kTeardown } kind;
  int shard = 0;
  std::string address;
};

class CoordinatorImpl : public Coordinator {
 public:
  CoordinatorImpl(const CoordinatorOptions& options, const Clock* clock,
                  JobStore* store, ShardClient* shards, int64_t first_member_id)
      : options_(options),
        clock_(clock),
        store_(store),
        shards_(shards),
        membership_(clock, {.heartbeat_timeout_ms = options.member_timeout_ms,
                            .first_member_id = first_member_id}) {}

  absl::Status Load() {
    PS_ASSIGN_OR_RETURN(std::vector<StoredJob> stored, store_->LoadAll());
    // Submission order (job ids sort as strings: "job-10" < "job-2").
    std::stable_sort(stored.begin(), stored.end(),
                     [](const StoredJob& a, const StoredJob& b) {
                       return a.record.submit_time_ms() <
                              b.record.submit_time_ms();
                     });
    const int64_t now = clock_->NowMs();
    Writes writes;
    {
      absl::MutexLock l(&mu_);
      for (StoredJob& s : stored) {
        auto job = std::make_unique<Job>();
        job->record = std::move(s.record);
        job->events = std::move(s.events);
        job->order = next_order_++;
        ResetSummary(*job);
        for (const MetricPoint& p : s.points) ApplyPoint(*job, p);
        job->points = std::move(s.points);
        for (const WorkerSlot& slot : job->record.slots()) {
          if (ActiveSlot(*job, slot.member_id()) == nullptr) {
            ForgetThroughput(*job, slot.member_id());
          }
        }
        job->record.set_num_events(static_cast<int64_t>(job->events.size()));
        int64_t n = 0;
        const std::string& id = job->record.job_id();
        if (absl::StartsWith(id, "job-") &&
            absl::SimpleAtoi(absl::string_view(id).substr(4), &n)) {
          next_job_number_ = std::max(next_job_number_, n + 1);
        }
        Job& j = *job;
        jobs_[id] = std::move(job);
        if (j.record.state() == RUNNING) {
          j.shards.assign(j.record.servers_size(), ShardSync{});
          for (ShardSync& sh : j.shards) sh.needs_check = true;
          for (const WorkerSlot& slot : j.record.slots()) {
            if (!slot.active()) continue;
            WorkerRuntime& rt = j.runtime[slot.member_id()];
            rt.last_heartbeat_ms = now;
            rt.clock_changed_ms = now;
          }
          AddEvent(j, "coordinator",
                   "coordinator restarted; waiting for the members to "
                   "re-register",
                   0, &writes);
        } else if (j.record.state() == PENDING && j.record.slots_size() > 0) {
          // It was being started: start again from scratch.
          j.record.clear_slots();
          j.record.clear_servers();
          j.record.clear_workers();
          SaveRecord(j, &writes);
        } else if (IsTerminal(j.record.state())) {
          j.shards.assign(j.record.servers_size(), ShardSync{});
          for (ShardSync& sh : j.shards) sh.torn_down = true;
        }
      }
    }
    return Flush(writes);
  }

  absl::StatusOr<RegisterResponse> Register(
      const RegisterRequest& request) override {
    const int64_t before = membership_.next_member_id();
    std::optional<Member> previous;
    if (request.member_id() != 0) {
      previous = membership_.Get(request.member_id());
    }
    PS_ASSIGN_OR_RETURN(Member m, membership_.Register(request));
    if (membership_.next_member_id() != before) {
      // Ids are never reused, even across coordinator restarts.
      PS_RETURN_IF_ERROR(store_->PutNextMemberId(membership_.next_member_id()));
    }
    if (m.role() == SERVER) {
      absl::MutexLock l(&mu_);
      for (auto& [id, job] : jobs_) {
        if (job->record.state() != RUNNING) continue;
        for (int i = 0; i < job->record.servers_size(); ++i) {
          if (job->record.servers(i) == m.address()) {
            job->shards[i].needs_check = true;
          }
        }
      }
    }
    if (m.role() == WORKER && previous.has_value() &&
        previous->pid() != request.pid()) {
      // The worker restarted under its old id: it lost its state, so it
      // leaves its job and rejoins at the current step (next Tick).
      Writes writes;
      {
        absl::MutexLock l(&mu_);
        for (auto& [id, job] : jobs_) {
          if (job->record.state() == RUNNING &&
              ActiveSlot(*job, m.member_id()) != nullptr) {
            Evict(*job, m.member_id(), "the worker restarted", false, &writes);
          }
        }
      }
      PS_RETURN_IF_ERROR(Flush(writes));
    }
    RegisterResponse response;
    response.set_member_id(m.member_id());
    response.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    return response;
  }

  absl::StatusOr<HeartbeatResponse> Heartbeat(
      const HeartbeatRequest& request) override {
    HeartbeatResponse response;
    if (!membership_.Heartbeat(request.member_id()).ok()) {
      response.set_reregister(true);
      return response;
    }
    std::optional<Member> member = membership_.Get(request.member_id());
    if (!member.has_value() || member->role() != WORKER) return response;
    const int64_t now = clock_->NowMs();
    WorkerAssignment* a = response.mutable_assignment();
    absl::MutexLock l(&mu_);
    for (auto& [id, job] : jobs_) {
      if (job->record.state() != RUNNING) continue;
      const WorkerSlot* slot = ActiveSlot(*job, request.member_id());
      if (slot == nullptr) continue;
      WorkerRuntime& rt = job->runtime[request.member_id()];
      rt.last_heartbeat_ms = now;
      if (request.job_id() == id &&
          request.incarnation() == job->record.incarnation()) {
        ObserveClock(*job, rt, request.clock(), now);
      }
      FillAssignment(*job, *slot, a);
      return response;
    }
    if (!request.job_id().empty()) {
      a->set_command(WorkerAssignment::STOP);
      a->set_job_id(request.job_id());
    } else {
      a->set_command(WorkerAssignment::IDLE);
    }
    return response;
  }

  absl::StatusOr<SubmitJobResponse> SubmitJob(
      const SubmitJobRequest& request) override {
    ValidationOptions vo;
    vo.check_dataset_files = options_.check_dataset_files;
    absl::Status valid = ValidateJobSpec(request.spec(), vo);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid job spec:\n", valid.message()));
    }
    JobSpec spec = NormalizeJobSpec(request.spec());
    auto job = std::make_unique<Job>();
    {
      absl::MutexLock l(&mu_);
      job->record.set_job_id(absl::StrCat("job-", next_job_number_++));
      job->order = next_order_++;
    }
    JobRecord& r = job->record;
    *r.mutable_spec() = std::move(spec);
    r.set_state(PENDING);
    r.set_reason("queued");
    r.set_submit_time_ms(clock_->NowMs());
    r.set_total_steps(EstimateTotalSteps(r.spec(), r.spec().num_workers()));
    // Durable before anyone can see it: appends for it may follow at once.
    PS_RETURN_IF_ERROR(store_->PutRecord(r, 0));
    Writes writes;
    SubmitJobResponse response;
    response.set_job_id(r.job_id());
    {
      absl::MutexLock l(&mu_);
      Job& j = *job;
      jobs_[r.job_id()] = std::move(job);
      AddEvent(j, "state",
               absl::StrCat("submitted \"", j.record.spec().name(), "\""), 0,
               &writes);
    }
    PS_RETURN_IF_ERROR(Flush(writes));
    return response;
  }

  absl::StatusOr<JobRecord> GetJob(absl::string_view job_id) override {
    absl::MutexLock l(&mu_);
    PS_ASSIGN_OR_RETURN(Job * job, FindJob(job_id));
    return Snapshot(*job);
  }

  ListJobsResponse ListJobs() override {
    absl::MutexLock l(&mu_);
    std::vector<const Job*> ordered;
    for (const auto& [id, job] : jobs_) ordered.push_back(job.get());
    std::sort(ordered.begin(), ordered.end(),
              [](const Job* a, const Job* b) { return a->order < b->order; });
    ListJobsResponse response;
    for (const Job* job : ordered) *response.add_jobs() = Snapshot(*job);
    return response;
  }

  absl::StatusOr<CancelJobResponse> CancelJob(
      const CancelJobRequest& request) override {
    Writes writes;
    CancelJobResponse response;
    {
      absl::MutexLock l(&mu_);
      PS_ASSIGN_OR_RETURN(Job * job, FindJob(request.job_id()));
      const JobState state = job->record.state();
      if (state == SUCCEEDED || state == FAILED) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", request.job_id(), " already ended: ", JobState_Name(state),
            " (", job->record.reason(), ")"));
      }
      if (state != CANCELLED) {
        SetState(*job, CANCELLED,
                 request.reason().empty()
                     ? std::string("cancelled by the user")
                     : absl::StrCat("cancelled: ", request.reason()),
                 &writes);
      }
      response.set_state(job->record.state());
    }
    PS_RETURN_IF_ERROR(Flush(writes));
    Reconcile(request.job_id());
    return response;
  }

  absl::Status ReportMetrics(const ReportMetricsRequest& request) override {
    Writes writes;
    bool ended = false;
    {
      absl::MutexLock l(&mu_);
      PS_ASSIGN_OR_RETURN(Job * job, FindJob(request.job_id()));
      WorkerSlot* slot = nullptr;
      for (WorkerSlot& s : *job->record.mutable_slots()) {
        if (s.member_id() == request.member_id()) {
          slot = &s;
          if (s.active()) break;
        }
      }
      if (slot == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("member ", request.member_id(),
                         " is not a worker of job ", request.job_id()));
      }
      const int64_t now = clock_->NowMs();
      const int64_t start = job->record.start_time_ms();
      std::vector<MetricPoint>& out = writes.appends[request.job_id()].second;
      for (int i = 0; i < request.points_size(); ++i) {
        MetricPoint p = request.points(i);
        if (p.name().empty() || p.name().size() > 64) {
          return absl::InvalidArgumentError(
              absl::StrCat("points[", i, "].name: must be 1..64 characters"));
        }
        if (p.step() < 0 || p.step() > MaxStep(job->record.spec())) {
          return absl::InvalidArgumentError(
              absl::StrCat("points[", i, "].step: must be in 0..",
                           MaxStep(job->record.spec()), ", got ", p.step()));
        }
        p.set_member_id(request.member_id());
        if (p.time_ms() == 0) p.set_time_ms(start > 0 ? now - start : 0);
        out.push_back(p);
      }
      for (const MetricPoint& p : out) {
        ApplyPoint(*job, p);
        job->points.push_back(p);
        auto it = job->runtime.find(request.member_id());
        if (it != job->runtime.end()) ObserveTiming(it->second, p, now);
      }
      if (!out.empty()) Touch(*job);
      if (request.done() && !slot->done() && slot->active() &&
          job->record.state() == RUNNING) {
        slot->set_done(true);
        AddEvent(*job, "worker_done",
                 absl::StrCat("member ", request.member_id(), " (rank ",
                              slot->rank(), ") finished its share"),
                 request.member_id(), &writes);
        if (AllActiveDone(*job)) {
          SetState(*job, SUCCEEDED, "every worker finished", &writes);
          ended = true;
        } else {
          SaveRecord(*job, &writes);
        }
      }
    }
    PS_RETURN_IF_ERROR(Flush(writes));
    if (ended) Reconcile(request.job_id());
    return absl::OkStatus();
  }

  absl::Status ReportFailure(const ReportFailureRequest& request) override {
    Writes writes;
    {
      absl::MutexLock l(&mu_);
      PS_ASSIGN_OR_RETURN(Job * job, FindJob(request.job_id()));
      const bool server = !request.server_address().empty();
      AddEvent(*job, server ? "server_failure" : "worker_failure",
               server
                   ? absl::StrCat(
                         "member ", request.member_id(), " cannot reach shard ",
                         request.server_address(), ": ", request.message())
                   : absl::StrCat("member ", request.member_id(), ": ",
                                  request.message()),
               request.member_id(), &writes);
      // A worker that gave up on the job (diverged, a shard gone past its
      // retry deadline, bad data) leaves it, so that no barrier waits for it
      // and a job whose every worker failed ends FAILED instead of hanging.
      if (!server && job->record.state() == RUNNING) {
        Evict(*job, request.member_id(),
              absl::StrCat("failed: ", request.message()), /*banned=*/true,
              &writes);
      }
    }
    return Flush(writes);
  }

  absl::StatusOr<GetMetricsResponse> GetMetrics(
      const GetMetricsRequest& request) override {
    std::vector<MetricPoint> points;
    {
      absl::MutexLock l(&mu_);
      PS_ASSIGN_OR_RETURN(Job * job, FindJob(request.job_id()));
      std::set<std::string> names(request.names().begin(),
                                  request.names().end());
      // cut[k]: points of incarnation k after this step were computed
      // again (the lowest restart step of the rollbacks after k).
      const auto& restarts = job->record.rollback_steps();
      std::vector<int64_t> cut(restarts.size() + 1,
                               std::numeric_limits<int64_t>::max());
      for (int k = restarts.size() - 1; k >= 0; --k) {
        cut[k] = std::min(cut[k + 1], restarts[k]);
      }
      for (const MetricPoint& p : job->points) {
        if (!names.empty() && !names.count(p.name())) continue;
        if (!request.include_superseded() && p.incarnation() >= 0 &&
            p.incarnation() < static_cast<int64_t>(cut.size()) &&
            p.step() > cut[p.incarnation()]) {
          continue;
        }
        points.push_back(p);
      }
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

  absl::StatusOr<GetEventsResponse> GetEvents(
      absl::string_view job_id) override {
    absl::MutexLock l(&mu_);
    PS_ASSIGN_OR_RETURN(Job * job, FindJob(job_id));
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
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock l(&mu_);
    while (true) {
      if (shutdown_) {
        return absl::UnavailableError("the coordinator is shutting down");
      }
      PS_ASSIGN_OR_RETURN(Job * job, FindJob(job_id));
      if (job->change != *seen) {
        *seen = job->change;
        return Snapshot(*job);
      }
      if (changed_.WaitWithDeadline(&mu_, deadline)) {
        if (shutdown_) continue;
        PS_ASSIGN_OR_RETURN(job, FindJob(job_id));
        *seen = job->change;
        return Snapshot(*job);
      }
    }
  }

  void Tick() override;

  void Shutdown() override {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
    changed_.SignalAll();
  }

 private:
  absl::StatusOr<Job*> FindJob(absl::string_view job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    }
    return it->second.get();
  }

  // The largest step a worker of the job can reach: max_steps, else every
  // epoch done by one worker alone (what is left after evictions).
  static int64_t MaxStep(const JobSpec& spec) {
    const int64_t n = EstimateTotalSteps(spec, 1);
    return n > 0 ? n : std::numeric_limits<int64_t>::max();
  }

  static int64_t EstimateTotalSteps(const JobSpec& spec, int num_workers) {
    if (spec.data().max_steps() > 0) return spec.data().max_steps();
    const int64_t per_step = static_cast<int64_t>(std::max(1, num_workers)) *
                             std::max(1, spec.data().batch_size());
    return spec.data().epochs() * ((kTrainExamples + per_step - 1) / per_step);
  }

  static const WorkerSlot* ActiveSlot(const Job& job, int64_t member_id) {
    for (const WorkerSlot& s : job.record.slots()) {
      if (s.active() && s.member_id() == member_id) return &s;
    }
    return nullptr;
  }

  static bool AllActiveDone(const Job& job) {
    bool any = false;
    for (const WorkerSlot& s : job.record.slots()) {
      if (!s.active()) continue;
      any = true;
      if (!s.done()) return false;
    }
    return any;
  }

  void FillAssignment(const Job& job, const WorkerSlot& slot,
                      WorkerAssignment* a) const {
    a->set_command(WorkerAssignment::TRAIN);
    a->set_job_id(job.record.job_id());
    *a->mutable_spec() = job.record.spec();
    a->set_rank(slot.rank());
    a->set_num_workers(job.record.num_data_shards());
    *a->mutable_data_shards() = slot.data_shards();
    a->set_num_data_shards(job.record.num_data_shards());
    *a->mutable_server_addresses() = job.record.servers();
    a->set_evaluator(slot.evaluator());
    a->set_membership_epoch(job.record.membership_epoch());
    a->set_start_step(slot.start_step());
    a->set_incarnation(job.record.incarnation());
  }

  JobRecord Snapshot(const Job& job) const {
    JobRecord r = job.record;
    for (WorkerSlot& s : *r.mutable_slots()) {
      auto it = job.runtime.find(s.member_id());
      if (it != job.runtime.end() && s.active()) s.set_clock(it->second.clock);
    }
    return r;
  }

  void Touch(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++job.change;
    changed_.SignalAll();
  }

  void AddEvent(Job& job, absl::string_view kind, absl::string_view message,
                int64_t member_id, Writes* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    JobEvent e;
    e.set_time_ms(clock_->NowMs());
    e.set_kind(std::string(kind));
    e.set_message(std::string(message));
    e.set_member_id(member_id);
    job.events.push_back(e);
    job.record.set_num_events(static_cast<int64_t>(job.events.size()));
    writes->appends[job.record.job_id()].first.push_back(std::move(e));
    Touch(job);
  }

  void SaveRecord(Job& job, Writes* writes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Active member ids in rank order.
    std::map<int, int64_t> by_rank;
    for (const WorkerSlot& s : job.record.slots()) {
      if (s.active()) by_rank[s.rank()] = s.member_id();
    }
    job.record.clear_workers();
    for (const auto& [rank, id] : by_rank) job.record.add_workers(id);
    writes->records.emplace_back(job.record, ++job.record_seq);
    Touch(job);
  }

  void SetState(Job& job, JobState state, absl::string_view reason,
                Writes* writes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t now = clock_->NowMs();
    job.record.set_state(state);
    job.record.set_reason(std::string(reason));
    if (state == RUNNING) job.record.set_start_time_ms(now);
    if (IsTerminal(state)) job.record.set_end_time_ms(now);
    AddEvent(job, "state", absl::StrCat(JobState_Name(state), ": ", reason), 0,
             writes);
    SaveRecord(job, writes);
  }

  // The job's throughput counts active workers only.
  static void ForgetThroughput(Job& job, int64_t member_id) {
    job.examples_per_sec.erase(member_id);
    double sum = 0;
    for (const auto& [id, v] : job.examples_per_sec) sum += v;
    job.record.set_examples_per_sec(sum);
  }

  static void ResetSummary(Job& job) {
    JobRecord& r = job.record;
    r.set_global_step(0);
    r.set_epoch(0);
    r.set_last_train_loss(0);
    r.set_last_test_accuracy(0);
    r.set_best_test_accuracy(0);
    r.set_examples_per_sec(0);
    r.set_mean_staleness(0);
  }

  // Folds one metric point into the record's summary fields (the same on
  // the live path and when replaying the store after a restart).
  static void ApplyPoint(Job& job, const MetricPoint& p) {
    JobRecord& r = job.record;
    if (p.incarnation() == r.incarnation()) {
      r.set_global_step(std::max(r.global_step(), p.step()));
      r.set_epoch(std::max(r.epoch(), p.epoch()));
    }
    const std::string& n = p.name();
    if (n == "train_loss") {
      r.set_last_train_loss(p.value());
    } else if (n == "test_accuracy") {
      r.set_last_test_accuracy(p.value());
      r.set_best_test_accuracy(std::max(r.best_test_accuracy(), p.value()));
    } else if (n == "examples_per_sec") {
      job.examples_per_sec[p.member_id()] = p.value();
      double sum = 0;
      for (const auto& [id, v] : job.examples_per_sec) sum += v;
      r.set_examples_per_sec(sum);
    } else if (n == "staleness" && std::isfinite(p.value())) {
      job.staleness_sum += p.value();
      ++job.staleness_count;
      r.set_mean_staleness(job.staleness_sum / job.staleness_count);
    }
  }

  void ObserveClock(Job& job, WorkerRuntime& rt, int64_t clock, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A clock no worker of this job can reach is a peer bug; it must not
    // become the job's step (nor a rejoining worker's start step).
    if (clock < 0 || clock > MaxStep(job.record.spec())) return;
    if (clock != rt.clock) {
      rt.clock = clock;
      rt.clock_changed_ms = now;
      Touch(job);
    }
    if (clock > job.record.global_step()) job.record.set_global_step(clock);
    rt.samples.emplace_back(now, clock);
    while (rt.samples.size() > 2 &&
           now - rt.samples[1].first >= options_.rate_window_ms) {
      rt.samples.pop_front();
    }
  }

  static void ObserveTiming(WorkerRuntime& rt, const MetricPoint& p,
                            int64_t now) {
    // A worker's own speed, without the time it waited for others: in BSP
    // every worker advances at the straggler's pace, so clocks alone cannot
    // tell who is slow.
    if (p.name() != "compute_ms" || !(p.value() > 0)) return;
    rt.busy_ms =
        rt.busy_ms == 0 ? p.value() : 0.7 * rt.busy_ms + 0.3 * p.value();
    rt.busy_updated_ms = now;
  }

  // Steps per second, or nullopt when not measured yet.
  std::optional<double> StepRate(const WorkerRuntime& rt, int64_t now,
                                 bool use_busy) const {
    if (use_busy) return 1000.0 / rt.busy_ms;
    if (rt.samples.size() < 2) return std::nullopt;
    const auto& [t0, c0] = rt.samples.front();
    const auto& [t1, c1] = rt.samples.back();
    if (t1 - t0 < options_.rate_window_ms / 2 ||
        now - t1 > options_.rate_window_ms) {
      return std::nullopt;
    }
    return (c1 - c0) * 1000.0 / static_cast<double>(t1 - t0);
  }

  // Removes a worker from the job: its data shards go to the survivor with
  // the fewest, the evaluator role moves if needed, the membership epoch
  // changes (the reconciler tells the shards).
  void Evict(Job& job, int64_t member_id, absl::string_view reason, bool banned,
             Writes* writes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto& slots = *job.record.mutable_slots();
    WorkerSlot* gone = nullptr;
    for (WorkerSlot& s : slots) {
      if (s.active() && s.member_id() == member_id) gone = &s;
    }
    if (gone == nullptr) return;
    gone->set_active(false);
    gone->set_left_reason(std::string(reason));
    gone->set_banned(banned);
    job.runtime.erase(member_id);
    ForgetThroughput(job, member_id);
    job.record.set_evictions(job.record.evictions() + 1);
    job.record.set_membership_epoch(job.record.membership_epoch() + 1);
    AddEvent(job, "evicted",
             absl::StrCat("member ", member_id, " (rank ", gone->rank(),
                          ") evicted: ", reason),
             member_id, writes);
    WorkerSlot* heir = nullptr;
    for (WorkerSlot& s : slots) {
      if (!s.active()) continue;
      if (heir == nullptr || (heir->done() && !s.done()) ||
          (heir->done() == s.done() &&
           s.data_shards_size() < heir->data_shards_size())) {
        heir = &s;
      }
    }
    if (heir == nullptr) {
      SetState(job, FAILED,
               absl::StrCat("no worker left: member ", member_id,
                            " was the last (", reason, ")"),
               writes);
      return;
    }
    for (int shard : gone->data_shards()) heir->add_data_shards(shard);
    std::vector<int> moved(gone->data_shards().begin(),
                           gone->data_shards().end());
    gone->clear_data_shards();
    if (gone->evaluator()) {
      gone->set_evaluator(false);
      WorkerSlot* lowest = nullptr;
      for (WorkerSlot& s : slots) {
        if (s.active() && (lowest == nullptr || s.rank() < lowest->rank())) {
          lowest = &s;
        }
      }
      lowest->set_evaluator(true);
    }
    AddEvent(
        job, "membership",
        absl::StrCat("epoch ", job.record.membership_epoch(), ": data shards [",
                     absl::StrJoin(moved, ","), "] moved to member ",
                     heir->member_id(), " (rank ", heir->rank(), ")"),
        heir->member_id(), writes);
    if (AllActiveDone(job)) {
      SetState(job, SUCCEEDED, "every remaining worker finished", writes);
    } else {
      SaveRecord(job, writes);
    }
  }

  // Gives an idle worker a vacant rank of a running job (a restarted worker
  // rejoins; another idle worker may take a dead one's place).
  void FillVacancies(Job& job, std::set<int64_t>* idle, Writes* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int n = job.record.num_data_shards();
    std::set<int> held;
    std::set<int64_t> banned;
    for (const WorkerSlot& s : job.record.slots()) {
      if (s.active()) held.insert(s.rank());
      if (s.banned()) banned.insert(s.member_id());
    }
    for (int rank = 0; rank < n && !idle->empty(); ++rank) {
      if (held.count(rank)) continue;
      // Prefer the member that held this rank before.
      int64_t pick = -1;
      for (const WorkerSlot& s : job.record.slots()) {
        if (s.rank() == rank && !s.banned() && idle->count(s.member_id())) {
          pick = s.member_id();
        }
      }
      if (pick < 0) {
        for (int64_t w : *idle) {
          if (!banned.count(w)) {
            pick = w;
            break;
          }
        }
      }
      if (pick < 0) return;
      idle->erase(pick);
      // Take the rank's own data shard back from whoever inherited it.
      for (WorkerSlot& s : *job.record.mutable_slots()) {
        if (!s.active()) continue;
        auto* shards = s.mutable_data_shards();
        shards->erase(std::remove(shards->begin(), shards->end(), rank),
                      shards->end());
      }
      WorkerSlot* slot = job.record.add_slots();
      slot->set_member_id(pick);
      slot->set_rank(rank);
      slot->add_data_shards(rank);
      slot->set_active(true);
      slot->set_start_step(job.record.global_step());
      bool has_evaluator = false;
      for (const WorkerSlot& s : job.record.slots()) {
        has_evaluator |= s.active() && s.evaluator();
      }
      slot->set_evaluator(!has_evaluator);
      const int64_t now = clock_->NowMs();
      WorkerRuntime& rt = job.runtime[pick];
      rt.last_heartbeat_ms = now;
      rt.clock = job.record.global_step();
      rt.clock_changed_ms = now;
      job.record.set_membership_epoch(job.record.membership_epoch() + 1);
      AddEvent(job, "rejoined",
               absl::StrCat("member ", pick, " joined as rank ", rank,
                            " at step ", job.record.global_step(), " (epoch ",
                            job.record.membership_epoch(), ")"),
               pick, writes);
      SaveRecord(job, writes);
    }
  }

  // Folds a shard's push counters into the record; dropped and rejected
  // gradients since the last poll become one event each. Returns whether
  // the record changed.
  bool UpdateCounters(Job& job, int shard, const ShardStatus& status,
                      Writes* writes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ShardSync& s = job.shards[shard];
    const int64_t new_dropped = status.dropped_pushes() - s.dropped;
    const int64_t new_rejected = status.rejected_pushes() - s.rejected;
    if (s.have_counters && new_dropped > 0) {
      AddEvent(job, "dropped_gradient",
               absl::StrCat("shard ", shard, " dropped ", new_dropped,
                            " late gradient(s) (", status.dropped_pushes(),
                            " in all)"),
               0, writes);
    }
    if (s.have_counters && new_rejected > 0) {
      AddEvent(
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

  // Heard from within a few heartbeat intervals: only such a worker gets a
  // rank (one evicted for silence is still ALIVE until the member timeout,
  // and must not be taken back before it speaks again).
  bool Fresh(const Member& m, int64_t now) const {
    return now - m.last_heartbeat_ms() <= 3 * options_.heartbeat_interval_ms;
  }

  bool IsBusy(int64_t member_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [id, job] : jobs_) {
      if (job->record.state() != RUNNING && !job->starting) continue;
      if (ActiveSlot(*job, member_id) != nullptr) return true;
    }
    return false;
  }

  void CheckRunningJob(Job& job, int64_t now, Writes* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckStragglers(Job& job, int64_t now, Writes* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the oldest queued job if the cluster can hold it.
  void StartNextJob(Writes* writes);
  void Reconcile(const std::string& job_id);
  // The job-wide rollback after shards lost the job (restarted): sets the
  // job up again on every shard, at incarnation `incarnation`, from one
  // checkpoint version (the newest the restarted shards restore; under BSP
  // every shard at exactly that version). Runs without the lock.
  struct Rollback {
    absl::Status status;
    int64_t version = 0;     // the restored version (BSP: of every shard)
    int64_t start_step = 0;  // where the workers start again
    std::string note;
  };
  Rollback RollBack(const std::string& job_id, const JobSpec& spec,
                    const std::vector<std::string>& servers,
                    const UpdateMembershipRequest& membership,
                    int64_t incarnation, std::vector<int> lost);

  absl::Status Flush(Writes& writes) {
    absl::Status result;
    for (const auto& [record, seq] : writes.records) {
      absl::Status s = store_->PutRecord(record, seq);
      if (!s.ok() && result.ok()) result = s;
    }
    for (const auto& [job_id, ep] : writes.appends) {
      absl::Status s = store_->Append(job_id, ep.first, ep.second);
      if (!s.ok() && result.ok()) result = s;
    }
    writes = Writes();
    if (!result.ok()) {
      std::fprintf(stderr, "coordinator: job store write failed: %s\n",
                   std::string(result.message()).c_str());
      return absl::InternalError(absl::StrCat("job store: ", result.message()));
    }
    return result;
  }

  const CoordinatorOptions options_;
  const Clock* const clock_;
  JobStore* const store_;
  ShardClient* const shards_;
  Membership membership_;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, std::unique_ptr<Job>, std::less<>> jobs_
      ABSL_GUARDED_BY(mu_);
  int64_t next_job_number_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

void CoordinatorImpl::Tick() {
  membership_.DetectDead();
  const int64_t now = clock_->NowMs();
  Writes writes;
  std::vector<std::string> to_reconcile;
  {
    absl::MutexLock l(&mu_);
    std::set<int64_t> idle;
    for (const Member& m : membership_.Alive(WORKER)) {
      if (!IsBusy(m.member_id()) && Fresh(m, now)) idle.insert(m.member_id());
    }
    for (auto& [id, job] : jobs_) {
      if (job->record.state() == RUNNING) {
        CheckRunningJob(*job, now, &writes);
        if (job->record.state() == RUNNING) {
          FillVacancies(*job, &idle, &writes);
        }
      }
      bool needs_shards = job->record.state() == RUNNING;
      if (IsTerminal(job->record.state())) {
        for (const ShardSync& s : job->shards) needs_shards |= !s.torn_down;
      }
      if (needs_shards) to_reconcile.push_back(id);
    }
  }
  Flush(writes).IgnoreError();  // already reported; retried state is in memory
  StartNextJob(&writes);
  for (const std::string& id : to_reconcile) Reconcile(id);
}

void CoordinatorImpl::CheckRunningJob(Job& job, int64_t now, Writes* writes) {
  const ConsistencySpec& c = job.record.spec().consistency();
  // Silent workers.
  std::vector<std::pair<int64_t, std::string>> evict;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active()) continue;
    const WorkerRuntime& rt = job.runtime[s.member_id()];
    const int64_t age = now - rt.last_heartbeat_ms;
    if (age > c.heartbeat_timeout_ms()) {
      evict.emplace_back(
          s.member_id(),
          absl::StrCat("no heartbeat for ", Seconds(age), " (timeout ",
                       Seconds(c.heartbeat_timeout_ms()), ")"));
    }
  }
  for (const auto& [id, reason] : evict) {
    Evict(job, id, reason, /*banned=*/false, writes);
  }
  if (job.record.state() != RUNNING) return;
  // Shards that went away.
  for (int i = 0; i < job.record.servers_size(); ++i) {
    const std::string& address = job.record.servers(i);
    ShardSync& sh = job.shards[i];
    const bool up = membership_.AliveServerAt(address).has_value();
    if (!up && sh.down_since_ms == 0) {
      sh.down_since_ms = now;
      AddEvent(
          job, "server_failure",
          absl::StrCat("shard ", i, " at ", address, " is down; waiting up to ",
                       Seconds(options_.server_wait_timeout_ms),
                       " for it to come back"),
          0, writes);
      job.record.set_reason(
          absl::StrCat("waiting for shard ", i, " at ", address));
    } else if (!up &&
               now - sh.down_since_ms > options_.server_wait_timeout_ms) {
      SetState(job, FAILED,
               absl::StrCat("shard ", i, " at ", address, " was down for ",
                            Seconds(now - sh.down_since_ms)),
               writes);
      return;
    } else if (up && sh.down_since_ms != 0) {
      sh.down_since_ms = 0;
      sh.needs_check = true;
      AddEvent(job, "server_recovered",
               absl::StrCat("shard ", i, " at ", address, " is back"), 0,
               writes);
      job.record.set_reason("running");
    }
  }
  if (job.record.state() != RUNNING) return;
  // BSP barrier: a worker behind the others whose clock has not moved for
  // the barrier timeout holds every shard's step. (With backup workers the
  // step does not wait for it, so it is left alone.) While a shard is down
  // every worker stalls on it, whatever its clock: the barrier timer starts
  // again once the shard is back.
  bool shard_down = false;
  for (const ShardSync& sh : job.shards) shard_down |= sh.down_since_ms != 0;
  if (shard_down) {
    for (auto& [id, rt] : job.runtime) rt.clock_changed_ms = now;
  } else if ((c.model() == ConsistencySpec::BSP ||
              c.model() == ConsistencySpec::MODEL_UNSPECIFIED) &&
             c.backup_workers() == 0) {
    int64_t max_clock = std::numeric_limits<int64_t>::min();
    int active = 0;
    for (const WorkerSlot& s : job.record.slots()) {
      if (!s.active() || s.done()) continue;
      ++active;
      max_clock = std::max(max_clock, job.runtime[s.member_id()].clock);
    }
    evict.clear();
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
        Evict(job, id, reason, /*banned=*/true, writes);
      }
    }
  }
  if (job.record.state() != RUNNING) return;
  CheckStragglers(job, now, writes);
}

void CoordinatorImpl::CheckStragglers(Job& job, int64_t now, Writes* writes) {
  const StragglerPolicy& policy = job.record.spec().straggler_policy();
  if (policy.slow_ratio() <= 0) return;
  std::vector<const WorkerSlot*> slots;
  bool use_busy = true;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active() || s.done()) continue;
    slots.push_back(&s);
    const WorkerRuntime& rt = job.runtime[s.member_id()];
    use_busy &= rt.busy_ms > 0 &&
                now - rt.busy_updated_ms <= 3 * options_.rate_window_ms;
  }
  if (slots.size() < 2) return;
  std::vector<double> rates;
  std::vector<int64_t> clocks;
  for (const WorkerSlot* s : slots) {
    const WorkerRuntime& rt = job.runtime[s->member_id()];
    std::optional<double> rate = StepRate(rt, now, use_busy);
    if (!rate.has_value()) return;  // not measured yet
    rates.push_back(*rate);
    clocks.push_back(rt.clock);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median =
      n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::sort(clocks.begin(), clocks.end());
  const int64_t median_clock = clocks[clocks.size() / 2];
  const int64_t window = std::max<int64_t>(1, policy.window_steps());
  std::vector<std::pair<int64_t, std::string>> evict;
  for (size_t i = 0; i < slots.size(); ++i) {
    WorkerRuntime& rt = job.runtime[slots[i]->member_id()];
    if (!(rates[i] < policy.slow_ratio() * median)) {
      rt.below_since_median_clock = -1;
      rt.flagged = false;
      continue;
    }
    if (rt.below_since_median_clock < 0) {
      rt.below_since_median_clock = median_clock;
      continue;
    }
    if (rt.flagged || median_clock - rt.below_since_median_clock < window) {
      continue;
    }
    rt.flagged = true;
    const std::string why = absl::StrFormat(
        "step rate %.2f/s below %.2f x the median %.2f/s for %d steps",
        rates[i], policy.slow_ratio(), median,
        median_clock - rt.below_since_median_clock);
    AddEvent(job, "straggler",
             absl::StrCat("member ", slots[i]->member_id(), " (rank ",
                          slots[i]->rank(), "): ", why),
             slots[i]->member_id(), writes);
    if (policy.evict()) {
      evict.emplace_back(slots[i]->member_id(),
                         absl::StrCat("straggler: ", why));
    }
  }
  for (const auto& [id, reason] : evict) {
    int active = 0;
    for (const WorkerSlot& s : job.record.slots()) active += s.active();
    if (active < 2 || job.record.state() != RUNNING) break;
    Evict(job, id, reason, /*banned=*/true, writes);
  }
}

void CoordinatorImpl::StartNextJob(Writes* writes) {
  std::string job_id;
  JobSpec spec;
  std::vector<std::string> servers;
  std::vector<int64_t> workers;
  {
    absl::MutexLock l(&mu_);
    Job* next = nullptr;
    for (auto& [id, job] : jobs_) {
      if (job->record.state() == PENDING && !job->starting &&
          (next == nullptr || job->order < next->order)) {
        next = job.get();
      }
    }
    if (next == nullptr) return;
    std::vector<Member> alive_servers = membership_.Alive(SERVER);
    std::vector<int64_t> idle;
    const int64_t now = clock_->NowMs();
    for (const Member& m : membership_.Alive(WORKER)) {
      if (!IsBusy(m.member_id()) && Fresh(m, now))
        idle.push_back(m.member_id());
    }
    const int want = next->record.spec().num_workers() > 0
                         ? next->record.spec().num_workers()
                         : std::max<int>(1, static_cast<int>(idle.size()));
    std::string reason;
    if (alive_servers.empty()) {
      reason = "waiting for a parameter server to register";
    } else if (static_cast<int>(idle.size()) < want) {
      reason = absl::StrCat("waiting for ", want, " idle worker(s), ",
                            idle.size(), " available");
    }
    if (!reason.empty()) {
      if (next->record.reason() != reason) {
        next->record.set_reason(reason);
        SaveRecord(*next, writes);
      }
    } else {
      JobRecord& r = next->record;
      job_id = r.job_id();
      spec = r.spec();
      r.clear_slots();
      r.clear_servers();
      for (const Member& m : alive_servers) {
        r.add_servers(m.address());
        servers.push_back(m.address());
      }
      for (int rank = 0; rank < want; ++rank) {
        WorkerSlot* s = r.add_slots();
        s->set_member_id(idle[rank]);
        s->set_rank(rank);
        s->add_data_shards(rank);
        s->set_active(true);
        s->set_evaluator(rank == 0);
        workers.push_back(idle[rank]);
      }
      r.set_num_data_shards(want);
      r.set_membership_epoch(1);
      r.set_total_steps(EstimateTotalSteps(r.spec(), want));
      r.set_reason(absl::StrCat("setting up ", servers.size(), " shard(s)"));
      next->starting = true;
      next->shards.assign(servers.size(), ShardSync{});
    }
  }
  Flush(*writes).IgnoreError();
  if (job_id.empty()) return;
  const int n = static_cast<int>(servers.size());
  std::vector<absl::Status> results(n);
  for (int i = 0; i < n; ++i) {
    SetupJobRequest req;
    req.set_job_id(job_id);
    *req.mutable_spec() = spec;
    req.set_shard_index(i);
    req.set_num_shards(n);
    for (int64_t w : workers) req.add_worker_ids(w);
    results[i] = shards_->SetupJob(servers[i], req).status();
  }
  std::vector<std::string> teardown;
  {
    absl::MutexLock l(&mu_);
    Job* job = jobs_[job_id].get();
    job->starting = false;
    std::string failure;
    for (int i = 0; i < n; ++i) {
      if (!results[i].ok() && failure.empty()) {
        failure = absl::StrCat("setup failed on shard ", i, " (", servers[i],
                               "): ", results[i].message());
      }
    }
    if (job->record.state() == PENDING && failure.empty()) {
      const int64_t now = clock_->NowMs();
      for (int64_t w : workers) {
        WorkerRuntime& rt = job->runtime[w];
        rt.last_heartbeat_ms = now;
        rt.clock_changed_ms = now;
      }
      for (ShardSync& s : job->shards) {
        s.synced_epoch = 1;
        s.have_counters = true;  // a fresh job: the counters start at 0
      }
      SetState(*job, RUNNING,
               absl::StrCat("running on ", workers.size(), " worker(s) and ", n,
                            " shard(s)"),
               writes);
    } else {
      for (int i = 0; i < n; ++i) {
        if (results[i].ok()) teardown.push_back(servers[i]);
      }
      if (job->record.state() == PENDING) {
        job->record.clear_slots();
        job->record.clear_servers();
        AddEvent(*job, "setup_failed", failure, 0, writes);
        job->record.set_reason(absl::StrCat(failure, "; will retry"));
        SaveRecord(*job, writes);
      }
      for (ShardSync& s : job->shards) s.torn_down = true;
    }
  }
  Flush(*writes).IgnoreError();
  for (const std::string& address : teardown) {
    TeardownJobRequest req;
    req.set_job_id(job_id);
    shards_->TeardownJob(address, req).IgnoreError();
  }
}

void CoordinatorImpl::Reconcile(const std::string& job_id) {
  std::vector<ShardAction> actions;
  JobSpec spec;
  UpdateMembershipRequest membership;
  JobState state;
  int num_shards = 0;
  std::vector<std::string> servers;
  bool all_up = true;
  bool rollback_pending = false;
  int64_t incarnation = 0;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    Job& job = *it->second;
    if (job.reconciling || job.starting) return;
    const int64_t now = clock_->NowMs();
    state = job.record.state();
    num_shards = job.record.servers_size();
    servers.assign(job.record.servers().begin(), job.record.servers().end());
    incarnation = job.record.incarnation();
    for (const std::string& address : servers) {
      all_up &= membership_.AliveServerAt(address).has_value();
    }
    // A rollback that did not reach every shard is tried again (with every
    // shard up) until it does.
    rollback_pending =
        state == RUNNING && job.record.rollback_pending() && all_up;
    job.shards.resize(num_shards);
    for (int i = 0; i < num_shards; ++i) {
      ShardSync& s = job.shards[i];
      const std::string& address = job.record.servers(i);
      const bool up = membership_.AliveServerAt(address).has_value();
      if (state == RUNNING) {
        if (!up) continue;
        if (s.needs_check) {
          actions.push_back({ShardAction::kCheck, i, address});
        } else if (s.synced_epoch < job.record.membership_epoch()) {
          actions.push_back({ShardAction::kMembership, i, address});
        } else if (now - s.last_poll_ms >= options_.shard_poll_interval_ms) {
          s.last_poll_ms = now;
          actions.push_back({ShardAction::kPoll, i, address});
        }
      } else if (IsTerminal(state) && !s.torn_down) {
        if (up) {
          actions.push_back({ShardAction::kTeardown, i, address});
        } else {
          s.torn_down = true;  // nothing left there to tear down
        }
      }
    }
    if (actions.empty() && !rollback_pending) return;
    job.reconciling = true;
    spec = job.record.spec();
    membership.set_job_id(job_id);
    membership.set_membership_epoch(job.record.membership_epoch());
    for (const WorkerSlot& s : job.record.slots()) {
      if (s.active()) membership.add_worker_ids(s.member_id());
    }
  }
  std::vector<absl::Status> results(actions.size());
  std::vector<std::string> notes(actions.size());
  std::vector<std::optional<ShardStatus>> totals(actions.size());
  std::vector<int> lost;  // shards that restarted without the job
  for (size_t k = 0; k < actions.size(); ++k) {
    const ShardAction& a = actions[k];
    GetShardStatusRequest status_req;
    status_req.set_job_id(job_id);
    if (a.kind == ShardAction::kTeardown) {
      absl::StatusOr<ShardStatus> st =
          shards_->GetShardStatus(a.address, status_req);
      if (st.ok()) totals[k] = *st;
      TeardownJobRequest req;
      req.set_job_id(job_id);
      req.set_final_checkpoint(state == SUCCEEDED);
      results[k] = shards_->TeardownJob(a.address, req);
      continue;
    }
    if (a.kind == ShardAction::kPoll) {
      absl::StatusOr<ShardStatus> st =
          shards_->GetShardStatus(a.address, status_req);
      if (st.ok()) totals[k] = *st;
      results[k] = st.status();
      continue;
    }
    if (a.kind == ShardAction::kCheck) {
      absl::StatusOr<ShardStatus> st =
          shards_->GetShardStatus(a.address, status_req);
      if (!st.ok() &&
          (st.status().code() == absl::StatusCode::kNotFound ||
           st.status().code() == absl::StatusCode::kFailedPrecondition)) {
        // The shard restarted without the job: the whole job rolls back to
        // its newest checkpoint (below), once every shard is up.
        lost.push_back(a.shard);
        results[k] = all_up ? absl::OkStatus()
                            : absl::UnavailableError(
                                  "waiting for every shard to be up to roll "
                                  "the job back");
        continue;
      } else if (!st.ok()) {
        results[k] = st.status();
        continue;
      }
    }
    results[k] = shards_->UpdateMembership(a.address, membership).status();
  }
  std::optional<Rollback> rollback;
  if (state == RUNNING && all_up && (!lost.empty() || rollback_pending)) {
    rollback =
        RollBack(job_id, spec, servers, membership, incarnation + 1, lost);
    for (size_t k = 0; k < actions.size(); ++k) {
      if (actions[k].kind != ShardAction::kCheck) continue;
      if (!rollback->status.ok()) {
        results[k] = rollback->status;
      } else if (std::find(lost.begin(), lost.end(), actions[k].shard) !=
                 lost.end()) {
        notes[k] = absl::StrCat("shard ", actions[k].shard, " at ",
                                actions[k].address, " set up again",
                                rollback->version > 0
                                    ? absl::StrCat(" from its checkpoint at "
                                                   "version ",
                                                   rollback->version)
                                    : std::string(" (no checkpoint found)"));
      }
    }
  }
  Writes writes;
  {
    absl::MutexLock l(&mu_);
    Job& job = *jobs_[job_id];
    job.reconciling = false;
    bool save = false;
    if (rollback.has_value() && job.record.state() == RUNNING) {
      if (rollback->status.ok()) {
        // Every worker drops its step and starts again at the restored
        // version: the new incarnation in its assignment tells it to.
        const int64_t now = clock_->NowMs();
        job.record.set_incarnation(incarnation + 1);
        job.record.set_rollback_pending(false);
        // (Indexed by incarnation; a record from before this field has
        // none for its earlier rollbacks, whose points then all count.)
        while (job.record.rollback_steps_size() < incarnation) {
          job.record.add_rollback_steps(std::numeric_limits<int64_t>::max());
        }
        job.record.add_rollback_steps(rollback->start_step);
        if (job.record.global_step() > 0) {  // epochs are steps / epoch size
          job.record.set_epoch(job.record.epoch() * rollback->start_step /
                               job.record.global_step());
        }
        job.record.set_global_step(rollback->start_step);
        for (WorkerSlot& slot : *job.record.mutable_slots()) {
          if (!slot.active()) continue;
          slot.set_start_step(rollback->start_step);
          WorkerRuntime& rt = job.runtime[slot.member_id()];
          rt.clock = rollback->start_step;
          rt.clock_changed_ms = now;
          rt.samples.clear();
        }
        for (ShardSync& sh : job.shards) {
          sh.needs_check = false;
          sh.synced_epoch = -1;  // resend the membership epoch
          sh.have_counters = false;
        }
        AddEvent(job, "rollback", rollback->note, 0, &writes);
        job.record.set_reason("running");
      } else {
        job.record.set_rollback_pending(true);
        AddEvent(job, "rollback_failed",
                 absl::StrCat("rolling the job back to a checkpoint failed (",
                              rollback->status.message(), "); will retry"),
                 0, &writes);
      }
      save = true;
      Touch(job);
    }
    for (size_t k = 0; k < actions.size(); ++k) {
      const ShardAction& a = actions[k];
      ShardSync& s = job.shards[a.shard];
      if (!notes[k].empty()) {
        AddEvent(job, "server_restored", notes[k], 0, &writes);
      }
      if (totals[k].has_value())
        save |= UpdateCounters(job, a.shard, *totals[k], &writes);
      if (a.kind == ShardAction::kPoll) continue;
      if (a.kind == ShardAction::kTeardown) {
        if (totals[k].has_value()) {
          AddEvent(job, "shard_summary",
                   absl::StrCat("shard ", a.shard, ": version ",
                                totals[k]->version(), ", ", totals[k]->pushes(),
                                " pushes, ", totals[k]->dropped_pushes(),
                                " dropped, ", totals[k]->rejected_pushes(),
                                " rejected"),
                   0, &writes);
          save = true;
        }
        if (results[k].ok() || ++s.teardown_attempts >= 3) {
          s.torn_down = true;
          if (!results[k].ok()) {
            AddEvent(job, "teardown_failed",
                     absl::StrCat("shard ", a.shard, " at ", a.address, ": ",
                                  results[k].message()),
                     0, &writes);
          }
        }
        continue;
      }
      if (results[k].ok()) {
        s.needs_check = false;
        s.synced_epoch = membership.membership_epoch();
      } else {
        std::fprintf(stderr, "coordinator: job %s shard %d (%s): %s\n",
                     job_id.c_str(), a.shard, a.address.c_str(),
                     std::string(results[k].message()).c_str());
      }
    }
    if (save) SaveRecord(job, &writes);
  }
  Flush(writes).IgnoreError();
}

CoordinatorImpl::Rollback CoordinatorImpl::RollBack(
    const std::string& job_id, const JobSpec& spec,
    const std::vector<std::string>& servers,
    const UpdateMembershipRequest& membership, int64_t incarnation,
    std::vector<int> lost) {
  Rollback out;
  const int n = static_cast<int>(servers.size());
  const bool bsp = spec.consistency().model() == ConsistencySpec::BSP;
  std::vector<int64_t> version(n, -1);
  // max_version < 0: the newest checkpoint; 0: none (initial weights).
  int64_t start_version = 0;  // > 0: every shard continues as this version
  auto setup = [&](int i, int64_t max_version) -> absl::Status {
    SetupJobRequest req;
    req.set_job_id(job_id);
    *req.mutable_spec() = spec;
    req.set_shard_index(i);
    req.set_num_shards(n);
    *req.mutable_worker_ids() = membership.worker_ids();
    req.set_replace(true);
    req.set_incarnation(incarnation);
    req.set_start_version(start_version);
    if (max_version != 0) {
      req.set_restore(true);
      req.set_restore_max_version(std::max<int64_t>(max_version, 0));
    }
    absl::StatusOr<SetupJobResponse> r = shards_->SetupJob(servers[i], req);
    if (!r.ok()) {
      return Annotate(r.status(),
                      absl::StrCat("shard ", i, " (", servers[i], ")"));
    }
    version[i] = r->version();
    return absl::OkStatus();
  };
  if (lost.empty()) {  // a retried rollback: start from every shard
    for (int i = 0; i < n; ++i) lost.push_back(i);
  }
  int64_t target = -1;
  for (int i : lost) {
    out.status = setup(i, -1);
    if (!out.status.ok()) return out;
    target = target < 0 ? version[i] : std::min(target, version[i]);
  }
  const int64_t wanted = target;
  if (!bsp) {
    // ASP/SSP: every shard restores its own newest checkpoint. Their
    // versions count worker steps and are written at different moments, so
    // they differ by about one checkpoint interval, which asynchronous
    // training tolerates (rather than a shard going back to the initial
    // weights for want of an older file).
    for (int i = 0; i < n; ++i) {
      if (version[i] >= 0) continue;
      out.status = setup(i, -1);
      if (!out.status.ok()) return out;
    }
  }
  // BSP: the other shards go back to the same version (the newest
  // checkpoint at or below it); a shard without that checkpoint lowers the
  // target for all.
  for (int round = 0; round <= n; ++round) {
    bool lowered = false;
    for (int i = 0; i < n; ++i) {
      if (version[i] >= 0 && (bsp ? version[i] == target : true)) continue;
      out.status = setup(i, target);
      if (!out.status.ok()) return out;
      if (version[i] < target) {
        if (bsp) lowered = true;
        target = bsp ? version[i] : target;
      }
    }
    if (!lowered) break;
  }
  bool relabelled = false;
  if (bsp && target == 0 && wanted > 0) {
    // No version every shard holds (their checkpoints were written at
    // different steps): rather than the initial weights, every shard takes
    // its newest checkpoint at or below the restarted shard's and all
    // continue as that step. The shards' weights then differ by at most a
    // checkpoint interval of updates.
    start_version = wanted;
    for (int i = 0; i < n; ++i) {
      out.status = setup(i, wanted);
      if (!out.status.ok()) return out;
    }
    target = wanted;
    relabelled = true;
  }
  int64_t lowest = target, highest = target;
  for (int i = 0; i < n; ++i) {
    highest = std::max(highest, version[i]);
    if (bsp && version[i] != target) {
      out.status = absl::InternalError(absl::StrCat(
          "could not bring the shards to one checkpoint version (shard ", i,
          " is at ", version[i], ", the others at ", target, ")"));
      return out;
    }
    lowest = std::min(lowest, version[i]);
  }
  const int64_t workers = std::max<int64_t>(1, membership.worker_ids_size());
  out.version = target;
  out.start_step = bsp ? target : lowest / workers;
  std::vector<std::string> names;
  for (int i : lost) names.push_back(absl::StrCat(i));
  out.note = absl::StrCat(
      "shard(s) ", absl::StrJoin(names, ", "), " restarted; every shard ",
      highest > 0
          ? absl::StrCat("restored its checkpoint at version ",
                         lowest == highest ? absl::StrCat(target)
                                           : absl::StrCat(lowest, "-", highest))
          : std::string("restarted from the initial weights (no "
                        "checkpoint)"),
      relabelled ? " (no version was on every shard: each restored its newest "
                   "at or below it and continues as that step)"
                 : "",
      "; the workers restart at step ", out.start_step, " (incarnation ",
      incarnation, ")");
  return out;
}

absl::StatusOr<ExplainJobResponse> CoordinatorImpl::ExplainJob(
    absl::string_view job_id) {
  ExplainInput in;
  in.now_ms = clock_->NowMs();
  in.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  {
    absl::MutexLock l(&mu_);
    PS_ASSIGN_OR_RETURN(Job * job, FindJob(job_id));
    in.record = Snapshot(*job);
    for (const auto& [id, rt] : job->runtime) {
      in.workers[id] = {rt.last_heartbeat_ms,
                        StepRate(rt, in.now_ms, /*use_busy=*/false)};
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
    for (const std::string& address : in.record.servers()) {
      GetShardStatusRequest req;
      req.set_job_id(in.record.job_id());
      in.shards.push_back(shards_->GetShardStatus(address, req));
    }
  }
  ExplainJobResponse response;
  response.set_text(FormatExplanation(in));
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
