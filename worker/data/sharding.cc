#include "worker/data/sharding.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "worker/data/random.h"

namespace ps::worker {

using data::SplitMix64;

std::vector<int64_t> EpochPermutation(int64_t num_examples, int64_t epoch,
                                      uint64_t seed) {
  std::vector<int64_t> order(std::max<int64_t>(num_examples, 0));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Mix the epoch in through one SplitMix64 step so that nearby (seed, epoch)
  // pairs start far apart.
  SplitMix64 rng(SplitMix64(seed).Next() ^ static_cast<uint64_t>(epoch));
  for (int64_t i = num_examples - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

absl::StatusOr<std::vector<int64_t>> ShardIndices(int64_t num_examples,
                                                  int64_t epoch, uint64_t seed,
                                                  absl::Span<const int> shards,
                                                  int num_shards) {
  if (num_examples < 0 || epoch < 0 || num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad sharding: num_examples ", num_examples, ", epoch ",
                     epoch, ", num_shards ", num_shards));
  }
  std::vector<int> sorted(shards.begin(), shards.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= num_shards ||
        (i > 0 && sorted[i] == sorted[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad data shard list [", absl::StrJoin(shards, ", "), "] for ",
          num_shards, " shards: ids must be distinct and in [0, ", num_shards,
          ")"));
    }
  }
  const std::vector<int64_t> order =
      EpochPermutation(num_examples, epoch, seed);
  std::vector<int64_t> indices;
  for (int shard : sorted) {
    // num_examples * shard fits easily: datasets are far below 2^40 examples
    // and shard ids far below 2^23.
    const int64_t begin = num_examples * shard / num_shards;
    const int64_t end = num_examples * (shard + 1) / num_shards;
    indices.insert(indices.end(), order.begin() + begin, order.begin() + end);
  }
  return indices;
}

}  // namespace ps::worker
