#include "worker/data/sharding.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> Shard(int64_t n, int64_t epoch, uint64_t seed,
                           std::vector<int> shards, int num_shards) {
  absl::StatusOr<std::vector<int64_t>> indices =
      ShardIndices(n, epoch, seed, shards, num_shards);
  EXPECT_TRUE(indices.ok()) << indices.status();
  return indices.ok() ? *indices : std::vector<int64_t>{};
}

TEST(Sharding, PermutationIsAPermutation) {
  for (int64_t n : {0, 1, 2, 7, 1000, 60000}) {
    std::vector<int64_t> order = EpochPermutation(n, 3, 42);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, Iota(n)) << n;
  }
}

TEST(Sharding, DeterministicForASeedDifferentAcrossEpochsAndSeeds) {
  const std::vector<int64_t> a = EpochPermutation(60000, 0, 7);
  EXPECT_EQ(a, EpochPermutation(60000, 0, 7));
  EXPECT_NE(a, EpochPermutation(60000, 1, 7));
  EXPECT_NE(a, EpochPermutation(60000, 0, 8));
  EXPECT_NE(a, Iota(60000));
}

TEST(Sharding, PermutationIsPinned) {
  // The order must not change between builds or library versions, or a
  // restarted worker would disagree with running ones. Expected values from
  // an independent Python transcription of SplitMix64 + Lemire + Fisher-Yates.
  EXPECT_EQ(EpochPermutation(10, 0, 1),
            (std::vector<int64_t>{6, 4, 7, 2, 9, 1, 5, 0, 8, 3}));
  EXPECT_EQ(EpochPermutation(10, 1, 1),
            (std::vector<int64_t>{4, 3, 0, 8, 2, 5, 1, 7, 6, 9}));
}

TEST(Sharding, ShardsAreDisjointAndCoverTheEpoch) {
  struct Case {
    int64_t num_examples;
    int num_shards;
  };
  const std::vector<Case> cases = {
      {60000, 1}, {60000, 2}, {60000, 3}, {60000, 7},
      {10, 4},    {3, 5},     {0, 2},     {1, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.num_examples << " examples, "
                                    << c.num_shards << " shards");
    for (int64_t epoch : {0, 1, 5}) {
      std::vector<int64_t> all;
      std::set<int64_t> seen;
      size_t smallest = c.num_examples, largest = 0;
      for (int s = 0; s < c.num_shards; ++s) {
        const std::vector<int64_t> shard =
            Shard(c.num_examples, epoch, 99, {s}, c.num_shards);
        smallest = std::min(smallest, shard.size());
        largest = std::max(largest, shard.size());
        for (int64_t id : shard) {
          EXPECT_TRUE(seen.insert(id).second) << "example " << id << " twice";
        }
        all.insert(all.end(), shard.begin(), shard.end());
      }
      EXPECT_LE(largest - smallest, 1u);
      // Concatenated in shard order, the shards are exactly the permutation.
      EXPECT_EQ(all, EpochPermutation(c.num_examples, epoch, 99));
    }
  }
}

TEST(Sharding, ReassignmentAfterAWorkerLeavesStillCovers) {
  // Three workers own shards 0, 1, 2 of 3; worker 1 is evicted and worker 2
  // takes its shard over. The survivors still cover every example once.
  const int64_t n = 60000;
  for (int64_t epoch : {0, 4}) {
    const std::vector<int64_t> w0 = Shard(n, epoch, 5, {0}, 3);
    const std::vector<int64_t> w2 = Shard(n, epoch, 5, {2, 1}, 3);
    EXPECT_EQ(w2.size(), Shard(n, epoch, 5, {1}, 3).size() +
                             Shard(n, epoch, 5, {2}, 3).size());
    std::vector<int64_t> all = w0;
    all.insert(all.end(), w2.begin(), w2.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, Iota(n));
    // The order of the list does not matter.
    EXPECT_EQ(w2, Shard(n, epoch, 5, {1, 2}, 3));
  }
  // Or the coordinator re-cuts the data into two shards.
  std::vector<int64_t> all = Shard(n, 2, 5, {0}, 2);
  const std::vector<int64_t> other = Shard(n, 2, 5, {1}, 2);
  all.insert(all.end(), other.begin(), other.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, Iota(n));
}

TEST(Sharding, RejectsBadArguments) {
  struct Case {
    std::string name;
    int64_t num_examples;
    int64_t epoch;
    std::vector<int> shards;
    int num_shards;
  };
  const std::vector<Case> cases = {
      {"negative_examples", -1, 0, {0}, 1},
      {"negative_epoch", 10, -1, {0}, 1},
      {"no_shards", 10, 0, {0}, 0},
      {"shard_out_of_range", 10, 0, {2}, 2},
      {"negative_shard", 10, 0, {-1}, 2},
      {"repeated_shard", 10, 0, {1, 0, 1}, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::vector<int64_t>> indices =
        ShardIndices(c.num_examples, c.epoch, 1, c.shards, c.num_shards);
    EXPECT_EQ(indices.status().code(), absl::StatusCode::kInvalidArgument);
  }
  // An empty list is valid: a worker with no data this epoch.
  absl::StatusOr<std::vector<int64_t>> none = ShardIndices(10, 0, 1, {}, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace ps::worker
