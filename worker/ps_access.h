// ParameterAccess over the real parameter servers (the parameter client,
// worker/client/parameter_client.h): the placement is computed from the job
// spec, pulls wait as the job's consistency model says, and every wait is
// bounded and stoppable.
#ifndef PS_WORKER_PS_ACCESS_H_
#define PS_WORKER_PS_ACCESS_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/placement.h"
#include "common/rpc.h"
#include "proto/coordinator_service.pb.h"
#include "worker/client/parameter_client.h"
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
  // sleeps (client::ParameterClientOptions::wait_spin); zero: it sleeps at
  // once.
  absl::Duration wait_spin = absl::Microseconds(300);
  // Set by the daemon to stop waiting (job cancelled, SIGTERM).
  const std::atomic<bool>* stop = nullptr;
};

// Connects to the assignment's shards (the job's placement, a client with
// the retry deadline and wait spin of `options`). FAILED_PRECONDITION for a
// job without servers; the model's and the client's errors.
absl::StatusOr<std::unique_ptr<ParameterAccess>> CreatePsAccess(
    const WorkerAssignment& assignment, const PsAccessOptions& options);

// The same over `client` (tests give one over a fake transport, or a fake),
// for a job of consistency model `model`.
std::unique_ptr<ParameterAccess> NewPsAccess(
    std::unique_ptr<client::ParameterClient> client,
    ConsistencySpec::Model model, const PsAccessOptions& options);

// The sparse tables' side of the ParameterAccess that CreatePsAccess and
// NewPsAccess make (one training thread drives both), in the terms of the
// parameter client (worker/client/parameter_client.h): per table, unique
// keys (worker/client/unique_keys.h) and fp32 row buffers of keys x dim.
// Rows' pushes are part of the open step: Finish / FinishAndPull wait for
// them (their staleness counts with the dense pushes'), and for the rows
// PushRowsAndPull asked back, so buffers given here must stay valid until
// then (or CancelCalls()). Errors as the dense calls' (UNAVAILABLE naming
// the shard after retry_deadline, CANCELLED on stop).
class SparseRowAccess {
 public:
  virtual ~SparseRowAccess() = default;
  // Fills the rows of `pulls`' keys for step `clock`, waiting as Pull does;
  // the rows' version (the lowest over the shards asked).
  virtual absl::StatusOr<int64_t> PullRows(
      int64_t clock, std::vector<client::SparsePull> pulls) = 0;
  // Starts pushing the gradients of step `clock` of the rows of `grads`
  // (unique keys, duplicates summed: SumRowsByInverse), computed on
  // weights of `base_version`; returns before they are sent.
  virtual absl::Status PushRows(int64_t clock, int64_t base_version,
                                std::vector<client::SparsePush> grads) = 0;
  // PushRows that also asks back, in the pushes' answers, the rows of
  // `next` (the next batch's keys) for step clock + 1, waiting as Pull(clock
  // + 1) would. They are in place once Finish / FinishAndPull of `clock`
  // has returned OK (pulled again there when the push was refused as too
  // stale).
  virtual absl::Status PushRowsAndPull(
      int64_t clock, int64_t base_version,
      std::vector<client::SparsePush> grads,
      std::vector<client::SparsePull> next) = 0;
};

// The sparse side of `access` when CreatePsAccess / NewPsAccess made it;
// nullptr otherwise.
SparseRowAccess* SparseRowsOf(ParameterAccess* access);

// The TCP connections a worker opens to each shard for `spec`. Two by
// default: the answers to a step's first messages flow back while the later
// ones are still sent, which shortens a step that waits for them. One for
// ASP with overlap_communication when every shard's part of a step fits in
// one message of max_request_bytes: that step's messages travel while the
// next step computes, so what counts is the CPU they cost, and one message
// on one connection wakes fewer threads (tools/train_bench against a
// ps_server process, batch 128: 0.73 / 0.77 of the compute-only loop
// against 0.62 / 0.61 with two; docs/performance.md).
int ConnectionsPerShard(const JobSpec& spec, const Placement& placement,
                        int64_t max_request_bytes);

}  // namespace ps::worker

#endif  // PS_WORKER_PS_ACCESS_H_
