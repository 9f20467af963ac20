#include "server/shard/sparse_row_map.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/wire/key_placement.h"
#include "server/shard/huge_pages.h"

namespace ps::server {
namespace {

constexpr uint32_t kNone = 0xFFFFFFFFu;
constexpr size_t kPageBytes = 64 << 10;
constexpr int kMaxStripeBits = 6;  // 64 stripes
// LRU: a stripe holds at least this many rows before the capacity is split.
constexpr int64_t kMinLruStripeRows = 2048;
// Stripes hash keys with Mix64 of this salt (key_placement uses the top bits
// of Mix64(key ^ table salt); this one is independent of it).
constexpr uint64_t kStripeSalt = 0x2545F4914F6CDD1Dull;
// ForRows: how many keys ahead of its lookup a key's index slots are
// prefetched.
constexpr uint32_t kIndexAhead = 8;
constexpr size_t kCacheLine = 64;

int StripeBits(const SparseRowMapOptions& o) {
  if (o.eviction != SparseTableSpec::LRU || o.capacity <= 0) {
    return kMaxStripeBits;
  }
  int bits = 0;
  while (bits < kMaxStripeBits &&
         (o.capacity >> (bits + 1)) >= kMinLruStripeRows) {
    ++bits;
  }
  return bits;
}

bool UsesRecency(const SparseRowMapOptions& o) {
  // (LRU's order and TTL's expiry both read the recency list.)
  return o.eviction == SparseTableSpec::LRU ||
         o.eviction == SparseTableSpec::TTL;
}

}  // namespace

struct SparseRowMap::Stripe {
  mutable absl::Mutex mu;
  // (Past 2 MiB its slots are on huge pages: huge_pages.h.)
  absl::flat_hash_map<uint64_t, uint32_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, uint32_t>>>
      index ABSL_GUARDED_BY(mu);
  // Record pages, from the map's pool.
  std::vector<char*> pages ABSL_GUARDED_BY(mu);
  uint32_t next_record ABSL_GUARDED_BY(mu) = 0;  // never handed out above
  std::vector<uint32_t> free ABSL_GUARDED_BY(mu);
  // Recency list (LRU, TTL): most recent at head.
  uint32_t head ABSL_GUARDED_BY(mu) = kNone;
  uint32_t tail ABSL_GUARDED_BY(mu) = kNone;
  int64_t rows ABSL_GUARDED_BY(mu) = 0;
};

RowMeta* SparseRowMap::Meta(const Stripe& st, uint32_t r) const {
  return reinterpret_cast<RowMeta*>(st.pages[r / records_per_page_] +
                                    (r % records_per_page_) * record_bytes_);
}

float* SparseRowMap::Values(const Stripe& st, uint32_t r) const {
  return reinterpret_cast<float*>(reinterpret_cast<char*>(Meta(st, r)) +
                                  sizeof(RowMeta));
}

void SparseRowMap::Reservation::Release() {
  if (map_ != nullptr && rows_ > 0) {
    map_->committed_.fetch_sub(rows_, std::memory_order_relaxed);
  }
  map_ = nullptr;
  rows_ = 0;
}

SparseRowMap::SparseRowMap(const SparseRowMapOptions& options)
    : options_(options),
      row_floats_(options.dim * (1 + options.num_slots)),
      record_bytes_((sizeof(RowMeta) + sizeof(float) * row_floats_ + 7) / 8 *
                    8),
      records_per_page_(static_cast<uint32_t>(
          std::max<size_t>(1, kPageBytes / record_bytes_))),
      stripe_bits_(StripeBits(options)),
      stripe_capacity_(
          options.eviction == SparseTableSpec::LRU && options.capacity > 0
              ? (options.capacity + (1 << stripe_bits_) - 1) >> stripe_bits_
              : 0),
      // Pages from shared huge-page blocks once the table holds 2 MiB.
      page_pool_(records_per_page_ * record_bytes_, kHugePageBytes),
      stripes_(new Stripe[size_t{1} << stripe_bits_]) {}

SparseRowMap::~SparseRowMap() = default;

int SparseRowMap::StripeOf(uint64_t key) const {
  if (stripe_bits_ == 0) return 0;
  return static_cast<int>(Mix64(key ^ kStripeSalt) >> (64 - stripe_bits_));
}

int SparseRowMap::PartOf(uint64_t key, int num_parts) {
  // The top bits of the stripe's hash: a part is a range of stripes.
  if (num_parts <= 1) return 0;
  return static_cast<int>(
      Mix64(key ^ kStripeSalt) >>
      (64 - std::countr_zero(static_cast<unsigned>(num_parts))));
}

bool SparseRowMap::Bounded() const {
  return stripe_capacity_ == 0 && options_.capacity > 0;
}

SparseRowMap::Grouping SparseRowMap::Group(
    absl::Span<const uint64_t> keys) const {
  const int num_stripes = 1 << stripe_bits_;
  Grouping g;
  g.start.assign(num_stripes + 1, 0);
  std::vector<uint8_t> stripe_of(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    stripe_of[i] = static_cast<uint8_t>(StripeOf(keys[i]));
    ++g.start[stripe_of[i] + 1];
  }
  for (int s = 0; s < num_stripes; ++s) g.start[s + 1] += g.start[s];
  g.order.resize(keys.size());
  std::vector<uint32_t> at(g.start.begin(), g.start.end() - 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    g.order[at[stripe_of[i]]++] = static_cast<uint32_t>(i);
  }
  return g;
}

absl::Status SparseRowMap::ReserveRows(int64_t n) {
  if (n == 0) return absl::OkStatus();
  int64_t cur = committed_.load(std::memory_order_relaxed);
  while (true) {
    if (cur + n > options_.capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "sparse table '", options_.table_name, "' is at its capacity of ",
          options_.capacity, " rows on shard ", options_.shard_index, " (",
          rows(), " rows held, ", n,
          " new rows needed) and evicts nothing (eviction ",
          SparseTableSpec::Eviction_Name(options_.eviction),
          "); raise capacity or set eviction LRU or TTL"));
    }
    if (committed_.compare_exchange_weak(cur, cur + n,
                                         std::memory_order_relaxed)) {
      return absl::OkStatus();
    }
  }
}

void SparseRowMap::Unlink(Stripe& st, uint32_t r) {
  RowMeta* m = Meta(st, r);
  if (m->prev != kNone) {
    Meta(st, m->prev)->next = m->next;
  } else {
    st.head = m->next;
  }
  if (m->next != kNone) {
    Meta(st, m->next)->prev = m->prev;
  } else {
    st.tail = m->prev;
  }
}

void SparseRowMap::PushFront(Stripe& st, uint32_t r) {
  RowMeta* m = Meta(st, r);
  m->prev = kNone;
  m->next = st.head;
  if (st.head != kNone) Meta(st, st.head)->prev = r;
  st.head = r;
  if (st.tail == kNone) st.tail = r;
}

void SparseRowMap::Remove(Stripe& st, uint32_t r) {
  if (UsesRecency(options_)) Unlink(st, r);
  st.index.erase(Meta(st, r)->key);
  st.free.push_back(r);
  --st.rows;
  rows_.fetch_sub(1, std::memory_order_relaxed);
  if (stripe_capacity_ == 0) {
    committed_.fetch_sub(1, std::memory_order_relaxed);
  }
  evictions_.fetch_add(1, std::memory_order_relaxed);
}

void SparseRowMap::Expire(Stripe& st, int64_t version) {
  if (options_.eviction != SparseTableSpec::TTL) return;
  while (st.tail != kNone &&
         int64_t{Meta(st, st.tail)->touched} + options_.ttl_versions <=
             version) {
    Remove(st, st.tail);
  }
}

absl::StatusOr<SparseRowMap::Reservation> SparseRowMap::Reserve(
    absl::Span<const uint64_t> keys, int64_t version,
    absl::Span<const uint8_t> admit) {
  Reservation reservation;
  if (!Bounded()) return reservation;
  const Grouping g = Group(keys);
  int64_t missing = 0;
  for (int s = 0; s < (1 << stripe_bits_); ++s) {
    if (g.start[s] == g.start[s + 1]) continue;
    Stripe& st = stripes_[s];
    absl::MutexLock l(&st.mu);
    Expire(st, version);
    for (uint32_t j = g.start[s]; j < g.start[s + 1]; ++j) {
      const uint32_t i = g.order[j];
      if (!st.index.contains(keys[i]) && (admit.empty() || admit[i])) {
        ++missing;
      }
    }
  }
  // Repeated keys (a pull's) count twice: a conservative reservation.
  absl::Status reserved = ReserveRows(missing);
  if (!reserved.ok() && options_.eviction == SparseTableSpec::TTL) {
    // At capacity: expire the stripes this call did not visit too.
    for (int s = 0; s < (1 << stripe_bits_); ++s) {
      Stripe& st = stripes_[s];
      absl::MutexLock l(&st.mu);
      Expire(st, version);
    }
    reserved = ReserveRows(missing);
  }
  if (!reserved.ok()) return reserved;
  reservation.map_ = this;
  reservation.rows_ = missing;
  return reservation;
}

absl::Status SparseRowMap::ForRows(
    absl::Span<const uint64_t> keys, int64_t version, bool create,
    absl::FunctionRef<void(uint64_t key, float* values)> init,
    absl::FunctionRef<void(size_t i, RowRef row)> fn, Reservation* reservation,
    absl::Span<const uint8_t> admit) {
  Reservation own;
  if (create && Bounded() && reservation == nullptr) {
    absl::StatusOr<Reservation> r = Reserve(keys, version, admit);
    if (!r.ok()) return r.status();
    own = *std::move(r);
    reservation = &own;
  }
  const bool recency = UsesRecency(options_);
  const Grouping g = Group(keys);
  // Each visit is a random access into an index and pages of many rows: a
  // stripe's keys are first looked up with the index slots prefetched
  // kIndexAhead keys ahead and each found record prefetched, then visited
  // while those loads are in flight.
  std::vector<uint32_t> found;
  for (int s = 0; s < (1 << stripe_bits_); ++s) {
    const uint32_t begin = g.start[s], end = g.start[s + 1];
    if (begin == end) continue;
    Stripe& st = stripes_[s];
    absl::MutexLock l(&st.mu);
    Expire(st, version);
    found.resize(end - begin);
    for (uint32_t j = begin; j < end; ++j) {
      if (j + kIndexAhead < end)
        st.index.prefetch(keys[g.order[j + kIndexAhead]]);
      auto it = st.index.find(keys[g.order[j]]);
      if (it == st.index.end()) {
        found[j - begin] = kNone;
        continue;
      }
      found[j - begin] = it->second;
      PrefetchRecord(st, it->second);
    }
    // Until this call creates a row in the stripe, what the lookups found
    // holds (a new row may evict one, and keys may repeat).
    bool changed = false;
    for (uint32_t j = begin; j < end; ++j) {
      const size_t i = g.order[j];
      const uint64_t key = keys[i];
      uint32_t r = found[j - begin];
      if (changed) {
        auto it = st.index.find(key);
        r = it == st.index.end() ? kNone : it->second;
      }
      if (r != kNone) {
        if (recency) Unlink(st, r);
      } else if (!create || (!admit.empty() && !admit[i])) {
        fn(i, RowRef{});
        continue;
      } else {
        changed = true;
        r = NewRow(st, key, reservation);
        init(key, Values(st, r));
      }
      RowMeta* m = Meta(st, r);
      m->touched = static_cast<uint32_t>(std::clamp<int64_t>(
          version, m->touched, std::numeric_limits<uint32_t>::max()));
      if (recency) PushFront(st, r);
      fn(i, RowRef{Values(st, r), m});
    }
  }
  return absl::OkStatus();
}

uint32_t SparseRowMap::NewRow(Stripe& st, uint64_t key,
                              Reservation* reservation) {
  if (stripe_capacity_ > 0 && st.rows >= stripe_capacity_) {
    Remove(st, st.tail);  // LRU
  }
  if (stripe_capacity_ == 0) {
    if (reservation != nullptr && reservation->rows_ > 0) {
      --reservation->rows_;  // the count has it already
    } else {
      // Unbounded, or a row expired by another call since the
      // reservation (a bounded table may go one over its capacity).
      committed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  uint32_t r;
  if (!st.free.empty()) {
    r = st.free.back();
    st.free.pop_back();
  } else {
    r = st.next_record++;
    if (r / records_per_page_ >= st.pages.size()) {
      st.pages.push_back(page_pool_.NewPage());
    }
  }
  st.index.emplace(key, r);
  ++st.rows;
  rows_.fetch_add(1, std::memory_order_relaxed);
  RowMeta* m = Meta(st, r);
  *m = RowMeta{};
  m->key = key;
  return r;
}

void SparseRowMap::PrefetchRecord(const Stripe& st, uint32_t r) const {
  const char* p = reinterpret_cast<const char*>(Meta(st, r));
  for (size_t b = 0; b < record_bytes_; b += kCacheLine) {
    __builtin_prefetch(p + b);
  }
  // The record's last line when it straddles one more.
  __builtin_prefetch(p + record_bytes_ - 1);
}

void SparseRowMap::ForEachRow(
    absl::FunctionRef<void(const RowMeta& meta, absl::Span<const float> values)>
        fn) const {
  for (int s = 0; s < (1 << stripe_bits_); ++s) {
    Stripe& st = stripes_[s];
    absl::MutexLock l(&st.mu);
    if (UsesRecency(options_)) {
      // Oldest first: Put in this order makes the same recency list.
      for (uint32_t r = st.tail; r != kNone; r = Meta(st, r)->prev) {
        fn(*Meta(st, r), absl::MakeConstSpan(Values(st, r), row_floats_));
      }
      continue;
    }
    for (const auto& [key, r] : st.index) {
      fn(*Meta(st, r), absl::MakeConstSpan(Values(st, r), row_floats_));
    }
  }
}

absl::Status SparseRowMap::Put(const RowMeta& meta,
                               absl::Span<const float> values) {
  const uint64_t key = meta.key;
  return ForRows(
      absl::MakeConstSpan(&key, 1), meta.touched, /*create=*/true,
      [](uint64_t, float*) {},
      [&](size_t, RowRef row) {
        std::memcpy(
            row.values, values.data(),
            sizeof(float) * std::min<size_t>(values.size(), row_floats_));
        row.meta->steps = meta.steps;
        row.meta->touched = meta.touched;
      });
}

void SparseRowMap::Clear() {
  for (int s = 0; s < (1 << stripe_bits_); ++s) {
    Stripe& st = stripes_[s];
    absl::MutexLock l(&st.mu);
    rows_.fetch_sub(st.rows, std::memory_order_relaxed);
    if (stripe_capacity_ == 0) {
      committed_.fetch_sub(st.rows, std::memory_order_relaxed);
    }
    st.index.clear();
    st.pages.clear();
    st.free.clear();
    st.next_record = 0;
    st.head = st.tail = kNone;
    st.rows = 0;
  }
  page_pool_.Clear();
}

int64_t SparseRowMap::bytes() const {
  int64_t total = 0;
  for (int s = 0; s < (1 << stripe_bits_); ++s) {
    Stripe& st = stripes_[s];
    absl::MutexLock l(&st.mu);
    total += static_cast<int64_t>(st.pages.size() * records_per_page_ *
                                  record_bytes_);
    total +=
        static_cast<int64_t>(st.index.capacity() *
                             (sizeof(std::pair<const uint64_t, uint32_t>) + 1));
    total += static_cast<int64_t>(st.free.capacity() * sizeof(uint32_t));
  }
  return total;
}

}  // namespace ps::server
