// The rows of one sparse table on one shard: uint64 key -> a row of `dim`
// fp32 weights followed by its optimizer slots (num_slots x dim floats) and a
// small header (RowMeta), all in one record of a per-stripe slab.
//
// Layout and memory. Keys are spread over stripes by a hash of their own
// (not key_placement's: a shard's keys share its top bits). A stripe has a
// mutex, an index (absl::flat_hash_map key -> record number: 16 bytes a slot
// plus a control byte, at a load of 7/16 to 7/8) and pages of 64 KiB of
// records of 24 + 4 x dim x (1 + num_slots) bytes; freed records are reused.
// So a row costs its weights and slots, 24 bytes of header and about 20-40
// bytes of index (sparse_table_benchmark measures it at 10^6 rows). The
// index's array (once 2 MiB or more: it is touched all over as it fills)
// and the record pages past a table's first 2 MiB are on huge pages where
// the kernel allows (huge_pages.h: a random row visit would otherwise miss
// the TLB too). The stripes share the 2 MiB blocks their pages come from,
// so at most one block per table is partly used (up to 2 MiB resident
// ahead of its rows).
//
// Capacity and eviction (SparseTableSpec): with NONE and TTL a table-wide
// count holds the rows plus the rows that calls in flight have reserved, so
// a call that needs more rows than are left fails whole (RESOURCE_EXHAUSTED
// naming the table and shard) before it changes anything. TTL expires rows
// not touched for ttl_versions versions from the tail of each stripe's
// recency list whenever a call visits the stripe (so an idle stripe keeps
// its expired rows until visited), and at capacity a TTL table first
// expires in every stripe, then fails as NONE. LRU splits the capacity over the
// stripes (ceil(capacity / stripes) each; fewer stripes for small capacities,
// one below 2048 rows, so that LRU is exact there) and a new row evicts the
// least recently touched row of its stripe: LRU per stripe, which approaches
// the table-wide order as stripes hold many rows.
//
// Thread safety: every method is thread-safe. Calls on keys of different
// stripes run in parallel; a call locks one stripe at a time, in ascending
// order, and runs its callbacks under that stripe's lock.
#ifndef PS_SERVER_SHARD_SPARSE_ROW_MAP_H_
#define PS_SERVER_SHARD_SPARSE_ROW_MAP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"
#include "server/shard/huge_pages.h"

namespace ps::server {

struct SparseRowMapOptions {
  std::string table_name;  // for errors
  int shard_index = 0;     // for errors
  int dim = 1;
  int num_slots = 0;
  int64_t capacity = 0;  // rows; 0: unbounded
  SparseTableSpec::Eviction eviction = SparseTableSpec::NONE;
  int64_t ttl_versions = 0;
};

// The header of a row's record.
// 24 bytes.
struct RowMeta {
  uint64_t key = 0;
  // The version of its last pull or push (saturating at 2^32 - 1).
  uint32_t touched = 0;
  uint32_t steps = 0;  // optimizer updates (lazy Adam's step count)
  uint32_t prev = 0;   // the stripe's recency list (LRU, TTL)
  uint32_t next = 0;
};
static_assert(sizeof(RowMeta) == 24);

// A row as callbacks see it: `values` is dim weights then the slots.
struct RowRef {
  float* values = nullptr;
  RowMeta* meta = nullptr;
};

class SparseRowMap {
 public:
  // Rows reserved for a later ForRows (NONE and TTL with a capacity): what
  // that call does not use, and the whole reservation when it never runs,
  // goes back when this is destroyed.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept {
      Release();
      map_ = other.map_;
      rows_ = other.rows_;
      other.map_ = nullptr;
      other.rows_ = 0;
      return *this;
    }
    ~Reservation() { Release(); }

   private:
    friend class SparseRowMap;
    void Release();
    SparseRowMap* map_ = nullptr;
    int64_t rows_ = 0;
  };

  explicit SparseRowMap(const SparseRowMapOptions& options);
  ~SparseRowMap();
  SparseRowMap(const SparseRowMap&) = delete;
  SparseRowMap& operator=(const SparseRowMap&) = delete;

  // Which of `num_parts` (a power of two, at most 64) parts `key` is in:
  // keys of different parts are in different stripes, so ForRows calls on
  // keys of different parts lock different stripes (when the map has at
  // least num_parts stripes; LRU tables of small capacities have fewer).
  static int PartOf(uint64_t key, int num_parts);

  // Floats per row: dim x (1 + num_slots).
  int row_floats() const { return row_floats_; }

  // Calls fn(i, row) for every keys[i] (keys may repeat), stripe by stripe,
  // each under its stripe's lock, marking the rows touched at `version`. A
  // missing key gets a new row written by init(key, values) first when
  // `create`; otherwise fn gets a RowRef with null pointers. With `create`,
  // RESOURCE_EXHAUSTED if the rows would not fit the capacity (NONE, TTL),
  // and then nothing is created or called.
  // With `reservation` (from Reserve for the same keys), the rows come out
  // of it and the call does not fail. Non-empty `admit`: only keys[i] with
  // admit[i] may get a new row (an admission filter's verdict).
  absl::Status ForRows(
      absl::Span<const uint64_t> keys, int64_t version, bool create,
      absl::FunctionRef<void(uint64_t key, float* values)> init,
      absl::FunctionRef<void(size_t i, RowRef row)> fn,
      Reservation* reservation = nullptr, absl::Span<const uint8_t> admit = {});

  // NONE and TTL with a capacity: reserves the rows that ForRows(keys,
  // version, create) would create (expiring TTL rows first), or
  // RESOURCE_EXHAUSTED naming the table and shard. Otherwise an empty
  // reservation.
  absl::StatusOr<Reservation> Reserve(absl::Span<const uint64_t> keys,
                                      int64_t version,
                                      absl::Span<const uint8_t> admit = {});

  // Calls fn(row) for every row, stripe by stripe under its lock; with
  // LRU or TTL each stripe's rows least recently touched first, so that
  // Put in this order remakes the same recency.
  void ForEachRow(absl::FunctionRef<void(const RowMeta& meta,
                                         absl::Span<const float> values)>
                      fn) const;

  // Inserts or overwrites the row of meta.key with `values` (row_floats()),
  // its step count and touched version (a restore), as ForRows would
  // (RESOURCE_EXHAUSTED at capacity, an LRU eviction).
  absl::Status Put(const RowMeta& meta, absl::Span<const float> values);

  // Removes every row. No other call may run meanwhile (a restore).
  void Clear();

  int64_t rows() const { return rows_.load(std::memory_order_relaxed); }
  int64_t evictions() const {
    return evictions_.load(std::memory_order_relaxed);
  }
  // The memory of the rows, their slots, headers, free records and index.
  int64_t bytes() const;

 private:
  struct Stripe;

  // Keys grouped by stripe: keys[order[j]] for j in [start[s], start[s+1])
  // are stripe s's.
  struct Grouping {
    std::vector<uint32_t> start;
    std::vector<uint32_t> order;
  };
  Grouping Group(absl::Span<const uint64_t> keys) const;
  int StripeOf(uint64_t key) const;
  bool Bounded() const;
  // The methods below take a stripe whose lock the caller holds.
  RowMeta* Meta(const Stripe& st, uint32_t r) const;
  float* Values(const Stripe& st, uint32_t r) const;
  // Prefetches record r's cache lines.
  void PrefetchRecord(const Stripe& st, uint32_t r) const;
  // A new row's record for `key` in `st`, indexed and counted (LRU: evicting
  // the stripe's least recently touched row at its capacity; NONE/TTL: out
  // of `reservation` when it has rows left), its header set, its values not.
  uint32_t NewRow(Stripe& st, uint64_t key, Reservation* reservation);
  // Reserves `n` more rows against the capacity, or fails.
  absl::Status ReserveRows(int64_t n);
  // TTL: removes stripe `st`'s rows untouched since version - ttl_versions.
  void Expire(Stripe& st, int64_t version);
  void Unlink(Stripe& st, uint32_t r);
  void PushFront(Stripe& st, uint32_t r);
  void Remove(Stripe& st, uint32_t r);

  const SparseRowMapOptions options_;
  const int row_floats_;
  const size_t record_bytes_;
  const uint32_t records_per_page_;
  const int stripe_bits_;
  // LRU: rows per stripe; 0: unbounded or a table-wide count.
  const int64_t stripe_capacity_;
  HugePagePool page_pool_;  // record pages of every stripe
  std::unique_ptr<Stripe[]> stripes_;
  // Rows held, and NONE/TTL: rows held plus rows reserved by calls in
  // flight (the capacity's count).
  std::atomic<int64_t> rows_{0};
  std::atomic<int64_t> committed_{0};
  std::atomic<int64_t> evictions_{0};
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SPARSE_ROW_MAP_H_
