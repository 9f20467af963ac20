#include "common/wire/key_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

namespace ps {
namespace {

// Largest relative deviation of a shard's row count from the mean.
double Imbalance(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const double mean = static_cast<double>(total) / counts.size();
  double worst = 0;
  for (int64_t c : counts) worst = std::max(worst, std::fabs(c / mean - 1));
  return worst;
}

std::vector<int64_t> RowsPerShard(absl::string_view table,
                                  const std::vector<uint64_t>& keys,
                                  int num_shards) {
  std::vector<int32_t> shards(keys.size());
  KeyShards(TableSalt(table), num_shards, keys, absl::MakeSpan(shards));
  std::vector<int64_t> counts(num_shards, 0);
  for (int32_t s : shards) ++counts[s];
  return counts;
}

// Zipf(s) over [1, n] by inverting the continuous power law's CDF: close
// enough to the discrete law for a balance test (heavy head, long tail).
class Zipf {
 public:
  Zipf(double s, double n) : s_(s), a_(std::pow(n, 1 - s) - 1) {}
  uint64_t operator()(std::mt19937_64& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<uint64_t>(std::pow(a_ * u + 1, 1 / (1 - s_)));
  }

 private:
  double s_, a_;
};

TEST(KeyPlacement, SlotsAreSpreadEvenly) {
  for (int n : {1, 2, 3, 5, 7, 8, 100, 1000, kMaxKeyShards}) {
    std::vector<int> slots(n, 0);
    for (int slot = 0; slot < kKeySlots; ++slot) {
      const int shard = SlotShard(slot, n);
      ASSERT_GE(shard, 0);
      ASSERT_LT(shard, n);
      ++slots[shard];
    }
    const auto [lo, hi] = std::minmax_element(slots.begin(), slots.end());
    EXPECT_LE(*hi - *lo, 1) << n << " shards";
    EXPECT_GE(*lo, 1) << n << " shards";
  }
}

TEST(KeyPlacement, UniformAndSequentialKeysBalance) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> random(1 << 20), sequential(1 << 20), strided(1 << 20);
  for (size_t i = 0; i < random.size(); ++i) {
    random[i] = rng();
    sequential[i] = i;
    strided[i] = i << 32;  // only high bits vary
  }
  for (int n = 1; n <= 8; ++n) {
    EXPECT_LT(Imbalance(RowsPerShard("emb", random, n)), 0.02) << n;
    EXPECT_LT(Imbalance(RowsPerShard("emb", sequential, n)), 0.02) << n;
    EXPECT_LT(Imbalance(RowsPerShard("emb", strided, n)), 0.02) << n;
  }
}

// As the sparse benchmark draws them: batches of 4096 unique keys, Zipf(1.05)
// over 10^7 ids. The rows a shard serves per batch are its unique keys.
// About 45% of the rows are head keys that recur in (nearly) every batch, so
// their one random split over the shards repeats in every batch: that split
// dominates the imbalance of the rows (3-4% at 8 shards over 50 table names,
// at most 4.3%: a property of the key stream, not of the hash). The distinct
// keys balance as uniform ones do.
TEST(KeyPlacement, ZipfBatchesOfUniqueKeysBalance) {
  std::mt19937_64 rng(11);
  Zipf zipf(1.05, 1e7);
  std::vector<uint64_t> rows;  // the unique keys of every batch, appended
  std::unordered_set<uint64_t> distinct;
  for (int batch = 0; batch < 64; ++batch) {
    std::unordered_set<uint64_t> unique;
    while (unique.size() < 4096) unique.insert(zipf(rng));
    rows.insert(rows.end(), unique.begin(), unique.end());
    distinct.insert(unique.begin(), unique.end());
  }
  const std::vector<uint64_t> all(distinct.begin(), distinct.end());
  for (int n = 1; n <= 8; ++n) {
    EXPECT_LT(Imbalance(RowsPerShard("emb", rows, n)), 0.05) << n;
    EXPECT_LT(Imbalance(RowsPerShard("user", rows, n)), 0.05) << n;
    EXPECT_LT(Imbalance(RowsPerShard("emb", all, n)), 0.02) << n;
  }
}

TEST(KeyPlacement, TablesArePlacedIndependently) {
  std::vector<uint64_t> keys(1 << 18);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  const uint64_t a = TableSalt("user"), b = TableSalt("item");
  int64_t same = 0;
  for (uint64_t k : keys) same += KeyShard(a, k, 4) == KeyShard(b, k, 4);
  EXPECT_NEAR(static_cast<double>(same) / keys.size(), 0.25, 0.01);
}

// The function is part of the checkpoint format: these values must not
// change. They also show it depends on its arguments only (no seed, no
// process state).
TEST(KeyPlacement, PinnedValues) {
  EXPECT_EQ(TableSalt(""), Mix64(0xcbf29ce484222325ull));
  struct Case {
    const char* table;
    uint64_t key;
    int slot;
    int shard3;
  } cases[] = {
      {"emb", 0, 2837, 2},
      {"emb", 1, 74, 0},
      {"emb", 0xffffffffffffffffull, 2493, 1},
      {"user", 42, 2146, 1},
      {"item", 1234567890123ull, 1536, 1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(KeySlot(TableSalt(c.table), c.key), c.slot)
        << c.table << " " << c.key;
    EXPECT_EQ(KeyShard(c.table, c.key, 3), c.shard3) << c.table << " " << c.key;
    EXPECT_EQ(KeyShard(c.table, c.key, 1), 0);
  }
}

TEST(KeyPlacement, BatchScalarAndThreadsAgree) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys(10000);
  for (uint64_t& k : keys) k = rng() >> (rng() % 64);
  const uint64_t salt = TableSalt("emb");
  std::vector<int32_t> batch(keys.size());
  KeyShards(salt, 5, keys, absl::MakeSpan(batch));
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(batch[i], KeyShard(salt, keys[i], 5));
    ASSERT_EQ(batch[i], KeyShard("emb", keys[i], 5));
    ASSERT_EQ(batch[i], SlotShard(KeySlot(salt, keys[i]), 5));
  }
  // The same answers from other threads, in another order.
  std::vector<std::vector<int32_t>> results(4,
                                            std::vector<int32_t>(keys.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t j = 0; j < keys.size(); ++j) {
        const size_t i = keys.size() - 1 - j;
        results[t][i] = KeyShard("emb", keys[i], 5);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, batch);
}

}  // namespace
}  // namespace ps
