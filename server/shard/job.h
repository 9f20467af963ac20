// The state of one job on one shard, shared by the units of the shard store
// (server/shard/): its tables, its members and their clocks and sequence
// numbers, its version and the open BSP step, checkpoint bookkeeping, and
// counters. The units are functions over this state; it lives in a header
// of its own so that none of them includes another to reach it.
//
// Locks, in the order they are taken (never the other way):
//   apply_mu  readers: pushes applying or staging, pulls reading tables;
//             writer: a BSP step being applied, checkpoint snapshots and
//             restores, so that both see (and a pull that waited for a
//             version reads) whole steps only.
//   mu        the consistency state below (members, clocks, sequence
//             numbers, version, the open step); held briefly, never across
//             a table call except Table::ForEachPulledPart.
//   the tables' own locks (taken inside apply_mu, never with mu held).
// checkpoint_mu serialises checkpoint writers (disk I/O, no other lock
// held); snapshot_mu guards aligned_snapshots.
#ifndef PS_SERVER_SHARD_JOB_H_
#define PS_SERVER_SHARD_JOB_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/platform/metrics.h"
#include "common/wire/checkpoint.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"
#include "server/shard/push_pull.h"
#include "server/shard/seq_tracker.h"
#include "server/shard/table.h"

namespace ps::server {

class SparseTable;  // sparse_table.h

// BSP states taken at multiples of every_versions and not yet written, per
// job: enough for the checkpoint thread to write every one of them unless
// the disk is much slower than the steps.
inline constexpr size_t kMaxPendingSnapshots = 4;

struct WorkerState {
  bool active = false;
  int64_t clock = 0;
  int64_t last_push_ms = 0;
  // BSP: the last step of which this worker (since it last joined) had a
  // push admitted; -1: none. Only such a worker is told of parts applied
  // early for the open step (Job::PullVersion).
  int64_t pushed_step = -1;
  SeqTracker seq;
  // How many times it joined the job, as the coordinator counts
  // (UpdateMembershipRequest.worker_joins); 0: not told.
  int64_t joins = 0;
};

// The job's Prometheus series on this shard; all null without a registry.
struct JobMetrics {
  prometheus::Counter* pushes = nullptr;
  prometheus::Counter* pulls = nullptr;
  prometheus::Counter* bytes_in = nullptr;
  prometheus::Counter* bytes_out = nullptr;
  prometheus::Counter* dropped = nullptr;
  prometheus::Counter* rejected = nullptr;
  prometheus::Counter* duplicate = nullptr;
  prometheus::Gauge* version = nullptr;
  prometheus::Histogram* apply_seconds = nullptr;
  prometheus::Histogram* staleness = nullptr;
};

struct Job {
  // Set up once (job_setup.h), then read-only.
  std::string id;
  JobSpec spec;
  int shard_index = 0;
  int num_shards = 1;
  std::shared_ptr<const Placement> placement;
  // The job's tables: the dense tensors' first (the one table that may
  // defer its NaN/Inf check to the apply, Table::Prepare), then the sparse
  // tables in ModelSpec order.
  std::vector<std::unique_ptr<Table>> tables;
  // The sparse tables among `tables`, in ModelSpec order (their status).
  std::vector<SparseTable*> sparse_tables;
  // SetupJobRequest.incarnation; only pushes of this incarnation apply.
  int64_t incarnation = 0;

  absl::Mutex apply_mu;
  // Serialises checkpoint writers of this job; never taken on the data path.
  absl::Mutex checkpoint_mu;
  // BSP with every_versions: the state at the last version that is a
  // multiple of it, taken when that step was applied and written by the
  // next CheckpointDue. Every shard of the job checkpoints the same
  // versions, so a job-wide rollback finds one version on all of them.
  // Oldest first; at most kMaxPendingSnapshots (the oldest is dropped when
  // the disk falls behind).
  absl::Mutex snapshot_mu;
  std::deque<std::shared_ptr<CheckpointData>> aligned_snapshots
      ABSL_GUARDED_BY(snapshot_mu);

  absl::Mutex mu;
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  bool closing ABSL_GUARDED_BY(mu) = false;
  // BSP, by table and part: the step each part was last applied for
  // before its step closed (Table::Stage's applied_early, here for waiting
  // pulls); early_step: the last step with such a part.
  std::vector<std::vector<int64_t>> early_applied ABSL_GUARDED_BY(mu);
  int64_t early_step ABSL_GUARDED_BY(mu) = -1;
  // BSP: the active workers that ended the open step.
  std::set<int64_t> completed ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<int64_t, WorkerState> workers ABSL_GUARDED_BY(mu);
  int64_t membership_epoch ABSL_GUARDED_BY(mu) = 0;
  int64_t last_checkpoint_version ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_checkpoint_time ABSL_GUARDED_BY(mu);
  bool torn_down ABSL_GUARDED_BY(mu) = false;
  // Torn down by a SetupJob with replace (a job-wide rollback): waiting
  // calls get UNAVAILABLE, the workers are about to restart.
  bool replaced ABSL_GUARDED_BY(mu) = false;
  bool shutting_down ABSL_GUARDED_BY(mu) = false;

  std::atomic<int64_t> pushes{0}, pulls{0}, dropped{0}, rejected{0},
      duplicate{0}, blocked_pulls{0}, bytes_in{0}, bytes_out{0};
  JobMetrics metrics;

  ConsistencySpec::Model model() const { return spec.consistency().model(); }

  int64_t MinActiveClock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Whether the worker's pushes numbered up to `seq` have all been applied
  // (or no longer can be: the worker left, the job is going away).
  bool PushesLanded(int64_t worker_id, uint64_t seq) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // BSP: the version a pull gets, the lowest of its parts' (a part applied
  // before the open step closed is one ahead of the job); the job's own
  // with whole_step, and for a worker with no push admitted in the open
  // step: the step waits for its end of step too (it may have joined after
  // the parts were applied), and a worker takes its clock from the version
  // it pulls, so it must not be told that the step is over.
  int64_t PullVersion(const PullArgs& args) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  int NumActive() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // BSP: what the open step waits for, for messages: "members 3, 6 have
  // not ended step 7" (the active workers whose end of step is not
  // counted), or that it is being applied.
  std::string OpenStepWaits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // BSP: how many gradients close a step.
  int Needed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Counters of refused, dropped and retried pushes (and their metrics).
  void CountRejected();
  void CountDropped(int64_t n);
  void CountDuplicate();
};

// Makes `ids` the job's active workers: the others leave (their end of the
// open step no longer counts), and a worker that (re)joins starts at the
// current version (BSP) or at version / workers (ASP/SSP restored from a
// checkpoint, or the others' lowest clock), with fresh sequence numbers of
// the job's incarnation. `joins`, parallel to `ids` (or empty): a worker
// whose count grew joined again though it never left here, and starts over
// in the same way.
void SetMembers(Job& job, const std::vector<int64_t>& ids,
                const std::vector<int64_t>& joins = {})
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_JOB_H_
