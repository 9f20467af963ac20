// The table seam: how a job's consistency logic (versions, worker clocks,
// the BSP step close, backup workers, staleness, sequence numbers; the
// other units of server/shard/) talks to the tables that hold the job's
// parameters on this shard. A job holds one or more tables side by side,
// updated under the same version and clock; a table kind knows its own
// layout, payloads, optimizer state and checkpoint records, and nothing of
// the consistency model. Kinds: DenseTable (dense_table.h: the job's dense
// tensors, cut into chunks) and SparseTable (sparse_table.h: a sparse
// embedding table, rows by key).
//
// How a push goes through a job's tables (push_validation.h, push_apply.h):
//   1. Prepare on every table: checks its part of the push and readies it.
//      No state changes; an error refuses the whole push.
//   2. Admission under the job's mutex (membership, sequence number,
//      staleness): no table is called.
//   3. ASP/SSP: ApplyNow on every table, in the job's order. BSP: Stage on
//      every table, and when the step closes ApplyStep on every table.
// Pulls: CheckPull on every table, the wait for the consistency model, then
// Pull. Checkpoints: Snapshot on every table into one CheckpointData;
// restores: CheckRestore on every table, then Restore on every table only
// if all of them accepted the files, so a job restores whole or not at all.
//
// "Parts" are the units a table stages and applies under one lock (dense:
// chunks), numbered [0, num_parts()). A BSP part may be applied before its
// step closes, once every active worker's complete gradient of it is in
// ("BSP chunks applied as they complete" in shard_store.h): Stage reports
// such parts, the job records them under its mutex, and a pull reads a
// version ahead of the job's only when every part it reads was applied so
// (ForEachPulledPart). A kind that never applies early reports no parts.
//
// Locks. The job's apply_mu (job.h) is held shared around ApplyNow, Stage
// and Pull, and exclusively around ApplyStep, Snapshot and Restore, so that
// pulls and checkpoints see whole steps only. A table locks its own parts
// inside those calls, several of them always in ascending part order, and
// never takes a job lock. Prepare, CheckPull, CheckRestore and
// ForEachPulledPart read only what is fixed at setup; the job's mutex may
// be held around ForEachPulledPart.
//
// Counters: Prepare reports the bytes received, Pull the bytes sent and
// Stage the parts dropped as too late; the job counts them with its pushes
// and pulls.
#ifndef PS_SERVER_SHARD_TABLE_H_
#define PS_SERVER_SHARD_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/wire/checkpoint.h"
#include "server/shard/apply_pool.h"
#include "server/shard/push_pull.h"

namespace ps::server {

// The learning rate of one update: the table's optimizer's schedule at
// `step`, divided by `divisor` (ASP's staleness-aware rate: the push's
// staleness; otherwise 1). A table with an optimizer of its own applies its
// own schedule at the same step.
struct UpdateRate {
  int64_t step = 0;
  float divisor = 1.0f;
};

// One push's gradient for one table, checked and ready to apply or stage
// (Table::Prepare; each kind derives its own). It may point into the
// push's receive buffers, so it lives for the Push call only.
class PreparedGradient {
 public:
  virtual ~PreparedGradient() = default;

  // Payload bytes received for this table (the shard's bytes_in).
  int64_t bytes = 0;
  // Prepare left the NaN/Inf check of some of the payload to ApplyNow,
  // which checks it while it applies it (see ApplyNow).
  bool check_deferred = false;
};

// BSP: a worker's gradient of the open step, for Table::Stage.
struct StageRequest {
  int64_t worker_id = 0;
  // The open step (the push's clock).
  int64_t step = 0;
  // The push has chunks_final: the worker's gradient of these parts for
  // the step is complete.
  bool final = false;
  // Non-empty: this push may complete parts early, and these are the
  // active workers whose final gradients complete a part; the part is then
  // applied at once with the average of theirs (the job decides when: no
  // backup workers, the step not closing).
  absl::Span<const int64_t> early_workers;
};

struct StageResult {
  // Parts this push completed and applied for the step before it closes.
  std::vector<int> applied_early;
  // Parts of the push that had been applied for the step already: their
  // gradient came too late and is dropped.
  int64_t dropped = 0;
};

// Where a pull's data goes: one sink per table kind (a kind that pulls
// something other than chunks adds its own).
struct PullSinks {
  const ChunkSink* chunks = nullptr;
  const SparseSink* sparse = nullptr;
};

// Every method is thread-safe under the lock rules in the file comment.
class Table {
 public:
  virtual ~Table() = default;

  // --- Pushes ---

  // Checks this table's part of `args` and readies its gradient: ids,
  // shapes, dtypes, payload lengths, and NaN/Inf unless the job allows
  // them. INVALID_ARGUMENT naming what is wrong; nothing changes either
  // way. `apply_now`: the push will go to ApplyNow (ASP/SSP), so the table
  // may leave the NaN/Inf check to it (check_deferred). A job holds at most
  // one table that defers, and applies it first.
  virtual absl::StatusOr<std::unique_ptr<PreparedGradient>> Prepare(
      const PushArgs& args, bool apply_now) const = 0;

  // ASP/SSP: applies `gradient` at once with `rate`. All or nothing: with
  // check_deferred, INVALID_ARGUMENT if the deferred check finds NaN/Inf
  // that the job does not allow, and then nothing is changed; OK otherwise.
  virtual absl::Status ApplyNow(const PushArgs& args,
                                PreparedGradient& gradient,
                                UpdateRate rate) = 0;

  // BSP: adds `gradient` to what `request.worker_id` staged for
  // `request.step` (replacing what it staged for an earlier step), and
  // applies parts early as `request` allows.
  virtual StageResult Stage(const PushArgs& args, PreparedGradient& gradient,
                            const StageRequest& request) = 0;

  // BSP step close: applies to every part not applied early for `step` the
  // average over `workers` (sum / workers.size(), at the schedule's rate
  // of `step`) of what each staged for `step`, and drops everything staged
  // for `step` by the others (late or backup workers). May spread parts
  // over `pool`.
  virtual void ApplyStep(int64_t step, absl::Span<const int64_t> workers,
                         ApplyPool& pool) = 0;

  // --- Pulls ---

  // INVALID_ARGUMENT if `args` asks for something this table does not hold
  // on this shard.
  virtual absl::Status CheckPull(const PullArgs& args) const = 0;

  // Hands what `args` asks for to its sink in `sinks` (a version_only pull
  // never gets here). Returns the payload bytes handed out; an error (a
  // sparse table at capacity: RESOURCE_EXHAUSTED) fails the pull.
  virtual absl::StatusOr<int64_t> Pull(const PullArgs& args,
                                       const PullSinks& sinks) = 0;

  // The number of parts.
  virtual int num_parts() const = 0;

  // Calls visit(part) for each part `args` reads, in order, until one call
  // returns false; returns whether all returned true. False if `args`
  // reads something of this table outside its parts (never ahead of the
  // job).
  virtual bool ForEachPulledPart(
      const PullArgs& args, absl::FunctionRef<bool(int part)> visit) const = 0;

  // --- Checkpoints ---

  // Appends this table's state at `version` to `data`: a part applied
  // early for the open step `version` as it was before that update, so
  // that the checkpoint holds `version` throughout.
  virtual void Snapshot(int64_t version, CheckpointData* data) = 0;

  // OK if `files` (one checkpoint, any shard layout) cover this table's
  // state on this shard and were written for the same model and optimizer;
  // otherwise an error saying what differs (FAILED_PRECONDITION) or what
  // the files' model spec lacks.
  virtual absl::Status CheckRestore(
      const std::vector<CheckpointData>& files) const = 0;

  // Loads this table's state from `files`, which CheckRestore accepted.
  virtual void Restore(const std::vector<CheckpointData>& files) = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_TABLE_H_
