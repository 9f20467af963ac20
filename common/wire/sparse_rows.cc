#include "common/wire/sparse_rows.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status Violation(const SparseRowsView& s, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("sparse rows of table ", s.table, ": ", what));
}

absl::string_view UseName(SparseRowsUse use) {
  switch (use) {
    case SparseRowsUse::kPush:
      return "a push";
    case SparseRowsUse::kPullRequest:
      return "a pull request";
    case SparseRowsUse::kAnswer:
      return "an answer";
  }
  return "a message";
}

// A key of `keys` that appears more than once, or none. Keys already in
// ascending order (a sorting client's) take one pass; others go through an
// open-addressing set in `scratch` (linear probing, at most half full), O(n)
// where a sort was O(n log n), with the empty slot's marker tracked aside.
std::optional<uint64_t> FindDuplicate(absl::Span<const uint64_t> keys,
                                      std::vector<uint64_t>* scratch) {
  if (keys.size() < 2) return std::nullopt;
  const auto unsorted = std::adjacent_find(
      keys.begin(), keys.end(), [](uint64_t a, uint64_t b) { return a >= b; });
  if (unsorted == keys.end()) return std::nullopt;
  if (*unsorted == *(unsorted + 1)) return *unsorted;
  constexpr uint64_t kEmpty = ~uint64_t{0};
  int bits = 1;
  while ((size_t{1} << bits) < 2 * keys.size()) ++bits;
  const size_t mask = (size_t{1} << bits) - 1;
  scratch->assign(mask + 1, kEmpty);
  bool seen_empty = false;
  for (uint64_t key : keys) {
    if (key == kEmpty) {
      if (seen_empty) return key;
      seen_empty = true;
      continue;
    }
    // Fibonacci hashing: the top bits of the product.
    size_t at =
        static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
    while (true) {
      uint64_t& slot = (*scratch)[at];
      if (slot == kEmpty) {
        slot = key;
        break;
      }
      if (slot == key) return key;
      at = (at + 1) & mask;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::Status CheckSparseRows(absl::Span<const SparseRowsView> sparse,
                             SparseRowsUse use, int num_tables,
                             std::vector<uint64_t>* scratch) {
  const bool need_keys = use != SparseRowsUse::kAnswer;
  const bool need_rows = use != SparseRowsUse::kPullRequest;
  for (size_t i = 0; i < sparse.size(); ++i) {
    const SparseRowsView& s = sparse[i];
    if (s.table < 0 || s.table >= num_tables) {
      return Violation(
          s, absl::StrCat("no such table (the model has ", num_tables, ")"));
    }
    // The decoder let an absent field pass; here it must be there (or not).
    const bool has_keys = !s.keys.empty();
    const bool has_rows = !s.rows.empty();
    if (s.num_rows > 0 && need_keys != has_keys) {
      return Violation(
          s, absl::StrCat(UseName(use), need_keys ? " needs" : " carries no",
                          " keys"));
    }
    if (s.num_rows > 0 && need_rows != has_rows) {
      return Violation(
          s, absl::StrCat(UseName(use), need_rows ? " needs" : " carries no",
                          " rows"));
    }
    if (need_rows && s.num_rows > 0 && s.dim < 1) {
      return Violation(s, absl::StrCat("dim ", s.dim, " must be at least 1"));
    }
    if (use != SparseRowsUse::kPush) continue;
    for (size_t j = 0; j < i; ++j) {
      if (sparse[j].table == s.table) {
        return Violation(s, "more than one SparseRows for the table in a push");
      }
    }
    if (const std::optional<uint64_t> dup = FindDuplicate(s.keys, scratch);
        dup.has_value()) {
      return Violation(
          s, absl::StrCat("key ", *dup,
                          " appears more than once in a push (sum its "
                          "gradients first)"));
    }
  }
  return absl::OkStatus();
}

size_t SparseRowsWireSize(int64_t num_rows, int32_t dim, DType dtype,
                          bool with_keys, bool with_rows) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(num_rows, 0));
  size_t bytes = kSparseRowsOverhead;
  if (with_keys) bytes += 8 * n;
  if (with_rows) {
    bytes += n * static_cast<size_t>(std::max(dim, 0)) *
             static_cast<size_t>(DTypeSize(dtype));
  }
  return bytes;
}

absl::StatusOr<std::vector<SparseRowsOut>> SplitSparseRows(
    const SparseRowsOut& rows, size_t max_bytes) {
  const auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "splitting sparse rows of table ", rows.table, ": ", what));
  };
  const size_t elem = static_cast<size_t>(DTypeSize(rows.dtype));
  if (rows.num_rows < 0 || rows.dim < 0 || elem == 0) {
    return fail(absl::StrCat("num_rows ", rows.num_rows, ", dim ", rows.dim,
                             ", dtype ", static_cast<int>(rows.dtype)));
  }
  const size_t n = static_cast<size_t>(rows.num_rows);
  const bool with_keys = rows.keys.size() > 0;
  const bool with_rows = rows.rows.size() > 0;
  const size_t row_bytes = static_cast<size_t>(rows.dim) * elem;
  if (with_keys && rows.keys.size() != 8 * n) {
    return fail(
        absl::StrCat(rows.keys.size(), " bytes of keys for ", n, " rows"));
  }
  if (with_rows && rows.rows.size() != n * row_bytes) {
    return fail(absl::StrCat(rows.rows.size(), " bytes of rows for ", n,
                             " rows of ", row_bytes, " bytes"));
  }
  if (n == 0) return std::vector<SparseRowsOut>{rows};
  const size_t per_row = (with_keys ? 8 : 0) + (with_rows ? row_bytes : 0);
  if (max_bytes < kSparseRowsOverhead + std::max<size_t>(per_row, 1)) {
    return fail(absl::StrCat("one row (", per_row, " bytes and ",
                             kSparseRowsOverhead, " of overhead) exceeds ",
                             max_bytes, " bytes"));
  }
  // A piece of rows without keys or rows (num_rows only) fits any count.
  const size_t fit =
      per_row == 0 ? n : (max_bytes - kSparseRowsOverhead) / per_row;
  std::vector<SparseRowsOut> pieces;
  pieces.reserve((n + fit - 1) / fit);
  for (size_t begin = 0; begin < n; begin += fit) {
    const size_t count = std::min(fit, n - begin);
    SparseRowsOut& p = pieces.emplace_back();
    p.table = rows.table;
    p.dtype = rows.dtype;
    p.num_rows = static_cast<int64_t>(count);
    p.dim = rows.dim;
    if (with_keys) p.keys = rows.keys.sub(8 * begin, 8 * (begin + count));
    if (with_rows) {
      p.rows = rows.rows.sub(row_bytes * begin, row_bytes * (begin + count));
    }
  }
  return pieces;
}

}  // namespace ps
