#include "common/wire/sparse_rows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ps {
namespace {

absl::string_view Bytes(const void* p, size_t n) {
  return absl::string_view(static_cast<const char*>(p), n);
}

TEST(SparseRows, PushRulesAcceptAValidPush) {
  const std::vector<uint64_t> keys = {5, 1, 9};
  const std::vector<float> rows(6, 1.0f);
  std::vector<SparseRowsView> sparse(2);
  for (int t = 0; t < 2; ++t) {
    sparse[t] = {t, FLOAT32, 3, 2, keys, Bytes(rows.data(), 24)};
  }
  std::vector<uint64_t> scratch;
  EXPECT_TRUE(CheckSparseRows(sparse, SparseRowsUse::kPush, 2, &scratch).ok());
  // The same rows with no keys are an answer's, not a push's.
  EXPECT_FALSE(
      CheckSparseRows(sparse, SparseRowsUse::kAnswer, 2, &scratch).ok());
}

TEST(SparseRows, RefusesWhatEachMessageMustNotHold) {
  const std::vector<uint64_t> keys = {5, 1, 9};
  const std::vector<uint64_t> repeated = {5, 1, 5};
  const std::vector<float> rows(6, 1.0f);
  const absl::string_view r = Bytes(rows.data(), 24);
  struct Case {
    const char* name;
    std::vector<SparseRowsView> sparse;
    SparseRowsUse use;
    const char* message;  // a part of the error
  };
  const std::vector<Case> cases = {
      {"duplicate key in a push",
       {{0, FLOAT32, 3, 2, repeated, r}},
       SparseRowsUse::kPush,
       "key 5 appears more than once"},
      {"two SparseRows of one table in a push",
       {{1, FLOAT32, 3, 2, keys, r}, {1, FLOAT32, 3, 2, keys, r}},
       SparseRowsUse::kPush,
       "more than one SparseRows"},
      {"push without rows",
       {{0, FLOAT32, 3, 2, keys, {}}},
       SparseRowsUse::kPush,
       "a push needs rows"},
      {"push without keys",
       {{0, FLOAT32, 3, 2, {}, r}},
       SparseRowsUse::kPush,
       "a push needs keys"},
      {"pull request with rows",
       {{0, FLOAT32, 3, 2, keys, r}},
       SparseRowsUse::kPullRequest,
       "a pull request carries no rows"},
      {"answer with keys",
       {{0, FLOAT32, 3, 2, keys, r}},
       SparseRowsUse::kAnswer,
       "an answer carries no keys"},
      {"table out of range",
       {{2, FLOAT32, 3, 2, keys, r}},
       SparseRowsUse::kPush,
       "no such table"},
      {"negative table",
       {{-1, FLOAT32, 3, 0, keys, {}}},
       SparseRowsUse::kPullRequest,
       "no such table"},
      {"answer of dim 0",
       {{0, FLOAT32, 3, 0, {}, r}},
       SparseRowsUse::kAnswer,
       "dim 0 must be at least 1"},
  };
  std::vector<uint64_t> scratch;
  for (const Case& c : cases) {
    const absl::Status s = CheckSparseRows(c.sparse, c.use, 2, &scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos)
        << c.name << ": " << s.message();
  }
}

TEST(SparseRows, FindsADuplicateKeyInAnyOrder) {
  const std::vector<float> rows(4096 * 2, 1.0f);
  const uint64_t kMax = ~uint64_t{0};
  struct Case {
    const char* name;
    std::vector<uint64_t> keys;
    bool duplicate;
  };
  std::vector<Case> cases = {
      {"ascending", {1, 2, 3, 40, kMax}, false},
      {"ascending with a repeat", {1, 2, 2, 3}, true},
      {"descending", {9, 7, 5, 3, 1, 0}, false},
      {"the empty marker twice", {kMax, 3, kMax}, true},
      {"the empty marker once", {kMax, 3, 0}, false},
      {"repeat after the order breaks", {1, 5, 3, 9, 5}, true},
  };
  // Many keys that collide in the set's slots (multiples of a power of two).
  Case many{"4096 colliding keys", {}, false};
  for (uint64_t k = 4096; k > 0; --k) many.keys.push_back(k << 40);
  cases.push_back(many);
  many.name = "4096 colliding keys, the last twice";
  many.keys.back() = many.keys.front();
  many.duplicate = true;
  cases.push_back(many);
  std::vector<uint64_t> scratch;
  for (const Case& c : cases) {
    const SparseRowsView v{0, FLOAT32, static_cast<int64_t>(c.keys.size()),
                           2, c.keys,  Bytes(rows.data(), c.keys.size() * 8)};
    const absl::Status s =
        CheckSparseRows({v}, SparseRowsUse::kPush, 1, &scratch);
    EXPECT_EQ(!s.ok(), c.duplicate) << c.name << ": " << s;
    if (c.duplicate) {
      EXPECT_NE(s.message().find("appears more than once"), std::string::npos)
          << c.name << ": " << s;
    }
  }
}

TEST(SparseRows, PullRequestKeysMayRepeat) {
  const std::vector<uint64_t> keys = {7, 7, 7};
  const std::vector<SparseRowsView> sparse = {{0, FLOAT16, 3, 0, keys, {}},
                                              {0, FLOAT16, 3, 0, keys, {}}};
  std::vector<uint64_t> scratch;
  EXPECT_TRUE(
      CheckSparseRows(sparse, SparseRowsUse::kPullRequest, 1, &scratch).ok());
}

// num_rows rows of `dim` floats, row i holding i; keys 1000 + i.
struct Rows {
  Rows(int64_t n, int32_t dim) : keys(n), values(n * dim) {
    for (int64_t i = 0; i < n; ++i) {
      keys[i] = 1000 + i;
      for (int32_t j = 0; j < dim; ++j) values[i * dim + j] = i;
    }
    out.table = 3;
    out.dtype = FLOAT32;
    out.num_rows = n;
    out.dim = dim;
    out.keys = grpc::Slice(keys.data(), keys.size() * 8);
    out.rows = grpc::Slice(values.data(), values.size() * 4);
  }
  std::vector<uint64_t> keys;
  std::vector<float> values;
  SparseRowsOut out;
};

TEST(SparseRows, SplitsIntoPiecesThatFitInOrder) {
  Rows rows(1000, 16);  // 72 bytes a row with its key
  const size_t max_bytes = kSparseRowsOverhead + 72 * 300 + 10;
  absl::StatusOr<std::vector<SparseRowsOut>> pieces =
      SplitSparseRows(rows.out, max_bytes);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 4u);
  int64_t next = 0;
  for (const SparseRowsOut& p : *pieces) {
    EXPECT_EQ(p.table, 3);
    EXPECT_EQ(p.dtype, FLOAT32);
    EXPECT_EQ(p.dim, 16);
    EXPECT_LE(SparseRowsWireSize(p.num_rows, p.dim, p.dtype, true, true),
              max_bytes);
    ASSERT_EQ(p.keys.size(), 8 * static_cast<size_t>(p.num_rows));
    ASSERT_EQ(p.rows.size(), 64 * static_cast<size_t>(p.num_rows));
    for (int64_t i = 0; i < p.num_rows; ++i) {
      uint64_t key;
      float value;
      std::memcpy(&key, p.keys.begin() + 8 * i, 8);
      std::memcpy(&value, p.rows.begin() + 64 * i + 60, 4);
      EXPECT_EQ(key, static_cast<uint64_t>(1000 + next));
      EXPECT_EQ(value, static_cast<float>(next));
      ++next;
    }
  }
  EXPECT_EQ(next, 1000);
  EXPECT_EQ((*pieces)[0].num_rows, 300);
  EXPECT_EQ((*pieces)[3].num_rows, 100);
}

TEST(SparseRows, SplitsKeysOnlyAndSmallSetsWhole) {
  Rows rows(100, 4);
  SparseRowsOut keys_only = rows.out;
  keys_only.rows = grpc::Slice();
  absl::StatusOr<std::vector<SparseRowsOut>> pieces =
      SplitSparseRows(keys_only, kSparseRowsOverhead + 8 * 30);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 4u);
  EXPECT_EQ((*pieces)[3].num_rows, 10);
  EXPECT_EQ((*pieces)[3].rows.size(), 0u);

  pieces = SplitSparseRows(rows.out, 1 << 20);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 1u);
  EXPECT_EQ((*pieces)[0].num_rows, 100);
  EXPECT_EQ((*pieces)[0].rows.size(), rows.out.rows.size());

  SparseRowsOut empty;
  empty.dim = 4;
  pieces = SplitSparseRows(empty, 100);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 1u);
  EXPECT_EQ((*pieces)[0].num_rows, 0);
}

TEST(SparseRows, SplitRefusesInconsistentSizesAndRowsThatCannotFit) {
  Rows rows(10, 4);
  EXPECT_EQ(SplitSparseRows(rows.out, kSparseRowsOverhead + 23).status().code(),
            absl::StatusCode::kInvalidArgument);
  SparseRowsOut wrong = rows.out;
  wrong.num_rows = 11;
  EXPECT_EQ(SplitSparseRows(wrong, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  wrong = rows.out;
  wrong.dtype = FLOAT16;  // the rows hold 4 x 4 bytes a row, not 4 x 2
  EXPECT_EQ(SplitSparseRows(wrong, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  wrong = rows.out;
  wrong.dim = -1;
  EXPECT_EQ(SplitSparseRows(wrong, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
