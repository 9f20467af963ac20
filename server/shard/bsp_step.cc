#include "server/shard/bsp_step.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/shard/job_checkpoint.h"

namespace ps::server {

absl::Status EndBspStep(Job& job, const PushArgs& args, absl::Time deadline,
                        bool retry, PushResult* result,
                        std::vector<int64_t>* take) {
  // The step is this worker's only once its earlier pushes of the step
  // (lower seq numbers, possibly still in flight) have landed.
  auto all_landed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
    return job.PushesLanded(args.worker_id, args.seq);
  };
  if (!job.mu.AwaitWithDeadline(absl::Condition(&all_landed), deadline) ||
      job.shutting_down) {
    return absl::DeadlineExceededError(
        absl::StrCat("end of step ", args.clock, " of worker ", args.worker_id,
                     ": earlier pushes of the step did not arrive in time"));
  }
  auto it = job.workers.find(args.worker_id);
  const bool active = it != job.workers.end() && it->second.active;
  if (active && args.clock == job.version && !job.closing) {
    // (`completed` is a set: a retry of a counted end of step changes
    // nothing, and once the step closes its clock is behind the version.)
    job.completed.insert(args.worker_id);
    TakeStepIfReady(job, take);
  } else if (!retry && (args.clock < job.version || job.closing)) {
    job.CountDropped(1);
    result->dropped = true;
  }
  return absl::OkStatus();
}

bool TakeStepIfReady(Job& job, std::vector<int64_t>* workers) {
  if (job.closing || static_cast<int>(job.completed.size()) < job.Needed()) {
    return false;
  }
  workers->assign(job.completed.begin(), job.completed.end());
  job.completed.clear();
  job.closing = true;
  return true;
}

void ApplyStep(Job& job, int64_t step, const std::vector<int64_t>& workers,
               ApplyPool& pool, bool aligned_snapshots,
               absl::FunctionRef<void()> snapshot_queued) {
  const absl::Time start = absl::Now();
  {
    absl::WriterMutexLock al(&job.apply_mu);
    for (const auto& table : job.tables) {
      table->ApplyStep(step, workers, pool);
    }
    const int64_t every = job.spec.checkpoint().every_versions();
    if (every > 0 && (step + 1) % every == 0 && aligned_snapshots) {
      auto snapshot =
          std::make_shared<CheckpointData>(SnapshotJob(job, step + 1));
      {
        absl::MutexLock sl(&job.snapshot_mu);
        job.aligned_snapshots.push_back(std::move(snapshot));
        if (job.aligned_snapshots.size() > kMaxPendingSnapshots) {
          job.aligned_snapshots.pop_front();
        }
      }
      snapshot_queued();
    }
    // Still under apply_mu, so that a checkpoint never sees the new weights
    // with the old version.
    absl::MutexLock jl(&job.mu);
    job.version = step + 1;
    job.closing = false;
    for (int64_t w : workers) {
      auto it = job.workers.find(w);
      if (it != job.workers.end()) {
        it->second.clock = std::max(it->second.clock, step + 1);
      }
    }
    if (job.metrics.version != nullptr) job.metrics.version->Set(job.version);
  }
  if (job.metrics.apply_seconds != nullptr) {
    job.metrics.apply_seconds->Observe(
        absl::ToDoubleSeconds(absl::Now() - start));
  }
}

bool EndOfStepMayWait(Job& job, const PushArgs& args) {
  if (!args.end_of_step || job.model() != ConsistencySpec::BSP) return false;
  absl::MutexLock jl(&job.mu);
  auto it = job.workers.find(args.worker_id);
  return it != job.workers.end() && it->second.active && args.seq > 0 &&
         it->second.seq.contiguous() + 1 < args.seq;
}

}  // namespace ps::server
