// The transport-neutral core of a parameter-server shard: every job's chunks
// that this shard owns, their optimizer state, and the consistency logic
// (BSP with backup workers, ASP with bounded staleness, SSP), membership and
// exactly-once push application. gRPC (server/parameter_service.h) is a thin
// adapter over it.
//
// The component (server/shard/): this interface and its arguments
// (push_pull.h); a job's state on the shard (job.h) and the units over it:
// setup (job_setup.h), sequence numbers (seq_tracker.h), push validation
// (push_validation.h), the apply paths (push_apply.h), BSP step aggregation
// (bsp_step.h), pull waits (pull_wait.h), checkpoints (job_checkpoint.h)
// and status (shard_status.h). The parameters live in tables behind one
// seam (table.h); the dense tensors' table is dense_table.h.
//
// Versions. BSP: the version is the number of applied steps; a worker at
// clock c pushes the gradient of step c (c == version) and pulls with
// min_version c. ASP/SSP: pushes apply at once and the version counts the
// completed worker steps (pushes with end_of_step), so the staleness of a
// push is version - base_version in worker steps.
//
// BSP chunks applied as they complete. A push with chunks_final says that
// the worker's gradients of those chunks for the step are complete. Once
// every active worker has pushed a chunk that way (and the job has no
// backup workers), the shard applies that chunk's update at once instead
// of when the step closes, and pulls of it (waiting for min_version = the
// next step) are answered: a worker gets the first layers' new weights
// while it still computes the others' gradients. The chunk is then "at"
// version + 1 while the step is open; the step still closes (version + 1)
// when every worker has ended it. Meanwhile a push of the next step is
// refused with UNAVAILABLE (retried by the client), and a checkpoint records
// such chunks as they were before the update, so it holds one version. A
// chunk pushed again in a step after it was applied is counted as dropped.
// A worker that leaves in the middle of a step keeps its share of the
// chunks applied before it left. Only a worker with a push admitted in the
// open step is told of its chunks applied early (a pull's version): one
// that joined during the step (after chunks were applied without it) pulls
// the open step's version, computes that step and ends it, its gradient of
// the applied chunks dropped, since the step waits for its end of step.
//
// Thread safety: every method is thread-safe. A job has one small mutex for
// its bookkeeping (members, clocks, sequence numbers) and one per chunk for
// the data; pushes to different chunks apply in parallel. Locks are never held
// across disk I/O (checkpoints snapshot under the locks, then write).
//
// Sparse tables (sparse_table.h) sit next to the dense chunks under the same
// version, clock and sequence numbers: a push's sparse rows apply at once
// (ASP/SSP) or at the step's close (BSP) with its chunks, all or nothing.
//
// Errors: NOT_FOUND (unknown job), INVALID_ARGUMENT (unknown or foreign
// chunk, wrong length, dtype, NaN/Inf, seq 0; unknown sparse table, wrong
// dim or dtype, keys and rows that disagree, a duplicate key, a key of
// another shard), RESOURCE_EXHAUSTED (a sparse table at capacity that
// evicts nothing, naming the table and shard), OUT_OF_RANGE (clock or base
// version from the future; UNAVAILABLE for the next step's push while the
// step closes), FAILED_PRECONDITION (worker not an active member
// of the job), ABORTED (ASP push staler than max_staleness),
// DEADLINE_EXCEEDED (a pull or step barrier still waiting at the deadline),
// ALREADY_EXISTS (SetupJob of a job set up with a different spec). A push
// that fails leaves the shard's state unchanged.
#ifndef PS_SERVER_SHARD_SHARD_STORE_H_
#define PS_SERVER_SHARD_SHARD_STORE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "common/platform/file_system.h"
#include "common/platform/metrics.h"
#include "common/wire/placement.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/push_pull.h"

namespace ps::server {

struct ShardStoreOptions {
  // Checkpoints go to <data_dir>/<job_id>/; empty: checkpoints are refused.
  std::string data_dir;
  // Timestamps and time-based checkpoint periods, never waiting; null:
  // Clock::Real().
  const Clock* clock = nullptr;
  // Where checkpoints are written and read; null: FileSystem::Posix().
  FileSystem* file_system = nullptr;
  MetricsRegistry* metrics = nullptr;  // null: no Prometheus metrics
  // Threads that apply a BSP step's update when it closes (the closing
  // thread and apply_threads - 1 helpers), chunks spread over them; >= 1.
  int apply_threads = 1;
  // The server restarted (it kept its member id): a push or pull of a job
  // it does not hold is answered UNAVAILABLE, not NOT_FOUND, so that the
  // workers retry while the coordinator restores the job here or fails its
  // shard over to a replica and tells them where.
  bool restarted = false;
  // Called after TeardownJob dropped a job's state (ps_server:
  // ReleaseFreedMemory, common/platform/process.h), so that the memory its
  // tables freed leaves the process instead of staying in the allocator's
  // heaps; null: nothing. Runs on the TeardownJob caller's thread, with no lock
  // held.
  std::function<void()> after_teardown;
};

// The daemon's default apply_threads: one per CPU core, at most 8.
int DefaultApplyThreads();

class ShardStore {
 public:
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(
      const ShardStoreOptions& options);
  virtual ~ShardStore() = default;

  // Allocates and initialises the chunks this shard owns (or, with restore,
  // loads the newest valid checkpoint). Idempotent for the same spec and
  // shard layout: a repeated SetupJob (a retried RPC, a coordinator restart)
  // returns the current state.
  virtual absl::StatusOr<SetupJobResponse> SetupJob(
      const SetupJobRequest& request) = 0;
  virtual absl::Status TeardownJob(const TeardownJobRequest& request) = 0;
  virtual absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const UpdateMembershipRequest& request) = 0;

  // Applies (ASP/SSP) or stages (BSP) a gradient. A BSP push with
  // end_of_step waits, until `deadline`, for the worker's earlier pushes
  // (lower seq) of the step to arrive.
  virtual absl::StatusOr<PushResult> Push(const PushArgs& args,
                                          absl::Time deadline) = 0;

  // Whether Push(args) could block: a BSP end of step whose earlier pushes
  // have not all landed yet. False is final (the answer only turns false).
  virtual bool PushMayWait(const PushArgs& args) = 0;

  // Waits (BSP: for min_version; SSP: for every active clock >= clock - s)
  // until `deadline`, then hands each requested chunk to `sink`.
  absl::StatusOr<PullResult> Pull(const PullArgs& args, absl::Time deadline,
                                  ChunkSink sink) {
    return PullWithRows(args, deadline, sink, nullptr);
  }

  // Pull, with the rows of args.sparse written where `rows` says (null:
  // args.sparse must be empty). A key with no row yet gets one from its
  // table's initializer. Errors beyond Pull's: INVALID_ARGUMENT (unknown
  // table, dim or dtype, a key of another shard, chunk ids with
  // sparse_only), RESOURCE_EXHAUSTED (a table at capacity that evicts
  // nothing, naming the table and shard).
  virtual absl::StatusOr<PullResult> PullWithRows(const PullArgs& args,
                                                  absl::Time deadline,
                                                  ChunkSink sink,
                                                  const SparseSink* rows) = 0;

  // Writes a checkpoint of the job now.
  virtual absl::StatusOr<CheckpointResponse> Checkpoint(
      absl::string_view job_id) = 0;

  // Writes the checkpoints that are due (every_versions / every_seconds of
  // each job's CheckpointSpec). The server calls it periodically; returns the
  // first error.
  virtual absl::Status CheckpointDue() = 0;

  // Blocks until a BSP job has a state waiting to be written (taken when a
  // step reached a multiple of every_versions), Shutdown, or `timeout`, so
  // that the server's checkpoint thread writes each of them promptly.
  virtual void WaitForCheckpointWork(absl::Duration timeout) = 0;

  // Writes a checkpoint of every job (shutdown with --checkpoint_on_exit).
  virtual absl::Status CheckpointAll() = 0;

  // The job's status on this server; `shard` >= 0: of that shard of the
  // job (GetShardStatusRequest.shard), -1: of the one it holds.
  virtual absl::StatusOr<ShardStatus> GetShardStatus(absl::string_view job_id,
                                                     int shard) = 0;
  absl::StatusOr<ShardStatus> GetShardStatus(absl::string_view job_id) {
    return GetShardStatus(job_id, -1);
  }

  // Replicated shards: applies a primary's changes to the backup held here
  // (server/shard/shard_router.h).
  virtual absl::StatusOr<ReplicateResponse> Replicate(
      const ReplicateRequest& request) = 0;

  // Replicated shards' state transfer (shard_image.h): the job's whole
  // state now (FAILED_PRECONDITION while a BSP step has something staged),
  // and a job set up here made that state. The router refuses both: its
  // shards transfer through their ReplicatedShard and Replicate.
  virtual absl::StatusOr<ShardImage> Image(absl::string_view job_id) = 0;
  virtual absl::Status Install(absl::string_view job_id,
                               const ShardImage& image) = 0;

  // Releases every waiting pull and barrier with UNAVAILABLE ("shutting
  // down") and refuses new waits, so that a server can stop promptly.
  virtual void Shutdown() = 0;

  // The placement of a job (for adapters that size responses).
  virtual absl::StatusOr<std::shared_ptr<const Placement>> GetPlacement(
      absl::string_view job_id) = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SHARD_STORE_H_
