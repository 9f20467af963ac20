#include "server/shard/push_apply.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/shard/bsp_step.h"

namespace ps::server {

absl::StatusOr<AppliedEarly> ApplyPush(Job& job, const PushArgs& args,
                                       const Admission& admission,
                                       PreparedPush& prepared) {
  const bool bsp = job.model() == ConsistencySpec::BSP;
  const absl::Time start = absl::Now();
  int64_t bytes = 0;
  int64_t early_dropped = 0;
  AppliedEarly applied_early;
  if (bsp) applied_early.resize(job.tables.size());
  {
    absl::ReaderMutexLock al(&job.apply_mu);
    StageRequest request;
    request.worker_id = args.worker_id;
    request.step = args.clock;
    request.final = args.chunks_final;
    request.early_workers = admission.early_workers;
    for (size_t t = 0; t < job.tables.size(); ++t) {
      Table& table = *job.tables[t];
      PreparedGradient& gradient = *prepared[t];
      bytes += gradient.bytes;
      if (bsp) {
        StageResult staged = table.Stage(args, gradient, request);
        early_dropped += staged.dropped;
        applied_early[t] = std::move(staged.applied_early);
        continue;
      }
      if (absl::Status s = table.ApplyNow(args, gradient, admission.rate);
          !s.ok()) {
        // As a push that failed validation: the number is used up. (Only
        // the first table may defer its check: nothing is applied yet.)
        absl::MutexLock jl(&job.mu);
        job.workers[args.worker_id].seq.Finish(args.seq);
        job.CountRejected();
        return s;
      }
    }
  }
  job.pushes.fetch_add(1, std::memory_order_relaxed);
  job.bytes_in.fetch_add(bytes, std::memory_order_relaxed);
  if (job.metrics.pushes != nullptr) {
    job.metrics.pushes->Increment();
    job.metrics.bytes_in->Increment(bytes);
    job.metrics.staleness->Observe(admission.staleness);
    if (!bsp) {
      job.metrics.apply_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  if (early_dropped > 0) job.CountDropped(early_dropped);
  return applied_early;
}

absl::Status FinishPush(Job& job, const PushArgs& args, absl::Time deadline,
                        const AppliedEarly& applied_early, PushResult* result,
                        std::vector<int64_t>* take) {
  absl::MutexLock jl(&job.mu);
  // Wakes the pulls waiting for these parts.
  for (size_t t = 0; t < applied_early.size(); ++t) {
    for (int part : applied_early[t]) {
      job.early_applied[t][part] = args.clock;
      job.early_step = args.clock;
    }
  }
  WorkerState& w = job.workers[args.worker_id];
  w.seq.Finish(args.seq);
  if (args.end_of_step) {
    if (job.model() != ConsistencySpec::BSP) {
      ++job.version;
      w.clock = std::max(w.clock, args.clock + 1);
      if (job.metrics.version != nullptr) {
        job.metrics.version->Set(job.version);
      }
    } else {
      absl::Status s =
          EndBspStep(job, args, deadline, /*retry=*/false, result, take);
      if (!s.ok()) return s;
    }
  }
  result->version = job.version;
  return absl::OkStatus();
}

}  // namespace ps::server
