// The buffers a call to the parameter servers hands over: a tensor's
// gradient (or a part of it), rows of a sparse table to pull, and row
// gradients to push. Spans into the caller's memory: they stay valid (and
// unchanged, for gradients) until the call that took them is over.
#ifndef PS_WORKER_CLIENT_BUFFERS_H_
#define PS_WORKER_CLIENT_BUFFERS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ps::client {

// One tensor's gradient: all of it (placement.tensor_elements[tensor_index]
// floats), or with `offset` the elements [offset, offset + grad.size()),
// which must be whole chunks (start at a chunk's start, end at a chunk's
// end: ChunkBoundaries).
struct TensorGrad {
  int tensor_index = 0;
  absl::Span<const float> grad;
  int64_t offset = 0;
};

// Rows of sparse table `table` (ParameterClientOptions::sparse_tables) to
// pull: `keys` (unique ones: the shards answer repeated keys too, but the
// bytes are wasted) and `rows`, keys.size() x dim floats that receive row i
// of key i. Keys grouped by shard (KeyDeduplicator::DeduplicateByShard) are
// sent from the caller's memory and their rows written in place; other
// orders cost a gather of the keys.
struct SparsePull {
  int table = 0;
  absl::Span<const uint64_t> keys;
  absl::Span<float> rows;
};

// The gradients of sparse table `table`'s rows: `keys` unique (a push with
// a repeated key is refused by the shard, INVALID_ARGUMENT: sum a batch's
// gradients per key first, SumRowsByInverse in unique_keys.h) and `grads`,
// keys.size() x dim floats. With keys grouped by shard and an fp32 table,
// both are sent from the caller's memory without a copy.
struct SparsePush {
  int table = 0;
  absl::Span<const uint64_t> keys;
  absl::Span<const float> grads;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_BUFFERS_H_
