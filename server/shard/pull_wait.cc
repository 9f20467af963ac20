#include "server/shard/pull_wait.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace ps::server {
namespace {

// What a pull that timed out waited for.
std::string WaitedFor(const Job& job, const PullArgs& args)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
  switch (job.model()) {
    case ConsistencySpec::BSP:
      return absl::StrCat("pull waited for version ", args.min_version,
                          "; the shard is still at ", job.version, " (",
                          job.OpenStepWaits(), ")");
    case ConsistencySpec::SSP:
      return absl::StrCat("pull at clock ", args.clock,
                          " waited for the slowest worker (clock ",
                          job.MinActiveClock(), ", staleness bound ",
                          job.spec.consistency().staleness(), ")");
    default:
      return absl::StrCat("pull waited for the worker's pushes up to seq ",
                          args.after_seq, " to land");
  }
}

}  // namespace

absl::StatusOr<int64_t> AwaitPull(Job& job, const PullArgs& args,
                                  absl::Time deadline) {
  absl::MutexLock jl(&job.mu);
  auto it = job.workers.find(args.worker_id);
  if (it == job.workers.end() || !it->second.active) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", args.worker_id, " is not an active member of job '", job.id,
        "' (evicted or never joined)"));
  }
  const ConsistencySpec::Model model = job.model();
  if (model == ConsistencySpec::SSP) {
    it->second.clock = std::max(it->second.clock, args.clock);
  }
  std::function<bool()> ready;
  if (model == ConsistencySpec::BSP) {
    // Each part at min_version: parts applied as they completed are one
    // version ahead of the open step.
    ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
      return job.torn_down || job.shutting_down ||
             job.PullVersion(args) >= args.min_version;
    };
  } else if (model == ConsistencySpec::SSP) {
    const int64_t bound = args.clock - job.spec.consistency().staleness();
    ready = [&, bound]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
      return job.torn_down || job.shutting_down ||
             job.MinActiveClock() >= bound;
    };
  } else {
    ready = [] { return true; };
  }
  if (args.after_seq > 0) {
    ready = [&, model_ready =
                    std::move(ready)]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
      return job.PushesLanded(args.worker_id, args.after_seq) && model_ready();
    };
  }
  if (!ready()) {
    job.blocked_pulls.fetch_add(1, std::memory_order_relaxed);
    const bool ok = job.mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
    job.blocked_pulls.fetch_sub(1, std::memory_order_relaxed);
    if (!ok) return absl::DeadlineExceededError(WaitedFor(job, args));
  }
  if (job.replaced) {
    return absl::UnavailableError(absl::StrCat(
        "job '", job.id, "' is rolling back to a checkpoint on this shard"));
  }
  if (job.torn_down) {
    return absl::NotFoundError(
        absl::StrCat("job '", job.id, "' was torn down"));
  }
  if (job.shutting_down) {
    return absl::UnavailableError("the parameter server is shutting down");
  }
  return job.MinActiveClock();
}

}  // namespace ps::server
