#include "kernels/caching_allocator.h"

#include <bit>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps::kernels {

CachingAllocator::CachingAllocator(std::unique_ptr<RawAllocator> raw,
                                   int64_t max_cached_bytes)
    : raw_(std::move(raw)), max_cached_bytes_(max_cached_bytes) {}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock l(&mu_);
  TrimLocked();
}

int64_t CachingAllocator::RoundUp(int64_t bytes) {
  constexpr int64_t kSmall = int64_t{1} << 20;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  // Eight size classes per power of two: at most 12.5% slack.
  const int64_t step =
      static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(bytes))) / 8;
  return (bytes + step - 1) / step * step;
}

absl::StatusOr<CachingAllocator::Block> CachingAllocator::Allocate(
    int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocation of ", bytes, " bytes: size must be positive"));
  }
  if (bytes > (int64_t{1} << 50)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocation of ", bytes, " bytes is too large"));
  }
  const int64_t capacity = RoundUp(bytes);
  {
    absl::MutexLock l(&mu_);
    auto it = free_.find(capacity);
    if (it != free_.end()) {
      Block block{it->second, capacity};
      free_.erase(it);
      ++stats_.cache_hits;
      stats_.bytes_cached -= capacity;
      stats_.bytes_in_use += capacity;
      return block;
    }
  }
  absl::StatusOr<void*> ptr = raw_->Allocate(capacity);
  if (!ptr.ok()) {
    // Out of memory with blocks cached: give them back and try once more.
    {
      absl::MutexLock l(&mu_);
      TrimLocked();
    }
    ptr = raw_->Allocate(capacity);
    if (!ptr.ok()) return ptr.status();
  }
  absl::MutexLock l(&mu_);
  ++stats_.raw_allocations;
  stats_.bytes_in_use += capacity;
  return Block{*ptr, capacity};
}

void CachingAllocator::Free(Block block) {
  if (block.ptr == nullptr) return;
  absl::MutexLock l(&mu_);
  stats_.bytes_in_use -= block.capacity;
  if (stats_.bytes_cached + block.capacity > max_cached_bytes_) {
    raw_->Free(block.ptr);
    return;
  }
  free_.emplace(block.capacity, block.ptr);
  stats_.bytes_cached += block.capacity;
}

void CachingAllocator::Trim() {
  absl::MutexLock l(&mu_);
  TrimLocked();
}

void CachingAllocator::TrimLocked() {
  for (auto& [capacity, ptr] : free_) raw_->Free(ptr);
  free_.clear();
  stats_.bytes_cached = 0;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace ps::kernels
