// The worker's connection to the coordinator: registration, the heartbeat
// loop that carries the current assignment, metric reports and failure
// reports. Survives coordinator restarts, at its address or another one
// named in the coordinator file: calls are retried with backoff, and a
// coordinator that no longer knows this worker gets it registered again
// (under the same member id). Metric reports wait in an outbox, bounded,
// until a coordinator takes them: none is lost to a coordinator's absence.
#ifndef PS_WORKER_COORDINATOR_LINK_H_
#define PS_WORKER_COORDINATOR_LINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "proto/coordinator_service.pb.h"

namespace ps::worker {

struct CoordinatorLinkOptions {
  // host:port, or a file holding it (the coordinator's --coordinator_file),
  // read again whenever the coordinator is unreachable; exactly one.
  std::string address;
  std::string file;
  std::string token;
  std::string device;  // reported at registration: "cpu" or "cuda:N"
  // Also reported at registration: OpenBLAS's core in this process and the
  // start-up GEMM probe of the device (kernels/gemm_probe.h).
  std::string blas_core;
  double gemm_gflops = 0;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration rpc_timeout = absl::Seconds(5);
  // The most metric points the outbox holds while the coordinator is
  // unreachable (about 100 bytes each). Past it the oldest training points
  // go first, evaluations (test_*) last; each drop is counted and logged.
  int64_t max_held_points = 100000;
  // On Stop(), how long undelivered reports are still tried.
  absl::Duration flush_on_stop = absl::Seconds(10);
  // TLS to the coordinator (off when empty); with cert_file and key_file this
  // worker presents a client certificate (mutual TLS).
  TlsOptions tls;
  // > 0: speak as this member, registered already by another process (a
  // job's Python entrypoint started by its ps_worker, which pauses its own
  // heartbeats meanwhile): Start() does not register first.
  int64_t member_id = 0;
};

// Thread-safe. Start() starts a heartbeat thread and a thread that delivers
// metric reports in the order they were made; the destructor stops both.
class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;

  // Registers (retrying while the coordinator is unreachable, until
  // `deadline`) and starts heartbeating.
  virtual absl::Status Start(absl::Time deadline) = 0;

  virtual int64_t member_id() const = 0;

  // The newest assignment, waiting up to `timeout` for one whose
  // (command, job_id, membership_epoch, incarnation, done, others_done,
  // data shard count, server_addresses) differs from `known`. Returns the
  // current one on timeout.
  virtual WorkerAssignment WaitForChange(const WorkerAssignment& known,
                                         absl::Duration timeout) = 0;

  // What the next heartbeats carry: the job and clock this worker is at.
  virtual void SetProgress(const std::string& job_id, int64_t clock,
                           int64_t incarnation) = 0;
  // What the next heartbeats carry about the job's data: its steps per data
  // shard and per epoch as this worker counted them (0: not known).
  virtual void SetDataShape(int64_t shard_steps, int64_t steps_per_epoch) = 0;

  // Queues metric points (and, with `done`, the end of this worker's share
  // at the clock SetProgress last named) for delivery and returns at once.
  // Reports are delivered in order, each retried until a coordinator takes
  // it, following the coordinator file when it moves; one the coordinator
  // refuses (e.g. NOT_FOUND: a job it does not know) is dropped with a log
  // line.
  virtual void ReportMetrics(const std::string& job_id,
                             std::vector<MetricPoint> points, bool done) = 0;
  // Waits up to `timeout` until every queued report is delivered or
  // dropped; whether the outbox is empty.
  virtual bool Flush(absl::Duration timeout) = 0;
  // Points dropped because the outbox was full (max_held_points).
  virtual int64_t dropped_points() const = 0;

  // The worker gives up on the job (it leaves it for good), or with
  // `crashed` its process for the job died and it rejoins
  // (ReportFailureRequest.crashed).
  virtual absl::Status ReportFailure(const std::string& job_id,
                                     const std::string& message,
                                     bool crashed) = 0;

  // Whether the last heartbeat reached the coordinator.
  virtual bool Connected() const = 0;

  // While paused no heartbeat is sent (another process speaks for this
  // member: a Python entrypoint attached with CoordinatorLinkOptions::
  // member_id); Resume() sends one at once.
  virtual void PauseHeartbeats() = 0;
  virtual void ResumeHeartbeats() = 0;

  // Stops heartbeating, and delivering reports once the outbox is empty or
  // flush_on_stop has passed (idempotent).
  virtual void Stop() = 0;
};

absl::StatusOr<std::unique_ptr<CoordinatorLink>> CreateCoordinatorLink(
    const CoordinatorLinkOptions& options);

}  // namespace ps::worker

#endif  // PS_WORKER_COORDINATOR_LINK_H_
