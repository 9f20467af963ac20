#include "server/shard/shard_status.h"

#include <algorithm>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/shard/sparse_table.h"

namespace ps::server {

ShardStatus JobStatus(Job& job) {
  ShardStatus s;
  s.set_job_id(job.id);
  s.set_shard_index(job.shard_index);
  s.set_model(job.model());
  {
    absl::MutexLock jl(&job.mu);
    s.set_version(job.version);
    s.set_pending_step(job.version);
    std::vector<int64_t> ids;
    for (const auto& [id, w] : job.workers) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (int64_t id : ids) {
      const WorkerState& w = job.workers.at(id);
      WorkerClock* wc = s.add_clocks();
      wc->set_worker_id(id);
      wc->set_clock(w.clock);
      wc->set_active(w.active);
      wc->set_last_push_ms(w.last_push_ms);
      if (!w.active) continue;
      const bool waiting =
          job.model() == ConsistencySpec::BSP
              ? !job.completed.contains(id)
              : w.clock <= job.MinActiveClock() && job.NumActive() > 1;
      if (waiting) s.add_waiting_for(id);
    }
    s.set_last_checkpoint_version(job.last_checkpoint_version);
  }
  s.set_pushes(job.pushes.load());
  s.set_pulls(job.pulls.load());
  s.set_dropped_pushes(job.dropped.load());
  s.set_rejected_pushes(job.rejected.load());
  s.set_duplicate_pushes(job.duplicate.load());
  s.set_blocked_pulls(job.blocked_pulls.load());
  s.set_bytes_in(job.bytes_in.load());
  s.set_bytes_out(job.bytes_out.load());
  for (const SparseTable* table : job.sparse_tables) {
    *s.add_sparse_tables() = table->Status();
  }
  return s;
}

}  // namespace ps::server
