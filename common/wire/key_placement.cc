#include "common/wire/key_placement.h"

#include <cassert>
#include <cstddef>

namespace ps {

uint64_t TableSalt(absl::string_view table_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  for (unsigned char c : table_name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return Mix64(h);
}

int KeyShard(absl::string_view table_name, uint64_t key, int num_shards) {
  return KeyShard(TableSalt(table_name), key, num_shards);
}

void KeyShards(uint64_t table_salt, int num_shards,
               absl::Span<const uint64_t> keys, absl::Span<int32_t> shards) {
  assert(shards.size() >= keys.size());
  assert(num_shards >= 1 && num_shards <= kMaxKeyShards);
  const size_t n = keys.size();
  const uint64_t* __restrict k = keys.data();
  int32_t* __restrict out = shards.data();
  for (size_t i = 0; i < n; ++i) {
    out[i] = KeyShard(table_salt, k[i], num_shards);
  }
}

}  // namespace ps
