// ParameterAccess over the real parameter servers (server/parameter_client.h):
// the placement is computed from the job spec, pulls wait as the job's
// consistency model says, and every wait is bounded and stoppable.
#ifndef PS_WORKER_PS_ACCESS_H_
#define PS_WORKER_PS_ACCESS_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "proto/coordinator_service.pb.h"
#include "worker/trainer.h"

namespace ps::worker {

struct PsAccessOptions {
  std::string token;
  TlsOptions tls;
  int64_t member_id = 0;  // the worker id the shards know
  // How long one pull or step may keep failing or waiting before the worker
  // gives up and reports (UNAVAILABLE names the shard).
  absl::Duration retry_deadline = absl::Seconds(60);
  // How long the training loop polls for weights on their way before it
  // sleeps (server::ParameterClientOptions::wait_spin); zero: it sleeps at
  // once.
  absl::Duration wait_spin = absl::Microseconds(300);
  // Set by the daemon to stop waiting (job cancelled, SIGTERM).
  const std::atomic<bool>* stop = nullptr;
};

absl::StatusOr<std::unique_ptr<ParameterAccess>> CreatePsAccess(
    const WorkerAssignment& assignment, const PsAccessOptions& options);

}  // namespace ps::worker

#endif  // PS_WORKER_PS_ACCESS_H_
