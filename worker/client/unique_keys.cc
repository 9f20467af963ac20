#include "worker/client/unique_keys.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/wire/key_placement.h"

namespace ps::client {
namespace {

// Not the placement's hash: the keys of one shard share the top bits of
// Mix64(key ^ table salt), so the table indexes with the low bits of Mix64
// under a salt of its own.
constexpr uint64_t kTableSalt = 0x9E3779B97F4A7C15ull;

absl::Status CheckRows(absl::string_view what, absl::Span<const int32_t> inv,
                       int dim, size_t per_position, size_t unique_floats) {
  if (dim < 1 || per_position != inv.size() * static_cast<size_t>(dim) ||
      unique_floats % static_cast<size_t>(dim) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", per_position, " floats for ", inv.size(), " positions and ",
        unique_floats, " for the unique keys at dim ", dim));
  }
  const int64_t num_unique = static_cast<int64_t>(unique_floats / dim);
  for (size_t i = 0; i < inv.size(); ++i) {
    if (inv[i] < 0 || inv[i] >= num_unique) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": inverse[", i, "] = ", inv[i], " for ",
                       num_unique, " unique keys"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void KeyDeduplicator::Deduplicate(absl::Span<const uint64_t> keys,
                                  UniqueKeys* out) {
  assert(keys.size() < (size_t{1} << 31));
  const size_t n = keys.size();
  // At most half full, so that probes stay short.
  size_t capacity = 16;
  while (capacity < 2 * n) capacity *= 2;
  table_.assign(capacity, Slot{0, -1});
  const uint64_t mask = capacity - 1;
  out->keys.clear();
  out->keys.reserve(n);
  out->inverse.resize(n);
  out->shard_begin.clear();
  Slot* const table = table_.data();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = keys[i];
    uint64_t h = Mix64(key ^ kTableSalt) & mask;
    for (;;) {
      Slot& slot = table[h];
      if (slot.index < 0) {
        slot.key = key;
        slot.index = static_cast<int32_t>(out->keys.size());
        out->keys.push_back(key);
        break;
      }
      if (slot.key == key) break;
      h = (h + 1) & mask;
    }
    out->inverse[i] = table[h].index;
  }
}

void KeyDeduplicator::DeduplicateByShard(absl::Span<const uint64_t> keys,
                                         uint64_t table_salt, int num_shards,
                                         UniqueKeys* out) {
  Deduplicate(keys, out);
  const size_t u = out->keys.size();
  out->shard_begin.assign(num_shards + 1, 0);
  if (num_shards == 1) {
    out->shard_begin[1] = static_cast<int64_t>(u);
    return;
  }
  shards_.resize(u);
  KeyShards(table_salt, num_shards, out->keys, absl::MakeSpan(shards_));
  // A counting sort by shard, stable within a shard.
  for (int32_t s : shards_) ++out->shard_begin[s + 1];
  for (int s = 0; s < num_shards; ++s) {
    out->shard_begin[s + 1] += out->shard_begin[s];
  }
  moved_.resize(u);
  grouped_.resize(u);
  std::vector<int64_t> next(out->shard_begin.begin(),
                            out->shard_begin.end() - 1);
  for (size_t j = 0; j < u; ++j) {
    const int64_t to = next[shards_[j]]++;
    moved_[j] = static_cast<int32_t>(to);
    grouped_[to] = out->keys[j];
  }
  out->keys.swap(grouped_);
  for (int32_t& inv : out->inverse) inv = moved_[inv];
}

absl::Status SumRowsByInverse(absl::Span<const int32_t> inverse, int dim,
                              absl::Span<const float> grads,
                              absl::Span<float> out) {
  absl::Status s =
      CheckRows("SumRowsByInverse", inverse, dim, grads.size(), out.size());
  if (!s.ok()) return s;
  std::fill(out.begin(), out.end(), 0.0f);
  const size_t d = static_cast<size_t>(dim);
  for (size_t i = 0; i < inverse.size(); ++i) {
    const float* __restrict g = grads.data() + i * d;
    float* __restrict o = out.data() + static_cast<size_t>(inverse[i]) * d;
    for (size_t k = 0; k < d; ++k) o[k] += g[k];
  }
  return absl::OkStatus();
}

absl::Status GatherRowsByInverse(absl::Span<const int32_t> inverse, int dim,
                                 absl::Span<const float> rows,
                                 absl::Span<float> out) {
  absl::Status s =
      CheckRows("GatherRowsByInverse", inverse, dim, out.size(), rows.size());
  if (!s.ok()) return s;
  const size_t d = static_cast<size_t>(dim);
  for (size_t i = 0; i < inverse.size(); ++i) {
    std::memcpy(out.data() + i * d,
                rows.data() + static_cast<size_t>(inverse[i]) * d,
                d * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace ps::client
