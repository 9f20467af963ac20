#include "server/shard/job.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/platform/rpc.h"

namespace ps::server {

int64_t Job::MinActiveClock() const {
  int64_t m = -1;
  for (const auto& [id, w] : workers) {
    if (w.active && (m < 0 || w.clock < m)) m = w.clock;
  }
  return m < 0 ? 0 : m;
}

bool Job::PushesLanded(int64_t worker_id, uint64_t seq) const {
  if (torn_down || shutting_down) return true;
  auto it = workers.find(worker_id);
  return it == workers.end() || !it->second.active ||
         it->second.seq.contiguous() >= seq;
}

int64_t Job::PullVersion(const PullArgs& args) const {
  if (args.whole_step || early_step != version) return version;
  auto w = workers.find(args.worker_id);
  if (w == workers.end() || w->second.pushed_step != version) return version;
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::vector<int64_t>& applied = early_applied[t];
    auto ahead = [&](int part) { return applied[part] == version; };
    if (!tables[t]->ForEachPulledPart(args, ahead)) return version;
  }
  return version + 1;
}

int Job::NumActive() const {
  int n = 0;
  for (const auto& [id, w] : workers) n += w.active ? 1 : 0;
  return n;
}

std::string Job::OpenStepWaits() const {
  if (closing) return absl::StrCat("step ", version, " is being applied");
  std::vector<int64_t> missing;
  for (const auto& [id, w] : workers) {
    if (w.active && !completed.contains(id)) missing.push_back(id);
  }
  std::sort(missing.begin(), missing.end());
  return absl::StrCat(missing.size() == 1 ? "member " : "members ",
                      absl::StrJoin(missing, ", "),
                      missing.size() == 1 ? " has" : " have",
                      " not ended step ", version, " (", completed.size(),
                      " of ", Needed(), " ends counted)");
}

int Job::Needed() const {
  return std::max(1, NumActive() - spec.consistency().backup_workers());
}

void Job::CountRejected() {
  rejected.fetch_add(1, std::memory_order_relaxed);
  if (metrics.rejected != nullptr) metrics.rejected->Increment();
}

void Job::CountDropped(int64_t n) {
  dropped.fetch_add(n, std::memory_order_relaxed);
  if (metrics.dropped != nullptr) {
    metrics.dropped->Increment(static_cast<double>(n));
  }
}

void Job::CountDuplicate() {
  duplicate.fetch_add(1, std::memory_order_relaxed);
  if (metrics.duplicate != nullptr) metrics.duplicate->Increment();
}

void SetMembers(Job& job, const std::vector<int64_t>& ids,
                const std::vector<int64_t>& joins) {
  absl::flat_hash_set<int64_t> next(ids.begin(), ids.end());
  absl::flat_hash_map<int64_t, int64_t> joined;
  for (size_t i = 0; i < ids.size() && i < joins.size(); ++i) {
    joined[ids[i]] = joins[i];
  }
  // Left and joined again between two updates: its process may be new.
  for (auto& [id, w] : job.workers) {
    auto it = joined.find(id);
    if (w.active && w.joins > 0 && it != joined.end() && it->second > w.joins) {
      w.active = false;
      job.completed.erase(id);
    }
  }
  const bool bsp = job.model() == ConsistencySpec::BSP;
  int64_t others_min = -1;
  for (const auto& [id, w] : job.workers) {
    if (w.active && next.contains(id) &&
        (others_min < 0 || w.clock < others_min)) {
      others_min = w.clock;
    }
  }
  for (auto& [id, w] : job.workers) {
    if (w.active && !next.contains(id)) {
      w.active = false;
      job.completed.erase(id);
    }
  }
  // ASP/SSP jobs set up from a checkpoint: the version counts the workers'
  // steps, so each worker restarts at version / workers (what the
  // coordinator tells them too).
  const int64_t fresh_clock =
      others_min >= 0 ? others_min
                      : job.version / std::max<int64_t>(1, ids.size());
  for (int64_t id : ids) {
    WorkerState& w = job.workers[id];
    if (w.active) continue;
    // A (re)joining worker starts at the current version; its process may
    // be new, so its sequence numbers start over (in this incarnation).
    w.active = true;
    w.seq = SeqTracker(SeqBase(job.incarnation));
    w.pushed_step = -1;
    w.clock = bsp ? job.version : fresh_clock;
  }
  for (const auto& [id, n] : joined) job.workers[id].joins = n;
}

}  // namespace ps::server
