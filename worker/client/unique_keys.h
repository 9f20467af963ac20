// The unique keys of a batch of sparse features, and the inverse index that
// takes the model from each of the batch's key positions to its unique key.
// A step pulls and pushes one row per unique key (the shards refuse a push
// with a duplicate key), so the model reads row inverse[i] for position i
// (GatherRowsByInverse) and sums the gradients of the positions that share
// a key before the push (SumRowsByInverse).
//
// Deduplication is hash-based (open addressing over a table the
// deduplicator keeps between calls), O(n) in the batch's keys.
// DeduplicateByShard also groups the unique keys by their shard
// (common/wire/key_placement.h): each shard's keys and rows are then contiguous
// runs of the caller's buffers, which the parameter client sends and fills
// in place (worker/client/parameter_client.h, PullRows / PushRows).
#ifndef PS_WORKER_CLIENT_UNIQUE_KEYS_H_
#define PS_WORKER_CLIENT_UNIQUE_KEYS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps::client {

struct UniqueKeys {
  // Each key of the batch once: in order of first appearance, or grouped by
  // shard (shard ascending, first appearance within a shard).
  std::vector<uint64_t> keys;
  // Per position of the batch, the index of its key in `keys`.
  std::vector<int32_t> inverse;
  // DeduplicateByShard: shard s's keys are keys[shard_begin[s],
  // shard_begin[s + 1]) (num_shards + 1 offsets). Deduplicate: empty.
  std::vector<int64_t> shard_begin;
};

// Reusable: its hash table and scratch buffers grow to the largest batch
// and are kept, so that a training loop does not allocate per step (the
// same goes for the UniqueKeys it fills, whose vectors are reused).
// Not thread-safe: one per thread.
class KeyDeduplicator {
 public:
  // Fills `out` (replacing what it held) with the unique keys of `keys` in
  // order of first appearance and the inverse index. At most 2^31 - 1 keys.
  void Deduplicate(absl::Span<const uint64_t> keys, UniqueKeys* out);

  // The same with the unique keys grouped by their shard among
  // `num_shards` (in [1, kMaxKeyShards]) in the table with `table_salt`
  // (common/wire/key_placement.h, TableSalt), and out->shard_begin set.
  void DeduplicateByShard(absl::Span<const uint64_t> keys, uint64_t table_salt,
                          int num_shards, UniqueKeys* out);

 private:
  struct Slot {
    uint64_t key;
    int32_t index;  // into UniqueKeys::keys; -1: empty
  };
  std::vector<Slot> table_;
  std::vector<int32_t> shards_;  // per unique key (DeduplicateByShard)
  std::vector<int32_t> moved_;   // per unique key: its grouped position
  std::vector<uint64_t> grouped_;
};

// out[j] = the sum of grads[i] over the positions i with inverse[i] == j:
// `grads` holds inverse.size() rows of `dim` floats, `out` the unique keys'
// rows (num_unique x dim floats, overwritten). INVALID_ARGUMENT when the
// sizes disagree or an index is out of range.
absl::Status SumRowsByInverse(absl::Span<const int32_t> inverse, int dim,
                              absl::Span<const float> grads,
                              absl::Span<float> out);

// out[i] = rows[inverse[i]]: `rows` holds the unique keys' rows (num_unique
// x dim floats), `out` inverse.size() rows. INVALID_ARGUMENT as above.
absl::Status GatherRowsByInverse(absl::Span<const int32_t> inverse, int dim,
                                 absl::Span<const float> rows,
                                 absl::Span<float> out);

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_UNIQUE_KEYS_H_
