// ParameterAccess over the real parameter servers (the parameter client,
// parameter_client.h): the placement is computed from the job
// spec, pulls wait as the job's consistency model says, and every wait is
// bounded and stoppable.
#ifndef PS_WORKER_CLIENT_PS_ACCESS_H_
#define PS_WORKER_CLIENT_PS_ACCESS_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"
#include "proto/coordinator_service.pb.h"
#include "worker/client/parameter_access.h"
#include "worker/client/parameter_client.h"

namespace ps::client {

struct PsAccessOptions {
  std::string token;
  TlsOptions tls;
  int64_t member_id = 0;  // the worker id the shards know
  // How long one pull or step may keep failing or waiting before the worker
  // gives up and reports (UNAVAILABLE names the shard).
  absl::Duration retry_deadline = absl::Seconds(60);
  // How long the training loop polls for weights on their way before it
  // sleeps (ParameterClientOptions::wait_spin); zero: it sleeps at
  // once.
  absl::Duration wait_spin = absl::Microseconds(300);
  // Set by the daemon to stop waiting (job cancelled, SIGTERM).
  const std::atomic<bool>* stop = nullptr;
  // Where the job's compressed pushes are counted (JobSpec.compression;
  // may be null); must outlive the access.
  CompressionCounters* compression_counters = nullptr;
};

// ParameterAccess over the parameter servers, whose shards may move to
// other servers without a rollback (a failover of replicated shards).
class PsAccess : public ParameterAccess {
 public:
  // Moves shard i to addresses[i]: the server_addresses of a later
  // assignment of the same job and incarnation. No call in flight is
  // dropped: each goes on at the new address with the same message (a push
  // with its sequence number): ParameterClient::SetServerAddresses, whose
  // errors it returns. Thread-safe, unlike the other calls: a thread that
  // watches the assignment calls it while the training loop runs.
  virtual absl::Status SetServerAddresses(
      const std::vector<std::string>& addresses) = 0;
};

// Connects to the assignment's shards (the job's placement, a client with
// the retry deadline and wait spin of `options`, compressing dense
// gradients as the job's compression says: chunk_compression.h).
// FAILED_PRECONDITION for a job without servers; the model's and the client's
// errors.
absl::StatusOr<std::unique_ptr<PsAccess>> CreatePsAccess(
    const WorkerAssignment& assignment, const PsAccessOptions& options);

// The same over `client` (tests give one over a fake transport, or a fake),
// for a job of consistency model `model`.
std::unique_ptr<PsAccess> NewPsAccess(std::unique_ptr<ParameterClient> client,
                                      ConsistencySpec::Model model,
                                      const PsAccessOptions& options);

// The TCP connections a worker opens to each shard for `spec`. Two by
// default: the answers to a step's first messages flow back while the later
// ones are still sent, which shortens a step that waits for them. One for
// ASP with overlap_communication when every shard's part of a step fits in
// one message of max_request_bytes: that step's messages travel while the
// next step computes, so what counts is the CPU they cost, and one message
// on one connection wakes fewer threads (tools/train_bench against a
// ps_server process, batch 128: 0.73 / 0.77 of the compute-only loop
// against 0.62 / 0.61 with two; docs/performance/train-bench.md).
int ConnectionsPerShard(const JobSpec& spec, const Placement& placement,
                        int64_t max_request_bytes);

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_PS_ACCESS_H_
