#include "worker/client/chunk_compression.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::client {

absl::StatusOr<std::unique_ptr<ChunkCompressor>> ChunkCompressor::Create(
    const Placement& placement, double ratio, DType wire_dtype,
    CompressionCounters* counters) {
  if (DTypeSize(wire_dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top-k compression: unknown wire dtype ",
                     static_cast<int>(wire_dtype)));
  }
  std::vector<int64_t> sizes;
  sizes.reserve(placement.chunks.size());
  for (const Chunk& c : placement.chunks) {
    if (c.num_elements > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "top-k compression: chunk ", c.chunk_id, " has ", c.num_elements,
          " elements, more than uint32 offsets "
          "address"));
    }
    sizes.push_back(c.num_elements);
  }
  PS_ASSIGN_OR_RETURN(TopKCompressor topk,
                      TopKCompressor::Create(std::move(sizes), ratio));
  return std::unique_ptr<ChunkCompressor>(
      new ChunkCompressor(std::move(topk), wire_dtype, counters));
}

absl::Status ChunkCompressor::Compress(int64_t chunk_id,
                                       absl::Span<const float> grad,
                                       ChunkOut* out) {
  SparseGradient sparse;
  {
    absl::MutexLock l(&mu_);
    if (chunk_id < 0 || chunk_id > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("top-k compression: no chunk ", chunk_id));
    }
    PS_ASSIGN_OR_RETURN(sparse,
                        topk_.Compress(static_cast<int>(chunk_id), grad));
  }
  const size_t k = sparse.indices.size();
  const int size = DTypeSize(wire_dtype_);
  out->chunk_id = chunk_id;
  out->dtype = wire_dtype_;
  out->num_elements = static_cast<int64_t>(k);
  char* indices = nullptr;
  out->indices = AllocateSlice(k * sizeof(uint32_t), &indices);
  for (size_t i = 0; i < k; ++i) {
    const uint32_t at = static_cast<uint32_t>(sparse.indices[i]);
    std::memcpy(indices + 4 * i, &at, sizeof(at));
  }
  char* values = nullptr;
  out->data = AllocateSlice(k * size, &values);
  NarrowFromFloat(wire_dtype_, sparse.values, values);
  if (counters_ != nullptr) {
    counters_->dense_elements += static_cast<int64_t>(grad.size());
    counters_->sent_elements += static_cast<int64_t>(k);
    counters_->dense_bytes += static_cast<int64_t>(grad.size()) * size;
    counters_->sent_bytes += static_cast<int64_t>(k) * (4 + size);
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, double>> CompressionReport::Points() {
  const int64_t dense = counters_->dense_elements.load();
  const int64_t sent = counters_->sent_elements.load();
  const double fraction =
      dense > dense_ ? static_cast<double>(sent - sent_) / (dense - dense_)
                     : 0.0;
  dense_ = dense;
  sent_ = sent;
  const double saved =
      static_cast<double>(counters_->dense_bytes - counters_->sent_bytes) / 1e6;
  return {{"topk_sent_fraction", fraction}, {"topk_saved_mb", saved}};
}

int64_t ChunkCompressor::k(int64_t chunk_id) const {
  absl::MutexLock l(&mu_);
  return topk_.k(static_cast<int>(chunk_id));
}

std::vector<float> ChunkCompressor::Residual(int64_t chunk_id) const {
  absl::MutexLock l(&mu_);
  return topk_.residual(static_cast<int>(chunk_id));
}

void ChunkCompressor::Reset() {
  absl::MutexLock l(&mu_);
  topk_.Reset();
}

}  // namespace ps::client
