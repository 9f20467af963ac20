// The data-plane client workers and ps_bench use: push gradients to and pull
// weights from every shard of a job, asynchronously, over gRPC. The worker's
// side of proto/parameter_service.proto; it depends on the contracts
// (proto/, common/), never on the server.
//
// Given the job's Placement it splits each tensor into its chunks, groups
// them per shard into messages of at most max_request_bytes, sends them over
// several connections per shard, and gathers pulled chunks straight into the
// caller's tensor buffers. Payloads travel with the zero-copy codec: a push
// sends slices pointing at the caller's gradient memory.
//
// Every call returns a Ticket (ticket.h): Wait(timeout) is bounded and the
// in-flight state is released as soon as the call ends (no tracker that
// grows). Each RPC attempt has a deadline; attempts failing with UNAVAILABLE
// or DEADLINE_EXCEEDED are retried with exponential backoff (a retried push
// keeps its sequence number, so the server applies it once): call_engine.h.
//
// Thread-safe. Buffers handed to PullAll / PushTensor must stay alive and, for
// pushes, unchanged until the ticket is done. The destructor waits for the
// calls still in flight (each bounded by its retry deadline).
//
// The units behind it: ticket.h (tickets), call_engine.h (retries, backoff,
// cancellation, the send thread) over transport.h (grpc_transport.h in
// production, fake_transport.h in tests), session.h (sequence numbers and
// pulled versions per shard), dense_codec.h (dense tensors: chunks into
// messages, answers into the caller's buffers), sparse_codec.h (sparse
// tables: keys by shard into messages, rows into the caller's buffers);
// unique_keys.h builds a batch's unique keys and inverse index for it.
#ifndef PS_WORKER_CLIENT_PARAMETER_CLIENT_H_
#define PS_WORKER_CLIENT_PARAMETER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/platform/clock.h"
#include "common/platform/rpc.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"
#include "worker/client/buffers.h"
#include "worker/client/chunk_compression.h"
#include "worker/client/session.h"
#include "worker/client/ticket.h"
#include "worker/client/transport.h"

namespace ps::client {

struct ParameterClientOptions {
  std::vector<std::string> server_addresses;  // index = shard index
  std::string token;                          // cluster token (may be empty)
  TlsOptions tls;
  int max_message_bytes = kDefaultMaxMessageBytes;
  // Payload bytes per Push / Pull message; bigger transfers are split so
  // that several messages are in flight and none nears the maximum.
  int64_t max_request_bytes = 4 << 20;
  // TCP connections per shard; messages are spread over them.
  int connections_per_shard = 2;
  // Deadline of one attempt. A BSP pull waits on the server for the slowest
  // worker within it, and is retried after it.
  absl::Duration call_timeout = absl::Seconds(30);
  RetryPolicy retry;
  DType wire_dtype = FLOAT32;  // FLOAT16 / BFLOAT16 halve the bytes
  // JobSpec.compression TOPK: > 0, each chunk's gradient is pushed as its
  // top `topk_ratio` share of entries with error feedback, values in
  // wire_dtype (chunk_compression.h); in (0, 1]. 0: dense pushes.
  double topk_ratio = 0;
  // Where compressed pushes are counted (may be null); must outlive the
  // client.
  CompressionCounters* compression_counters = nullptr;
  // The job's incarnation (WorkerAssignment.incarnation): push sequence
  // numbers are SeqBase(incarnation) + 1, + 2, ... (common/platform/rpc.h).
  int64_t incarnation = 0;
  // Start RPCs on a thread of the client's instead of the caller's: gRPC
  // writes a request on the thread that starts it, so without this a
  // PushTensor of a big tensor costs its caller the send (and on loopback
  // the receiver's TCP processing too). For callers with work to overlap
  // (a worker pushing during backward); costs a thread hand-off per call.
  bool send_thread = false;
  // EndStepAndPull: the step's pushes are cut into about
  // connections_per_shard messages in all (each shard's part into
  // ceil(connections_per_shard / shards), at most max_request_bytes each),
  // and every message asks back the weights of its own chunks, so the
  // answers to the first messages flow back while the later ones are still
  // being sent. (With as many shards as connections, each shard gets one
  // message: the shards' messages overlap already, and a message more per
  // shard costs an RPC: docs/performance/ps-bench.md, "Throughput".)
  // For ASP/SSP, where a push's answer need not wait for the step. Off (BSP,
  // where no answer can come before the step closes): the part is cut only
  // at max_request_bytes and the message that ends the step asks for all;
  // tools/train_bench measured the split as slower there.
  bool pipeline_step_end = true;
  // Pushes say that they complete their chunks' gradients for the step
  // (PushRequest.chunks_final), which lets a BSP shard apply each chunk as
  // soon as every worker has pushed it. Callers that push a chunk more than
  // once per step (partial sums) must turn it off.
  bool chunks_final = true;
  // How long a Ticket's Wait / WaitForChunks polls for the result before it
  // sleeps. A thread that sleeps runs again only once gRPC's thread has
  // woken it after the answer landed; one that polls sees the answer at
  // once, and keeps its core busy meanwhile. For a worker waiting on its
  // next weights with a core of its own (tools/train_bench, BSP at batch
  // 128: 0.62 of the compute-only loop with 300 us against 0.57 without,
  // docs/performance/train-bench.md, "Polling for weights"); not where
  // the machine's cores are all taken.
  absl::Duration wait_spin = absl::ZeroDuration();
  // The job's sparse tables (ModelSpec.sparse_tables; the index is the
  // table's id in PullRows / PushRows). Each table's rows travel in its
  // own dtype (SparseTableSpec.dtype), whatever wire_dtype says.
  std::vector<SparseTableSpec> sparse_tables;
};

class ParameterClient {
 public:
  // Connects lazily. INVALID_ARGUMENT when the number of addresses differs
  // from placement.num_shards or options are out of range; the TLS files'
  // errors as MakeChannel reports them.
  static absl::StatusOr<std::unique_ptr<ParameterClient>> Create(
      const ParameterClientOptions& options, const std::string& job_id,
      int64_t worker_id, const Placement& placement);
  // The same over `transport` (one shard per placement shard; tests use a
  // fake), with retry times taken from `clock`. The options that configure
  // connections (addresses, token, TLS, message size, connections, call
  // timeout) are the transport's business and are not checked here.
  static absl::StatusOr<std::unique_ptr<ParameterClient>> CreateWithTransport(
      const ParameterClientOptions& options, const std::string& job_id,
      int64_t worker_id, const Placement& placement,
      std::unique_ptr<Transport> transport, const Clock* clock = Clock::Real());
  virtual ~ParameterClient() = default;

  // Pulls every chunk of every shard into `tensors`: one span per model
  // tensor, in model order, each of placement.tensor_elements[i] floats.
  // BSP: the shards answer once their version is >= min_version; SSP: once
  // the slowest worker is within the staleness bound of `clock`.
  virtual Ticket PullAll(int64_t clock, int64_t min_version,
                         std::vector<absl::Span<float>> tensors) = 0;

  // The base version of a push: what the last PullAll received from each
  // shard (shards count their versions independently under ASP/SSP).
  static constexpr int64_t kPulledVersion = Session::kPulledVersion;

  // Pushes the gradient of tensor `tensor_index` (all of it, placement.
  // tensor_elements[i] floats), split into its chunks and shards. Call it
  // as soon as backward has produced the tensor's gradient. `base_version`:
  // the weights' version the gradient was computed on, by default each
  // shard's version from the last PullAll.
  virtual Ticket PushTensor(int tensor_index, absl::Span<const float> grad,
                            int64_t clock,
                            int64_t base_version = kPulledVersion) = 0;

  // The same for several tensors, coalesced: each shard gets one message
  // (or more, of at most max_request_bytes each) for all of them, which
  // saves RPCs when tensors are small (biases, output layers).
  virtual Ticket PushTensors(std::vector<TensorGrad> grads, int64_t clock,
                             int64_t base_version = kPulledVersion) = 0;

  // Marks the end of the worker's step `clock` on every shard (after all of
  // the step's PushTensor calls were issued; the server orders them by
  // sequence number, so there is no need to wait for them first).
  virtual Ticket EndStep(int64_t clock,
                         int64_t base_version = kPulledVersion) = 0;

  // EndStep fused with the step's last pushes and the next step's pull:
  // each shard gets `grads` (its chunks of them, as PushTensors) with the
  // end-of-step mark on the last message, and that message asks the shard
  // to answer, once the push is done, with the weights PullAll(next_clock,
  // min_version, tensors) would get (waiting just as long). One round trip
  // per shard then ends a step and fetches the next step's weights (shards
  // whose chunks exceed one message fetch the rest with Pull calls started
  // when the end of step is acknowledged). With pipeline_step_end, each
  // shard's part goes in several messages that each ask back their own
  // chunks, and the last one the rest. `end` covers the grads' pushes
  // and the end of step (its version: the lowest the shards reported), and
  // since the shards answer the end of step only with the weights, it
  // completes no earlier than the pull's first part (BSP: once the step has
  // closed). `pull` completes like PullAll's ticket (the pulled version and
  // min clock). When the end of step fails, so does the pull; a retried
  // end of step is not applied twice and pulls again.
  // `already_asked`: chunks whose weights earlier PushTensorsAndPull calls
  // of the step ask back; they are not asked for again (and a shard left
  // with nothing to ask for gets its end of step without a pull).
  struct StepTickets {
    Ticket end;
    Ticket pull;
  };
  virtual StepTickets EndStepAndPull(
      std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
      int64_t next_clock, int64_t min_version,
      std::vector<absl::Span<float>> tensors,
      const std::vector<int64_t>& already_asked = {}) = 0;

  // PushTensors whose messages each ask back the weights of their own
  // chunks for next_clock (waiting as PullAll(next_clock, min_version)
  // would: under BSP until each chunk is applied, which a shard does as
  // soon as every worker has pushed it), into `tensors`. For a worker that
  // sends each layer as backward produces it and no longer reads that
  // layer's weights: they come back while it computes the others. `end`
  // covers the pushes, `pull` the weights (Ticket::WaitForChunks: as they
  // arrive; its version: the lowest the answers reported).
  virtual StepTickets PushTensorsAndPull(
      std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
      int64_t next_clock, int64_t min_version,
      std::vector<absl::Span<float>> tensors) = 0;

  // Sparse tables. Each table's keys go to their shards
  // (common/wire/key_placement.h) in parallel, in messages of at most
  // max_request_bytes of keys and rows each (a pull's measured by its
  // answer), with the retries of every call; the answers' rows are written
  // straight into the caller's buffers, widened from the table's dtype.
  // Buffers stay alive (and, for pushes, unchanged) until the ticket is
  // done. INVALID_ARGUMENT (on the ticket) for an unknown table, a buffer
  // whose size is not keys x dim, or a table given twice in one push;
  // a shard's errors name the shard. The default implementation (for
  // fakes) fails with UNIMPLEMENTED.
  //
  // PullRows: the rows of `pulls`' keys, as PullAll waits (BSP: version >=
  // min_version). The ticket's version: the lowest the shards reported.
  // A sparse pull does not change the base version of later pushes
  // (kPulledVersion stays the last PullAll's).
  virtual Ticket PullRows(int64_t clock, int64_t min_version,
                          std::vector<SparsePull> pulls);
  // PushRows: pushes `grads` (not ending the step), each shard's part with
  // the shard's next sequence numbers, so a retry is applied once.
  virtual Ticket PushRows(std::vector<SparsePush> grads, int64_t clock,
                          int64_t base_version = kPulledVersion);
  // PushRows whose messages carry `next` (the next batch's keys; other
  // keys and tables than the push's may be given) in their then_pull, so
  // that the rows come back in the pushes' answers (one round trip per
  // shard), waiting as PullRows(next_clock, min_version) would; a shard
  // whose share of `next` needs more messages than its push sends empty
  // pushes for the rest. `end` covers the pushes, `pull` the rows (a
  // failed push fails its rows' pull; a server that ignores then_pull gets
  // a plain pull after the push).
  virtual StepTickets PushRowsAndPull(std::vector<SparsePush> grads,
                                      int64_t clock, int64_t base_version,
                                      int64_t next_clock, int64_t min_version,
                                      std::vector<SparsePull> next);

  virtual const Placement& placement() const = 0;

  // Moves shard i to addresses[i] (index = shard index, as
  // server_addresses): a failover put another server in charge of it. Calls
  // in flight are not dropped: their next attempt goes to the new address
  // (at once: a running attempt is cancelled and resent), a push with its
  // sequence number, so a shard that holds it already answers it as a
  // duplicate (CallEngine::SetAddresses). INVALID_ARGUMENT for a count other
  // than the placement's shards or an empty address; the TLS files' errors
  // as MakeChannel reports them (nothing moved then).
  virtual absl::Status SetServerAddresses(
      const std::vector<std::string>& addresses) = 0;

  // Cancels every call still in flight (and those queued or waiting to be
  // retried; their tickets complete with CANCELLED) and returns once none
  // is left, so that nothing touches the callers' gradient and weight
  // buffers afterwards. For a caller that stops waiting (a stopped job)
  // before freeing them. Calls made after it returns work as usual.
  virtual void CancelInFlight() = 0;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_PARAMETER_CLIENT_H_
