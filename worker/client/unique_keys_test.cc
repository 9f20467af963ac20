#include "worker/client/unique_keys.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "common/wire/key_placement.h"

namespace ps::client {
namespace {

// Every position maps to its own key, and each unique key appears once.
void ExpectConsistent(const std::vector<uint64_t>& keys, const UniqueKeys& u) {
  ASSERT_EQ(u.inverse.size(), keys.size());
  std::unordered_map<uint64_t, int> seen;
  for (size_t j = 0; j < u.keys.size(); ++j) {
    EXPECT_TRUE(seen.emplace(u.keys[j], static_cast<int>(j)).second)
        << "key " << u.keys[j] << " twice";
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_GE(u.inverse[i], 0);
    ASSERT_LT(u.inverse[i], static_cast<int32_t>(u.keys.size()));
    EXPECT_EQ(u.keys[u.inverse[i]], keys[i]) << "position " << i;
  }
  std::unordered_map<uint64_t, int> distinct;
  for (uint64_t k : keys) ++distinct[k];
  EXPECT_EQ(u.keys.size(), distinct.size());
}

TEST(UniqueKeys, FirstAppearanceOrderAndInverse) {
  KeyDeduplicator dedup;
  UniqueKeys u;
  const std::vector<uint64_t> keys = {7, 3, 7, 0, ~0ull, 3, 3, 42};
  dedup.Deduplicate(keys, &u);
  EXPECT_EQ(u.keys, (std::vector<uint64_t>{7, 3, 0, ~0ull, 42}));
  EXPECT_EQ(u.inverse, (std::vector<int32_t>{0, 1, 0, 2, 3, 1, 1, 4}));
  EXPECT_TRUE(u.shard_begin.empty());
}

TEST(UniqueKeys, EmptyAndReusedAcrossBatches) {
  KeyDeduplicator dedup;
  UniqueKeys u;
  dedup.Deduplicate({}, &u);
  EXPECT_TRUE(u.keys.empty());
  EXPECT_TRUE(u.inverse.empty());
  std::mt19937_64 rng(5);
  // Batches of shrinking and growing sizes through one deduplicator: nothing
  // of an earlier batch leaks into a later one.
  for (int n : {5000, 10, 70000, 1, 3000}) {
    std::vector<uint64_t> keys(n);
    for (uint64_t& k : keys) k = rng() % (n / 2 + 1);
    dedup.Deduplicate(keys, &u);
    ExpectConsistent(keys, u);
  }
}

// Keys that collide in the low bits (multiples of a big power of two) still
// come apart.
TEST(UniqueKeys, StructuredKeys) {
  KeyDeduplicator dedup;
  UniqueKeys u;
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 4096; ++i) keys.push_back(i << 40);
  for (uint64_t i = 0; i < 4096; ++i) keys.push_back((4095 - i) << 40);
  dedup.Deduplicate(keys, &u);
  ExpectConsistent(keys, u);
  EXPECT_EQ(u.keys.size(), 4096u);
}

TEST(UniqueKeys, GroupedByShard) {
  KeyDeduplicator dedup;
  UniqueKeys u;
  const uint64_t salt = TableSalt("emb");
  std::mt19937_64 rng(9);
  for (int shards : {1, 2, 3, 8}) {
    std::vector<uint64_t> keys(20000);
    for (uint64_t& k : keys) k = rng() % 5000;
    dedup.DeduplicateByShard(keys, salt, shards, &u);
    ExpectConsistent(keys, u);
    ASSERT_EQ(u.shard_begin.size(), static_cast<size_t>(shards + 1));
    EXPECT_EQ(u.shard_begin.front(), 0);
    EXPECT_EQ(u.shard_begin.back(), static_cast<int64_t>(u.keys.size()));
    for (int s = 0; s < shards; ++s) {
      ASSERT_LE(u.shard_begin[s], u.shard_begin[s + 1]);
      for (int64_t j = u.shard_begin[s]; j < u.shard_begin[s + 1]; ++j) {
        ASSERT_EQ(KeyShard(salt, u.keys[j], shards), s) << "key " << u.keys[j];
      }
    }
  }
}

// Within a shard the keys keep their order of first appearance.
TEST(UniqueKeys, GroupingIsStable) {
  KeyDeduplicator dedup;
  UniqueKeys plain, grouped;
  std::vector<uint64_t> keys;
  for (uint64_t k = 100; k > 0; --k) keys.push_back(k * 977);
  const uint64_t salt = TableSalt("t");
  dedup.Deduplicate(keys, &plain);
  dedup.DeduplicateByShard(keys, salt, 3, &grouped);
  for (int s = 0; s < 3; ++s) {
    std::vector<uint64_t> expected;
    for (uint64_t k : plain.keys) {
      if (KeyShard(salt, k, 3) == s) expected.push_back(k);
    }
    std::vector<uint64_t> got(
        grouped.keys.begin() + grouped.shard_begin[s],
        grouped.keys.begin() + grouped.shard_begin[s + 1]);
    EXPECT_EQ(got, expected) << "shard " << s;
  }
}

TEST(UniqueKeys, SumAndGatherRows) {
  const std::vector<int32_t> inverse = {1, 0, 1, 2, 1};
  const std::vector<float> grads = {1, 2, 10, 20, 3, 4, 100, 200, 5, 6};
  std::vector<float> sum(6, -1.0f);
  ASSERT_TRUE(SumRowsByInverse(inverse, 2, grads, absl::MakeSpan(sum)).ok());
  EXPECT_EQ(sum, (std::vector<float>{10, 20, 9, 12, 100, 200}));
  std::vector<float> rows(10);
  ASSERT_TRUE(GatherRowsByInverse(inverse, 2, sum, absl::MakeSpan(rows)).ok());
  EXPECT_EQ(rows, (std::vector<float>{9, 12, 10, 20, 9, 12, 100, 200, 9, 12}));
}

TEST(UniqueKeys, SumAndGatherRefuseBadSizes) {
  const std::vector<int32_t> inverse = {0, 1, 3};
  std::vector<float> three(6), two(4), four(8);
  EXPECT_TRUE(absl::IsInvalidArgument(
      SumRowsByInverse(inverse, 2, two, absl::MakeSpan(four))));
  // inverse[2] = 3 is past three unique keys.
  EXPECT_TRUE(absl::IsInvalidArgument(
      SumRowsByInverse(inverse, 2, three, absl::MakeSpan(three))));
  EXPECT_TRUE(SumRowsByInverse(inverse, 2, three, absl::MakeSpan(four)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      GatherRowsByInverse(inverse, 0, four, absl::MakeSpan(three))));
  EXPECT_TRUE(absl::IsInvalidArgument(
      GatherRowsByInverse(inverse, 2, three, absl::MakeSpan(three))));
  EXPECT_TRUE(
      GatherRowsByInverse(inverse, 2, four, absl::MakeSpan(three)).ok());
}

}  // namespace
}  // namespace ps::client
