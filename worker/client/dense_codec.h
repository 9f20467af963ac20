// The dense tensors of one job on the wire, as one worker's client sends
// them: gradients cut into their placement's chunks and grouped per shard
// into messages of bounded size (borrowing the caller's fp32 memory, or
// narrowed to the wire dtype), and the Messages (call_engine.h) of the Push
// and Pull RPCs, whose answers are written straight into the caller's
// tensor buffers.
//
// Thread-safe: const after construction (the Session it uses is
// thread-safe).
#ifndef PS_WORKER_CLIENT_DENSE_CODEC_H_
#define PS_WORKER_CLIENT_DENSE_CODEC_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/call_engine.h"
#include "worker/client/chunk_compression.h"
#include "worker/client/parameter_client.h"
#include "worker/client/session.h"
#include "worker/client/ticket.h"

namespace ps::client {

struct DenseCodecOptions {
  DType wire_dtype = FLOAT32;
  int64_t max_request_bytes = 4 << 20;
  bool chunks_final = true;  // ParameterClientOptions::chunks_final
};

// Per shard, its messages; per message, its chunks.
using ShardMessages = std::vector<std::vector<std::vector<ChunkOut>>>;

// One push message to `shard` (counted in `end`) that asks back the weights
// of `ask_ids` (none: the version only) when `ask` is set, into `tensors`
// (counted in `pull`, which the caller has Add()ed one for it and one per
// group of `more`: pulls started once the push is answered).
struct PushAndPull {
  int shard = 0;
  std::vector<ChunkOut> chunks;
  int64_t clock = 0;
  int64_t base_version = 0;
  // The message is part of an EndStepAndPull (and ends the step).
  bool end_of_step_call = false;
  // It is the last of its shard's part of an EndStepAndPull: its answer
  // sets the shard's pulled version.
  bool last = false;
  bool ask = false;
  std::vector<int64_t> ask_ids;
  std::vector<std::vector<int64_t>> more;
  int64_t next_clock = 0;
  int64_t min_version = 0;
  std::vector<absl::Span<float>> tensors;
  std::shared_ptr<TicketState> end;
  std::shared_ptr<TicketState> pull;
};

class DenseCodec {
 public:
  // `compressor` (not owned, may be null: dense pushes) compresses every
  // chunk Split sends (chunk_compression.h).
  DenseCodec(const Placement& placement, const DenseCodecOptions& options,
             Session* session, ChunkCompressor* compressor = nullptr);

  const Placement& placement() const { return placement_; }

  // `ids` in order, cut into groups of at most max_request_bytes of weights
  // on the wire (a bigger chunk makes a group of its own).
  std::vector<std::vector<int64_t>> CutIntoGroups(
      const std::vector<int64_t>& ids) const;
  // Per shard, its chunks cut into groups as above; a shard without chunks
  // has one empty group (it still answers, and its version counts).
  const std::vector<std::vector<std::vector<int64_t>>>& pull_groups() const {
    return pull_groups_;
  }

  // Checks the buffers pulls write into (`what` names the call).
  absl::Status CheckTensors(
      absl::string_view what,
      const std::vector<absl::Span<float>>& tensors) const;

  // Each shard's messages (chunk lists of at most max_request_bytes) for
  // `grads`; borrows fp32 gradient memory (with a compressor: each chunk's
  // top-k entries, in slices of their own, and its residual updated, once
  // per call: retries resend the same messages). spread > 1: also cuts each
  // shard's part into about `spread` messages (whole chunks), so that one
  // step's bytes use every connection. INVALID_ARGUMENT (naming `what`)
  // for a tensor or a part that does not match the placement.
  absl::StatusOr<ShardMessages> Split(absl::string_view what,
                                      const std::vector<TensorGrad>& grads,
                                      int spread = 1) const;

  // The Pull of one group of a shard's chunks into `tensors`; its answer
  // lowers `ticket`'s version and min clock and sets the shard's pulled
  // version.
  std::unique_ptr<Message> PullMessage(
      const std::shared_ptr<TicketState>& ticket, int shard,
      const std::vector<int64_t>& group, int64_t clock, int64_t min_version,
      const std::vector<absl::Span<float>>& tensors) const;

  // A push of `chunks` to `shard`, taking its next sequence number now.
  std::unique_ptr<Message> PushMessage(
      const std::shared_ptr<TicketState>& ticket, int shard,
      std::vector<ChunkOut> chunks, int64_t clock, int64_t base_version,
      bool end_of_step) const;

  // A push whose answer may carry weights (PushAndPull), taking its shard's
  // next sequence number now. Once it ends, the pulls it did not bring
  // (`more`, or its own when the server answered a plain push) are sent
  // through `engine`; its error fails them.
  std::unique_ptr<Message> PushAndPullMessage(PushAndPull args,
                                              CallEngine* engine) const;

 private:
  // The header of a push to `shard`, taking its next sequence number.
  PushRequest PushHeader(int shard, int64_t clock, int64_t base_version,
                         bool end_of_step) const;

  // Wire bytes of a push of chunk `c`.
  int64_t PushBytes(const Chunk& c) const;

  const Placement placement_;
  const DenseCodecOptions options_;
  Session* const session_;
  ChunkCompressor* const compressor_;
  std::vector<std::vector<int64_t>> tensor_chunks_;  // ids, by offset
  std::vector<std::vector<std::vector<int64_t>>> pull_groups_;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_DENSE_CODEC_H_
