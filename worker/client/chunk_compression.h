// Top-k compression of a job's dense gradients as the parameter client
// sends them (JobSpec.compression TOPK): each placement chunk's gradient
// plus its residual goes as its `ratio` share of largest entries, a sparse
// update of the chunk (ChunkPayload.indices: uint32 offsets, values in the
// wire dtype), and the rest stays in the residual (topk_compression.h).
// Per chunk, not per tensor, so that every shard and every message gets
// its share and a part of a tensor (TensorGrad offset) compresses alone.
//
// Error feedback: what is sent is what leaves the residual, so over the
// steps the entries a worker sent plus its residual add up to its
// gradients (in fp32; with an fp16/bf16 wire, the rounding of sent values
// is not fed back). A push the shards drop (a BSP backup's, too stale
// under ASP) loses its sent entries, as it would lose a dense gradient.
// The residual lives as long as the compressor: the parameter client of
// one assignment, so a rollback (a new incarnation, a new client) starts
// from zero.
//
// Thread-safe: one lock around each chunk's compression (pushes of one
// step come from one training thread; the lock only guards the scratch).
#ifndef PS_WORKER_CLIENT_CHUNK_COMPRESSION_H_
#define PS_WORKER_CLIENT_CHUNK_COMPRESSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/topk_compression.h"

namespace ps::client {

// What a client's compressed pushes sent, cumulative. Thread-safe.
struct CompressionCounters {
  std::atomic<int64_t> dense_elements{0};  // elements of the chunks pushed
  std::atomic<int64_t> sent_elements{0};   // of which sent
  // The chunks' bytes dense in the wire dtype, and the bytes sent (indices
  // and values).
  std::atomic<int64_t> dense_bytes{0};
  std::atomic<int64_t> sent_bytes{0};
};

// The counters as metric points, for the worker's training reports:
// "topk_sent_fraction", the elements sent per dense gradient element pushed
// since the previous call (0 without pushes), and "topk_saved_mb", the
// bytes the compressed pushes did not send (dense bytes in the wire dtype
// minus indices and values) since the counters began, in MB (10^6 bytes).
// Thread-compatible; `counters` must outlive it.
class CompressionReport {
 public:
  explicit CompressionReport(const CompressionCounters* counters)
      : counters_(counters) {}
  std::vector<std::pair<std::string, double>> Points();

 private:
  const CompressionCounters* const counters_;
  int64_t dense_ = 0, sent_ = 0;  // at the previous call
};

class ChunkCompressor {
 public:
  // A residual per chunk of `placement`; `ratio` in (0, 1]; values travel
  // as `wire_dtype`. Counts into `counters` (may be null; must outlive the
  // compressor). INVALID_ARGUMENT for a ratio out of range, a chunk of
  // no elements or of more than 2^32.
  static absl::StatusOr<std::unique_ptr<ChunkCompressor>> Create(
      const Placement& placement, double ratio, DType wire_dtype,
      CompressionCounters* counters);

  // The sparse payload of `grad`, the whole gradient of chunk `chunk_id`:
  // out->num_elements, ->indices and ->data (gRPC-owned slices written
  // here; the gradient is not referenced afterwards); chunk_id and dtype
  // are set too. INVALID_ARGUMENT for an unknown chunk or a wrong size.
  absl::Status Compress(int64_t chunk_id, absl::Span<const float> grad,
                        ChunkOut* out);

  // Elements sent per push of chunk `chunk_id`.
  int64_t k(int64_t chunk_id) const;

  // The residuals, for tests.
  std::vector<float> Residual(int64_t chunk_id) const;

  // Zeroes every residual.
  void Reset();

 private:
  ChunkCompressor(TopKCompressor topk, DType wire_dtype,
                  CompressionCounters* counters)
      : wire_dtype_(wire_dtype), counters_(counters), topk_(std::move(topk)) {}

  const DType wire_dtype_;
  CompressionCounters* const counters_;
  mutable absl::Mutex mu_;
  TopKCompressor topk_ ABSL_GUARDED_BY(mu_);  // one "tensor" per chunk id
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_CHUNK_COMPRESSION_H_
