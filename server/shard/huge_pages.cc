#include "server/shard/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace ps::server {
namespace {

constexpr size_t kSmallPage = 4096;
// Linux 6.1's MADV_COLLAPSE, which glibc 2.36's <sys/mman.h> lacks (older
// kernels answer EINVAL).
constexpr int kMadvCollapse = 25;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void* AllocateHugePages(size_t bytes) {
  void* p = AllocateAlignedPages(bytes);
  // Advice only: without it (THP off) the memory is still good.
  if (p != nullptr) (void)madvise(p, RoundUp(bytes, kSmallPage), MADV_HUGEPAGE);
  return p;
}

void CollapseToHugePages(void* p, size_t bytes) {
  if (madvise(p, bytes, kMadvCollapse) == 0) return;
  (void)madvise(p, bytes, MADV_HUGEPAGE);
}

void* AllocateAlignedPages(size_t bytes) {
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
  return reinterpret_cast<void*>(aligned);
}

void FreeHugePages(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, RoundUp(bytes, kSmallPage));
}

}  // namespace ps::server
