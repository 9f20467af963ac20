#include "server/shard/push_validation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/rpc.h"
#include "common/wire/sparse_rows.h"

namespace ps::server {

absl::Status CheckPushHeader(Job& job, const PushArgs& args) {
  if (args.seq == SeqBase(SeqIncarnation(args.seq))) {
    job.CountRejected();
    return absl::InvalidArgumentError(
        "push seq must be >= 1 (per job, worker and shard, starting at 1)");
  }
  if (SeqIncarnation(args.seq) != job.incarnation) {
    // Not counted as rejected: a worker that has not yet heard of the
    // rollback retries until the coordinator restarts it.
    return absl::UnavailableError(absl::StrCat(
        "push of incarnation ", SeqIncarnation(args.seq), " of job '", job.id,
        "': the job is at incarnation ", job.incarnation,
        SeqIncarnation(args.seq) < job.incarnation
            ? " (it rolled back to a checkpoint; the coordinator restarts "
              "the workers)"
            : " here (this shard has not been rolled back yet)"));
  }
  if (args.clock < 0 || args.base_version < 0) {
    job.CountRejected();
    return absl::InvalidArgumentError(
        "push clock and base_version must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status CheckSparsePull(const Job& job, const PullArgs& args,
                             bool has_sink) {
  if (args.sparse_only && !args.chunk_ids.empty()) {
    return absl::InvalidArgumentError(
        "a sparse_only pull may not name chunks (chunk_ids must be empty)");
  }
  if (args.sparse.empty()) return absl::OkStatus();
  if (!has_sink) {
    return absl::InvalidArgumentError(
        "this pull cannot answer sparse rows (no sparse sink)");
  }
  std::vector<uint64_t> scratch;
  return CheckSparseRows(args.sparse, SparseRowsUse::kPullRequest,
                         job.spec.model().sparse_tables_size(), &scratch);
}

absl::StatusOr<PreparedPush> PrepareTables(Job& job, const PushArgs& args) {
  const bool apply_now = job.model() != ConsistencySpec::BSP;
  PreparedPush prepared;
  prepared.reserve(job.tables.size());
  absl::Status sparse_rows;
  if (!args.sparse.empty()) {
    // Unknown tables, keys and rows that disagree, duplicate keys.
    std::vector<uint64_t> scratch;
    sparse_rows =
        CheckSparseRows(args.sparse, SparseRowsUse::kPush,
                        job.spec.model().sparse_tables_size(), &scratch);
  }
  // (A refused sparse_rows goes through the error path once.)
  for (size_t t = 0; t < job.tables.size() || !sparse_rows.ok(); ++t) {
    absl::StatusOr<std::unique_ptr<PreparedGradient>> gradient =
        sparse_rows.ok()
            ? job.tables[t]->Prepare(args, apply_now)
            : absl::StatusOr<std::unique_ptr<PreparedGradient>>(sparse_rows);
    if (!gradient.ok()) {
      // The number is used up, so that a BSP end_of_step does not wait for
      // it.
      absl::MutexLock jl(&job.mu);
      auto it = job.workers.find(args.worker_id);
      if (it != job.workers.end() && it->second.active &&
          !it->second.seq.Seen(args.seq)) {
        it->second.seq.Finish(args.seq);
      }
      job.CountRejected();
      return gradient.status();
    }
    prepared.push_back(*std::move(gradient));
  }
  return prepared;
}

namespace {

// BSP: the checks of AdmitPush past the duplicate check.
absl::Status AdmitBsp(Job& job, const PushArgs& args, WorkerState& w,
                      PushResult* result, Admission* admission)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
  if (args.clock > job.version) {
    w.seq.Finish(args.seq);
    job.CountRejected();
    return absl::OutOfRangeError(absl::StrCat("push for step ", args.clock,
                                              " is from the future: the shard "
                                              "is aggregating step ",
                                              job.version));
  }
  if (args.chunks_final && !job.closing && args.clock == job.version &&
      job.spec.consistency().backup_workers() == 0) {
    // Apply each chunk as soon as every active worker's gradient of it is
    // complete ("BSP chunks applied as they complete", shard_store.h).
    for (const auto& [id, worker] : job.workers) {
      if (worker.active) admission->early_workers.push_back(id);
    }
    // Ascending: the order the part's gradients are summed in.
    std::sort(admission->early_workers.begin(), admission->early_workers.end());
  }
  if (args.clock < job.version || (job.closing && args.clock == job.version)) {
    // A backup worker's late gradient: acknowledged, counted, dropped.
    w.seq.Finish(args.seq);
    job.CountDropped(1);
    result->dropped = true;
    admission->outcome = Admission::Outcome::kDropped;
  }
  return absl::OkStatus();
}

// ASP/SSP: the checks of AdmitPush past the duplicate check.
absl::Status AdmitAspSsp(Job& job, const PushArgs& args, WorkerState& w,
                         Admission* admission)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
  const int max_staleness = job.spec.consistency().max_staleness();
  const int64_t staleness = admission->staleness;
  if (job.model() == ConsistencySpec::ASP && max_staleness > 0 &&
      staleness > max_staleness) {
    w.seq.Finish(args.seq);
    job.CountRejected();
    return absl::AbortedError(
        absl::StrCat("push computed on version ", args.base_version,
                     " is too stale: the shard is at version ", job.version,
                     " and the job's max_staleness is ", max_staleness,
                     "; pull fresh weights"));
  }
  admission->rate.step = job.version;
  if (job.model() == ConsistencySpec::ASP &&
      job.spec.consistency().staleness_aware_lr()) {
    admission->rate.divisor =
        static_cast<float>(std::max<int64_t>(1, staleness));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Admission> AdmitPush(Job& job, const PushArgs& args,
                                    const Clock& clock, PushResult* result) {
  auto it = job.workers.find(args.worker_id);
  if (it == job.workers.end() || !it->second.active) {
    job.CountRejected();
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", args.worker_id, " is not an active member of job '", job.id,
        "' (evicted or never joined)"));
  }
  WorkerState& w = it->second;
  const bool bsp = job.model() == ConsistencySpec::BSP;
  Admission admission;
  result->version = job.version;
  if (w.seq.Seen(args.seq)) {
    job.CountDuplicate();
    result->duplicate = true;
    admission.outcome = Admission::Outcome::kDuplicate;
    // A first attempt still in flight counts its end of step itself.
    admission.retry_end_of_step =
        bsp && args.end_of_step && !w.seq.InFlight(args.seq);
    return admission;
  }
  if (bsp && job.early_step == job.version &&
      (args.clock == job.version + 1 || args.base_version == job.version + 1)) {
    // The worker has all of the step's weights (applied as they
    // completed) before the step closed here: a moment's wait. Not
    // counted, and the sequence number stays unused for the retry.
    return absl::UnavailableError(absl::StrCat(
        "push for step ", args.clock, ": step ", job.version,
        " is still closing on this shard (", job.OpenStepWaits(), "); retry"));
  }
  if (args.base_version > job.version) {
    w.seq.Finish(args.seq);
    job.CountRejected();
    return absl::OutOfRangeError(absl::StrCat("push base_version ",
                                              args.base_version,
                                              " is ahead of the shard's "
                                              "version ",
                                              job.version));
  }
  admission.staleness = job.version - args.base_version;
  absl::Status s = bsp ? AdmitBsp(job, args, w, result, &admission)
                       : AdmitAspSsp(job, args, w, &admission);
  if (!s.ok()) return s;
  if (admission.outcome == Admission::Outcome::kDropped) return admission;
  w.seq.Start(args.seq);
  w.last_push_ms = absl::ToUnixMillis(clock.Now());
  if (bsp) w.pushed_step = args.clock;  // == job.version (AdmitBsp)
  return admission;
}

}  // namespace ps::server
