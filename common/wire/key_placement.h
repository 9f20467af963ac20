// Where a sparse table's rows live: a key's shard is a pure function of
// (table name, key, number of shards), so workers, shards and checkpoint
// restores agree without talking, and a row lands on the same shard whatever
// process asks.
//
// The function, in three steps:
//   salt  = Mix64(FNV-1a-64(table name))
//   slot  = Mix64(key ^ salt) >> 52          (one of kKeySlots = 4096)
//   shard = slot * num_shards / kKeySlots   (contiguous runs of slots)
// Mix64 is SplitMix64's finaliser, a bijection of uint64 in which every input
// bit reaches every output bit, so consecutive, strided or otherwise
// structured keys spread as well as random ones, and each table's keys spread
// independently of the others'. With 4096 slots, the slot counts of any two
// shards differ by at most one (0.2% of a shard's slots at 8 shards); balance
// over keys is then that of the hash (key_placement_test measures uniform and
// Zipf(1.05) keys over 1 to 8 shards).
//
// The slot is fixed for a key whatever the number of shards; only the slots'
// assignment to shards depends on it. Checkpoints hold rows by key, not by
// shard, so a restore onto another number of shards re-places each row with
// KeyShard.
//
// Shards keep their rows in hash tables of their own: those must hash keys
// with another function (absl::Hash, or Mix64 of a different salt), since
// the keys of one shard share the top bits of Mix64(key ^ salt).
//
// Changing anything here moves rows between shards and breaks restores of
// existing checkpoints onto other shard counts: key_placement_test pins
// values.
#ifndef PS_COMMON_WIRE_KEY_PLACEMENT_H_
#define PS_COMMON_WIRE_KEY_PLACEMENT_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

inline constexpr int kKeySlotBits = 12;
inline constexpr int kKeySlots = 1 << kKeySlotBits;  // 4096
// A job may not have more shards than slots (a shard would own no slot).
inline constexpr int kMaxKeyShards = kKeySlots;

// SplitMix64's finaliser: a bijection with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The table's salt: Mix64 of the FNV-1a hash of its name (stable across
// platforms, builds and runs, unlike std::hash). Compute once per table.
uint64_t TableSalt(absl::string_view table_name);

// The key's virtual slot, in [0, kKeySlots).
inline int KeySlot(uint64_t table_salt, uint64_t key) {
  return static_cast<int>(Mix64(key ^ table_salt) >> (64 - kKeySlotBits));
}

// The shard that owns `slot`, for num_shards in [1, kMaxKeyShards]: shard s
// owns the slots [ceil(s * kKeySlots / n), ceil((s + 1) * kKeySlots / n)).
inline int SlotShard(int slot, int num_shards) {
  return static_cast<int>((static_cast<int64_t>(slot) * num_shards) >>
                          kKeySlotBits);
}

// The shard of `key` in the table with `table_salt`, for num_shards in
// [1, kMaxKeyShards].
inline int KeyShard(uint64_t table_salt, uint64_t key, int num_shards) {
  return SlotShard(KeySlot(table_salt, key), num_shards);
}

// KeyShard of the table named `table_name` (hashes the name each call).
int KeyShard(absl::string_view table_name, uint64_t key, int num_shards);

// The batch form: shards[i] = KeyShard(table_salt, keys[i], num_shards).
// `shards` holds keys.size() entries; num_shards in [1, kMaxKeyShards].
void KeyShards(uint64_t table_salt, int num_shards,
               absl::Span<const uint64_t> keys, absl::Span<int32_t> shards);

}  // namespace ps

#endif  // PS_COMMON_WIRE_KEY_PLACEMENT_H_
