#include "server/shard/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace ps::server {
namespace {

constexpr size_t kSmallPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void* AllocateHugePages(size_t bytes) {
  const size_t size = RoundUp(bytes, kSmallPage);
  // Map one huge page more than needed and trim both ends to the boundary.
  const size_t mapped = size + kHugePageBytes;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + size) {
    munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  }
  void* p = reinterpret_cast<void*>(aligned);
  // Advice only: without it (THP off) the memory is still good.
  (void)madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void FreeHugePages(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, RoundUp(bytes, kSmallPage));
}

HugePagePool::HugePagePool(size_t page_bytes, size_t small_bytes)
    : page_bytes_(page_bytes),
      pages_per_block_(kHugePageBytes / page_bytes),
      max_small_pages_(small_bytes / page_bytes) {}

HugePagePool::~HugePagePool() = default;

char* HugePagePool::NewPage() {
  absl::MutexLock l(&mu_);
  if (pages_per_block_ > 1 && small_.size() >= max_small_pages_) {
    if (block_pages_left_ == 0) {
      char* block = static_cast<char*>(AllocateHugePages(kHugePageBytes));
      if (block != nullptr) {
        blocks_.emplace_back(block);
        block_pages_left_ = pages_per_block_;
      }
    }
    if (block_pages_left_ > 0) {
      return blocks_.back().get() +
             (pages_per_block_ - block_pages_left_--) * page_bytes_;
    }
  }
  small_.emplace_back(new char[page_bytes_]);
  return small_.back().get();
}

void HugePagePool::Clear() {
  absl::MutexLock l(&mu_);
  small_.clear();
  blocks_.clear();
  block_pages_left_ = 0;
}

}  // namespace ps::server
