// Top-k sparsification of dense gradients with error feedback (Deep
// Gradient Compression; BytePS's compressors): of each tensor's gradient
// plus the residual it carries, only the k entries of largest magnitude
// are sent; the rest stays in the residual and is added to the next
// step's gradient, so nothing is lost, only delayed. The unit that chooses
// what is sent; chunk_compression.h runs it per placement chunk for the
// parameter client (JobSpec.compression), whose pushes carry the entries
// as a sparse update of the dense tensor (ChunkPayload.indices).
#ifndef PS_WORKER_CLIENT_TOPK_COMPRESSION_H_
#define PS_WORKER_CLIENT_TOPK_COMPRESSION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps::client {

// One tensor's compressed gradient: element offsets (ascending) and their
// values.
struct SparseGradient {
  std::vector<int64_t> indices;
  std::vector<float> values;
};

// Per tensor, the residual of what was not sent. Thread-compatible.
class TopKCompressor {
 public:
  // `tensor_sizes`: elements per tensor, in model order; `ratio`: the
  // fraction of each tensor's elements sent, in (0, 1] (at least one
  // element a tensor). INVALID_ARGUMENT otherwise.
  static absl::StatusOr<TopKCompressor> Create(
      std::vector<int64_t> tensor_sizes, double ratio);

  // The entries of `grad` + residual of tensor `index` with the k largest
  // magnitudes (ties: the lower offset); the residual keeps the rest and
  // loses what is sent. INVALID_ARGUMENT for a bad index or size. A
  // non-finite value is sent at once (it must reach the shard, which
  // refuses the push, rather than hide in the residual).
  absl::StatusOr<SparseGradient> Compress(int index,
                                          absl::Span<const float> grad);

  // Elements sent per call for tensor `index`.
  int64_t k(int index) const { return k_[index]; }
  const std::vector<float>& residual(int index) const {
    return residual_[index];
  }
  // Zeroes every residual (after a rollback: the gradients it held were
  // computed on weights that no longer exist).
  void Reset();

 private:
  TopKCompressor(std::vector<int64_t> k, std::vector<std::vector<float>> r)
      : k_(std::move(k)), residual_(std::move(r)) {}

  std::vector<int64_t> k_;
  std::vector<std::vector<float>> residual_;
  std::vector<int64_t> order_;  // scratch
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_TOPK_COMPRESSION_H_
