// The coordinator's core, transport-neutral: membership, the job queue and
// each job's state machine, assignments to workers, metrics and events, the
// straggler policy, and the shards' setup and membership. The gRPC service
// (coordinator_service.h) only decodes requests and converts statuses.
//
// Inside, the core is a facade over units, lowest first: job_state.h (a
// job's state, shared by the rest), write_batch.h (durable writes made
// after the lock is released), job_table.h (the jobs and the one lock),
// membership.h (the member table), job_liveness.h (heartbeats and failure
// detection), data_assignment.h (ranks and data shards), metric_intake.h,
// straggler_policy.h, scheduler.h, reconciler.h and rollback.h.
//
// The protocol members follow:
//  - Register (a restarted daemon passes its old member_id and its pid; a
//    worker that comes back under its old id with a new pid leaves its job
//    and rejoins it at the current step), then Heartbeat every
//    heartbeat_interval_ms. reregister = true: call Register again.
//  - Workers heartbeat with the job they train and their clock (steps
//    completed). TRAIN: train assignment.job_id (the same assignment comes
//    back every time; a new membership_epoch means data_shards or the
//    evaluator changed). STOP: the job in the request is over or the worker
//    left it; stop within a step and heartbeat with an empty job_id. IDLE:
//    nothing to do.
//  - Workers ReportMetrics points named train_loss, test_accuracy,
//    test_loss, examples_per_sec, step_time_ms, wait_ms, pull_ms,
//    compute_ms, push_ms, staleness, ... with step and epoch, and done = true
//    once their share is finished. compute_ms feeds straggler detection (in
//    BSP every clock moves at the slowest worker's pace).
//  - A job's state: PENDING (reason says what it waits for) -> RUNNING ->
//    SUCCEEDED (every active worker done) | FAILED (no worker left, or a
//    shard down longer than server_wait_timeout_ms) | CANCELLED.
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/metric_series.h"
#include "server/coordinator/shard_client.h"

namespace ps::coordinator {

struct CoordinatorOptions {
  // Told to members at registration: how often to heartbeat.
  int64_t heartbeat_interval_ms = 1000;
  // A member silent this long is DEAD (a job's workers are evicted after
  // the job's own consistency.heartbeat_timeout_ms).
  int64_t member_timeout_ms = 10000;
  // A running job whose shard is down this long FAILS (the shard may come
  // back at the same address and restore its checkpoint before that).
  int64_t server_wait_timeout_ms = 120000;
  // How often a running job's shards are asked for their counters
  // (dropped / rejected gradients become events and JobRecord totals).
  int64_t shard_poll_interval_ms = 5000;
  // A replicated shard's backup that its primary has waited for this long
  // (a link cut between the two, or a backup too slow to answer) is
  // dropped so that the primary's answers stop waiting; a new one is built
  // on another server.
  int64_t backup_timeout_ms = 3000;
  // Step rates for straggler detection are measured over this window.
  int64_t rate_window_ms = 10000;
  // Whether a submitted spec's dataset directory must exist here.
  bool check_dataset_files = true;
  // Longest interval WatchJob waits between updates when nothing changes.
  int64_t watch_interval_ms = 1000;
  // After a start that found RUNNING jobs in the store (a restart), nobody
  // is evicted for missed heartbeats, a barrier or slowness for this long
  // (and at least each job's heartbeat timeout): the members' heartbeats
  // stopped because the coordinator was down, not because they were.
  int64_t restart_grace_ms = 30000;
  // Points kept per metric series of a job (a name from one worker in one
  // incarnation); past it, older points are merged in pairs
  // (metric_series.h), so a job's series take bounded memory however long
  // it runs. The store keeps every point as reported.
  int max_points_per_series = MetricSeriesSet::kDefaultMaxPointsPerSeries;
};

// Thread-safe. Does not own the clock, the store or the shard client; they
// must outlive it. Every method returning a Status reports: NOT_FOUND for an
// unknown job, INVALID_ARGUMENT for a bad request (naming the field),
// FAILED_PRECONDITION for an operation the job's state forbids, INTERNAL
// when the job store cannot write (the change is then not acknowledged).
// No lock is held across shard RPCs or disk writes.
class Coordinator {
 public:
  // Loads every job from `store`: RUNNING jobs continue once their members
  // re-register; nothing acknowledged before a crash is lost.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      const CoordinatorOptions& options, const Clock* clock, JobStore* store,
      ShardClient* shards);

  virtual ~Coordinator() = default;

  virtual absl::StatusOr<RegisterResponse> Register(
      const RegisterRequest& request) = 0;
  // Unknown or dead members get reregister = true (never an error). Workers
  // get their assignment: TRAIN while they hold a rank in a running job,
  // STOP when the job they report is over or they left it, IDLE otherwise.
  virtual absl::StatusOr<HeartbeatResponse> Heartbeat(
      const HeartbeatRequest& request) = 0;
  // Validates (INVALID_ARGUMENT lists each bad field as "field.path:
  // problem") and normalises the spec, stores the job durably, queues it.
  virtual absl::StatusOr<SubmitJobResponse> SubmitJob(
      const SubmitJobRequest& request) = 0;
  virtual absl::StatusOr<JobRecord> GetJob(absl::string_view job_id) = 0;
  // Every job, in submission order.
  virtual ListJobsResponse ListJobs() = 0;
  // PENDING or RUNNING -> CANCELLED (workers get STOP, shards are torn
  // down). Cancelling a cancelled job is OK; a finished one is
  // FAILED_PRECONDITION.
  virtual absl::StatusOr<CancelJobResponse> CancelJob(
      const CancelJobRequest& request) = 0;
  // Stores the points durably; `done` marks the worker's share finished
  // (all active workers done: SUCCEEDED). FAILED_PRECONDITION when the
  // member never held a rank in the job.
  virtual absl::Status ReportMetrics(const ReportMetricsRequest& request) = 0;
  virtual absl::Status ReportFailure(const ReportFailureRequest& request) = 0;
  // request.format "csv" / "json" also fills `text`.
  virtual absl::StatusOr<GetMetricsResponse> GetMetrics(
      const GetMetricsRequest& request) = 0;
  virtual absl::StatusOr<GetEventsResponse> GetEvents(
      absl::string_view job_id) = 0;
  virtual ListMembersResponse ListMembers() = 0;
  // One screen of text: why the job is (not) moving. Asks every shard for
  // its status (bounded by the shard client's deadline).
  virtual absl::StatusOr<ExplainJobResponse> ExplainJob(
      absl::string_view job_id) = 0;

  // For WatchJob: waits until the job changed since `*seen` (0 at first:
  // returns at once) or the timeout passes; returns the record and updates
  // `*seen`. UNAVAILABLE once Shutdown() was called.
  virtual absl::StatusOr<JobRecord> WaitForJobChange(
      absl::string_view job_id, int64_t* seen, absl::Duration timeout) = 0;

  // The periodic work (call from one thread, every heartbeat interval):
  // failure detection, evictions, straggler policy, starting queued jobs,
  // server timeouts, and bringing the shards in line (setup, membership,
  // counters, teardown).
  virtual void Tick() = 0;

  // Wakes every WaitForJobChange (they and later ones return UNAVAILABLE).
  virtual void Shutdown() = 0;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_H_
