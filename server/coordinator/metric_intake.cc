#include "server/coordinator/metric_intake.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/spec/data_plan.h"
#include "server/coordinator/straggler_policy.h"

namespace ps::coordinator {
namespace {

void SumThroughput(Job& job) {
  double sum = 0;
  for (const auto& [id, v] : job.examples_per_sec) sum += v;
  job.record.set_examples_per_sec(sum);
}

}  // namespace

void ResetSummary(Job& job) {
  JobRecord& r = job.record;
  r.set_global_step(0);
  r.set_epoch(0);
  r.set_last_train_loss(0);
  r.set_last_test_accuracy(0);
  r.set_best_test_accuracy(0);
  r.set_examples_per_sec(0);
  r.set_mean_staleness(0);
  r.set_final_evaluation(false);
  r.set_last_evaluation_time_ms(0);
}

void ApplyPoint(Job& job, const MetricPoint& p) {
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
  }
  if (n.starts_with("test_") && p.incarnation() == r.incarnation() &&
      p.time_ms() >= r.last_evaluation_time_ms()) {
    r.set_last_evaluation_time_ms(p.time_ms());
    r.set_final_evaluation(p.final_model());
  } else if (n == "examples_per_sec") {
    job.examples_per_sec[p.member_id()] = p.value();
    SumThroughput(job);
  } else if (n == "staleness" && std::isfinite(p.value())) {
    job.staleness_sum += p.value();
    ++job.staleness_count;
    r.set_mean_staleness(job.staleness_sum / job.staleness_count);
  }
}

void ForgetThroughput(Job& job, int64_t member_id) {
  job.examples_per_sec.erase(member_id);
  SumThroughput(job);
}

absl::StatusOr<std::vector<MetricPoint>> StampPoints(
    const Job& job, const ReportMetricsRequest& request, int64_t now) {
  const int64_t start = job.record.start_time_ms();
  const int64_t max_step = MaxJobStep(job.record);
  std::vector<MetricPoint> out;
  out.reserve(request.points_size());
  for (int i = 0; i < request.points_size(); ++i) {
    MetricPoint p = request.points(i);
    if (p.name().empty() || p.name().size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("points[", i, "].name: must be 1..64 characters"));
    }
    if (p.step() < 0 || p.step() > max_step) {
      return absl::InvalidArgumentError(
          absl::StrCat("points[", i, "].step: must be in 0..", max_step,
                       ", got ", p.step()));
    }
    p.set_member_id(request.member_id());
    // The worker's wall time where it has one: its own time_ms counts from
    // its run's start, which a restarted worker begins again.
    if (p.unix_ms() > 0 && start > 0) {
      p.set_time_ms(std::max<int64_t>(0, p.unix_ms() - start));
    } else if (p.time_ms() == 0) {
      p.set_time_ms(start > 0 ? now - start : 0);
    }
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<bool> IntakeMetrics(JobTable& table, Job& job,
                                   const ReportMetricsRequest& request,
                                   WriteBatch* writes) {
  WorkerSlot* slot = nullptr;
  for (WorkerSlot& s : *job.record.mutable_slots()) {
    if (s.member_id() == request.member_id()) {
      slot = &s;
      if (s.active()) break;
    }
  }
  if (slot == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", request.member_id(), " is not a worker of job ",
                     request.job_id()));
  }
  const int64_t now = table.clock().NowMs();
  absl::StatusOr<std::vector<MetricPoint>> points =
      StampPoints(job, request, now);
  if (!points.ok()) return points.status();
  writes->AppendPoints(request.job_id(), *points);
  for (const MetricPoint& p : *points) {
    ApplyPoint(job, p);
    job.points.Add(p);
    auto it = job.runtime.find(request.member_id());
    if (it != job.runtime.end()) ObserveComputeTime(it->second, p, now);
  }
  if (!points->empty()) table.Touch(job);
  if (!request.done() || slot->done() || !slot->active() ||
      job.record.state() != RUNNING) {
    return false;
  }
  if (slot->plan_size() > 0 && request.clock() > 0 &&
      PlanEnd(slot->plan_start(), slot->plan(), JobShardSteps(job.record)) >
          request.clock()) {
    // Its plan grew while its steps ended: it trains on from there.
    slot->set_start_step(request.clock());
    job.record.set_membership_epoch(job.record.membership_epoch() + 1);
    table.AddEvent(
        job, "worker_not_done",
        absl::StrCat("member ", request.member_id(), " (rank ", slot->rank(),
                     ") ended at step ", request.clock(),
                     " but its data plan goes on: it trains on"),
        request.member_id(), writes);
    table.SaveRecord(job, writes);
    return false;
  }
  slot->set_done(true);
  if (auto it = job.runtime.find(request.member_id());
      it != job.runtime.end()) {
    it->second.clock = std::max(it->second.clock, request.clock());
  }
  table.AddEvent(job, "worker_done",
                 absl::StrCat("member ", request.member_id(), " (rank ",
                              slot->rank(), ") finished its share"),
                 request.member_id(), writes);
  if (FinishIfAllDone(table, job, "every worker finished", writes)) {
    return true;
  }
  table.SaveRecord(job, writes);
  return false;
}

bool FinishIfAllDone(JobTable& table, Job& job, absl::string_view reason,
                     WriteBatch* writes) {
  if (!AllActiveDone(job)) return false;
  JobRecord& r = job.record;
  const DataSpec& d = r.spec().data();
  const bool evaluates = d.format() == DataSpec::IDX || d.test_files_size() > 0;
  WorkerSlot* evaluator = nullptr;
  for (WorkerSlot& s : *r.mutable_slots()) {
    if (s.active() && s.evaluator()) evaluator = &s;
  }
  if (!evaluates || r.final_evaluation() || evaluator == nullptr) {
    table.SetState(job, SUCCEEDED, std::string(reason), writes);
    return true;
  }
  if (r.final_evaluation_epoch() == r.membership_epoch()) {
    table.AddEvent(job, "no_final_evaluation",
                   absl::StrCat("member ", evaluator->member_id(),
                                " finished without evaluating the final "
                                "model; the last evaluation stands"),
                   evaluator->member_id(), writes);
    table.SetState(job, SUCCEEDED, std::string(reason), writes);
    return true;
  }
  // Some worker's last steps came after the last evaluation (under ASP and
  // SSP workers end at different times; an evaluator that rejoined or took
  // the role may have finished first).
  auto rt = job.runtime.find(evaluator->member_id());
  evaluator->set_done(false);
  evaluator->set_start_step(std::max(
      evaluator->start_step(), rt != job.runtime.end() ? rt->second.clock : 0));
  r.set_membership_epoch(r.membership_epoch() + 1);
  r.set_final_evaluation_epoch(r.membership_epoch());
  table.AddEvent(
      job, "final_evaluation",
      absl::StrCat("every worker finished: member ", evaluator->member_id(),
                   " (rank ", evaluator->rank(), ") evaluates the final model"),
      evaluator->member_id(), writes);
  return false;
}

std::vector<MetricPoint> SelectPoints(const Job& job,
                                      const GetMetricsRequest& request) {
  std::set<std::string> names(request.names().begin(), request.names().end());
  // cut[k]: points of incarnation k after this step were computed again
  // (the lowest restart step of the rollbacks after k).
  const auto& restarts = job.record.rollback_steps();
  std::vector<int64_t> cut(restarts.size() + 1,
                           std::numeric_limits<int64_t>::max());
  for (int k = restarts.size() - 1; k >= 0; --k) {
    cut[k] = std::min(cut[k + 1], restarts[k]);
  }
  return job.points.Points([&](const MetricPoint& p) {
    if (!names.empty() && !names.count(p.name())) return false;
    // A merged point's step is its points' mean: one that straddles the
    // restart step goes with the side its mean falls on.
    return request.include_superseded() || p.incarnation() < 0 ||
           p.incarnation() >= static_cast<int64_t>(cut.size()) ||
           p.step() <= cut[p.incarnation()];
  });
}

}  // namespace ps::coordinator
