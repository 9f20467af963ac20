// Which examples a worker trains on in an epoch. Every worker computes the
// same per-epoch permutation of the dataset from (seed, epoch), cuts it into
// `num_shards` contiguous slices, and takes the slices of the data shards it
// owns. So shards are disjoint and cover the epoch without any communication,
// and when the coordinator hands an evicted worker's shard to a survivor, the
// survivor simply owns two shard ids.
//
// The permutation is our own Fisher-Yates over SplitMix64 (not std::shuffle
// or absl::BitGen, whose sequences may differ between library versions), so
// it is the same in every build on every machine.
#ifndef PS_WORKER_DATA_SHARDING_H_
#define PS_WORKER_DATA_SHARDING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps::worker {

// A permutation of [0, num_examples), a pure function of its arguments.
// Different epochs give (with overwhelming probability) different orders.
std::vector<int64_t> EpochPermutation(int64_t num_examples, int64_t epoch,
                                      uint64_t seed);

// The examples of data shards `shards` (out of `num_shards`) in `epoch`:
// shard s is positions [s * n / num_shards, (s + 1) * n / num_shards) of
// EpochPermutation, so shard sizes differ by at most one. Several shards are
// returned in permutation order (as if sorted by shard id), whatever the
// order of `shards`. INVALID_ARGUMENT for num_examples < 0, num_shards < 1,
// epoch < 0, or a shard id out of range or repeated (these come from the
// coordinator, so they are checked rather than trusted).
absl::StatusOr<std::vector<int64_t>> ShardIndices(int64_t num_examples,
                                                  int64_t epoch, uint64_t seed,
                                                  absl::Span<const int> shards,
                                                  int num_shards);

}  // namespace ps::worker

#endif  // PS_WORKER_DATA_SHARDING_H_
