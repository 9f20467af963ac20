#include "server/shard/sparse_row_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace ps::server {
namespace {

SparseRowMapOptions Options(
    int64_t capacity = 0,
    SparseTableSpec::Eviction eviction = SparseTableSpec::NONE,
    int64_t ttl = 0) {
  SparseRowMapOptions o;
  o.table_name = "emb";
  o.shard_index = 3;
  o.dim = 2;
  o.num_slots = 1;
  o.capacity = capacity;
  o.eviction = eviction;
  o.ttl_versions = ttl;
  return o;
}

// Rows start as (key, key, -1, -1) (weights, then the slot).
void Init(uint64_t key, float* v) {
  v[0] = v[1] = static_cast<float>(key);
  v[2] = v[3] = -1.0f;
}

// Adds `delta` to the first weight of each of `keys`'s rows.
absl::Status Touch(SparseRowMap& map, std::vector<uint64_t> keys,
                   int64_t version, float delta = 0.0f) {
  return map.ForRows(keys, version, /*create=*/true, Init,
                     [&](size_t, RowRef row) { row.values[0] += delta; });
}

// The first weight of `key`'s row, or -1 if it has none (nothing created).
float Peek(SparseRowMap& map, uint64_t key) {
  float out = -1.0f;
  const uint64_t keys[] = {key};
  EXPECT_TRUE(map.ForRows(keys, 0, /*create=*/false, Init,
                          [&](size_t, RowRef row) {
                            if (row.values != nullptr) out = row.values[0];
                          })
                  .ok());
  return out;
}

TEST(SparseRowMap, CreatesOnFirstTouchAndKeepsState) {
  SparseRowMap map(Options());
  EXPECT_EQ(map.row_floats(), 4);
  ASSERT_TRUE(Touch(map, {5, 7, 5}, 1, 1.0f).ok());  // 5 twice: +2
  EXPECT_EQ(map.rows(), 2);
  EXPECT_EQ(Peek(map, 5), 7.0f);
  EXPECT_EQ(Peek(map, 7), 8.0f);
  EXPECT_EQ(Peek(map, 9), -1.0f);
  EXPECT_EQ(map.rows(), 2);
  EXPECT_GT(map.bytes(), 0);
  // Every row, once, with its header.
  std::vector<uint64_t> seen;
  map.ForEachRow([&](const RowMeta& m, absl::Span<const float> v) {
    seen.push_back(m.key);
    EXPECT_EQ(v.size(), 4u);
    EXPECT_EQ(m.touched, 1);
  });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<uint64_t>{5, 7}));
}

TEST(SparseRowMap, CapacityWithoutEvictionFailsWholeNamingTableAndShard) {
  SparseRowMap map(Options(3));
  ASSERT_TRUE(Touch(map, {1, 2}, 0, 1.0f).ok());
  absl::Status s = Touch(map, {1, 3, 4}, 0, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("'emb'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("shard 3"), std::string::npos) << s;
  // Nothing changed: not even the existing row 1.
  EXPECT_EQ(Peek(map, 1), 2.0f);
  EXPECT_EQ(Peek(map, 3), -1.0f);
  EXPECT_EQ(map.rows(), 2);
  // One more fits; a reservation not used goes back.
  {
    const std::vector<uint64_t> keys = {9};
    absl::StatusOr<SparseRowMap::Reservation> r = map.Reserve(keys, 0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(Touch(map, {10}, 0).code(), absl::StatusCode::kResourceExhausted);
  }
  ASSERT_TRUE(Touch(map, {3}, 0).ok());
  EXPECT_EQ(map.rows(), 3);
}

TEST(SparseRowMap, LruEvictsTheLeastRecentlyTouched) {
  SparseRowMap map(Options(3, SparseTableSpec::LRU));
  ASSERT_TRUE(Touch(map, {1, 2, 3}, 0, 1.0f).ok());
  ASSERT_TRUE(Touch(map, {1}, 1).ok());  // 2 is now the oldest
  ASSERT_TRUE(Touch(map, {4}, 2).ok());
  EXPECT_EQ(map.rows(), 3);
  EXPECT_EQ(map.evictions(), 1);
  EXPECT_EQ(Peek(map, 2), -1.0f);
  EXPECT_EQ(Peek(map, 1), 2.0f);  // kept its update
  // An evicted key starts again from the initializer.
  ASSERT_TRUE(Touch(map, {2}, 3).ok());
  EXPECT_EQ(Peek(map, 2), 2.0f);
  EXPECT_EQ(Peek(map, 3), -1.0f);
}

TEST(SparseRowMap, TtlExpiresUntouchedRows) {
  SparseRowMap map(Options(0, SparseTableSpec::TTL, 5));
  ASSERT_TRUE(Touch(map, {1}, 0).ok());
  ASSERT_TRUE(Touch(map, {2}, 3).ok());
  // Rows expire as their stripes are visited: visit all of them at 5.
  std::vector<uint64_t> many;
  for (uint64_t k = 100; k < 1100; ++k) many.push_back(k);
  ASSERT_TRUE(Touch(map, many, 5).ok());
  EXPECT_EQ(Peek(map, 1), -1.0f);  // touched at 0: 0 + 5 <= 5
  EXPECT_EQ(Peek(map, 2), 2.0f);
  EXPECT_EQ(map.evictions(), 1);
}

TEST(SparseRowMap, TtlAtCapacityExpiresFirstThenFailsAsNone) {
  SparseRowMap map(Options(2, SparseTableSpec::TTL, 10));
  ASSERT_TRUE(Touch(map, {1, 2}, 0).ok());
  EXPECT_EQ(Touch(map, {3}, 5).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(Touch(map, {3}, 10).ok());  // both expired
  EXPECT_EQ(map.rows(), 1);
}

TEST(SparseRowMap, PutAndClear) {
  SparseRowMap map(Options());
  RowMeta meta;
  meta.key = 42;
  meta.steps = 7;
  meta.touched = 9;
  const std::vector<float> values = {1, 2, 3, 4};
  ASSERT_TRUE(map.Put(meta, values).ok());
  map.ForEachRow([&](const RowMeta& m, absl::Span<const float> v) {
    EXPECT_EQ(m.key, 42u);
    EXPECT_EQ(m.steps, 7u);
    EXPECT_EQ(std::vector<float>(v.begin(), v.end()), values);
  });
  map.Clear();
  EXPECT_EQ(map.rows(), 0);
  EXPECT_EQ(Peek(map, 42), -1.0f);
}

TEST(SparseRowMap, StripePastTwoMiBKeepsEveryRow) {
  // One stripe (LRU below 2048 rows) of 8 KiB records: past the table's
  // first 2 MiB its pages come from huge-page blocks; rows on both kinds
  // keep their values, and evictions reuse records across them.
  SparseRowMapOptions o = Options(2000, SparseTableSpec::LRU);
  o.dim = 512;
  o.num_slots = 3;
  SparseRowMap map(o);
  auto init = [&](uint64_t key, float* v) {
    for (int k = 0; k < map.row_floats(); ++k) v[k] = key + 0.5f * k;
  };
  std::vector<uint64_t> keys(2600);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + i;
  ASSERT_TRUE(
      map.ForRows(keys, 1, /*create=*/true, init, [](size_t, RowRef) {}).ok());
  EXPECT_EQ(map.rows(), 2000);
  EXPECT_EQ(map.evictions(), 600);
  EXPECT_GE(map.bytes(), int64_t{2000} * map.row_floats() * 4);
  int64_t seen = 0, wrong = 0;
  map.ForEachRow([&](const RowMeta& meta, absl::Span<const float> v) {
    ++seen;
    EXPECT_GE(meta.key, 1600u);  // the last 2000 touched
    for (int k = 0; k < map.row_floats(); ++k) {
      if (v[k] != meta.key + 0.5f * k) ++wrong;
    }
  });
  EXPECT_EQ(seen, 2000);
  EXPECT_EQ(wrong, 0);
  map.Clear();
  EXPECT_EQ(map.rows(), 0);
  EXPECT_LT(map.bytes(), 64 << 10);  // pages and blocks gone
}

TEST(SparseRowMap, ConcurrentUpdatesOfSharedAndOwnKeys) {
  SparseRowMap map(Options());
  constexpr int kThreads = 8, kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::vector<uint64_t> keys = {0, 1, 2, 1000 + uint64_t(t)};
        EXPECT_TRUE(Touch(map, keys, r, 1.0f).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(Peek(map, 0), 0.0f + kThreads * kRounds);
  EXPECT_EQ(Peek(map, 2), 2.0f + kThreads * kRounds);
  EXPECT_EQ(Peek(map, 1003), 1003.0f + kRounds);
  EXPECT_EQ(map.rows(), 3 + kThreads);
}

}  // namespace
}  // namespace ps::server
