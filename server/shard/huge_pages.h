// Memory for the sparse row map's large, randomly accessed arrays (its
// stripes' record pages and index slots), backed by transparent huge pages
// where the kernel allows them.
//
// Why: a row visit touches an index slot and a record in tables of hundreds
// of MB, so with 4 KiB pages nearly every visit also misses the TLB, and on
// a virtual machine each page walk is itself several memory accesses. 2 MiB
// pages let the TLB cover the table. The memory comes from mmap, aligned to
// 2 MiB, with madvise(MADV_HUGEPAGE): the kernel's THP setting `madvise`
// (a common default) or `always` backs it with huge pages when it has them,
// `never` with ordinary pages; either way the contents are the same.
//
// Thread safety: the functions and HugePagePool are thread-safe; an
// allocator is stateless.
#ifndef PS_SERVER_SHARD_HUGE_PAGES_H_
#define PS_SERVER_SHARD_HUGE_PAGES_H_

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps::server {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` (rounded up to 4 KiB) of zeroed memory at a 2 MiB boundary,
// advised for huge pages (madvise MADV_HUGEPAGE: each 2 MiB is resident
// whole from its first touch); nullptr when mmap fails.
void* AllocateHugePages(size_t bytes);
// Frees what AllocateHugePages(bytes) returned (the same `bytes`).
void FreeHugePages(void* p, size_t bytes);

// Pages of `page_bytes` each, kept until Clear or the pool's end: the
// first ones, up to `small_bytes` in all, allocated one by one (a small
// table stays small), the next carved out of 2 MiB blocks from
// AllocateHugePages shared by every caller, so that at most one block is
// partly in use (a block is resident whole once touched). Thread-safe.
class HugePagePool {
 public:
  HugePagePool(size_t page_bytes, size_t small_bytes);
  ~HugePagePool();
  HugePagePool(const HugePagePool&) = delete;
  HugePagePool& operator=(const HugePagePool&) = delete;

  // A new page (uninitialised), or from the heap where a block cannot be
  // mapped.
  char* NewPage();
  // Frees every page; none may be in use.
  void Clear();

 private:
  struct FreeBlock {
    void operator()(char* p) const { FreeHugePages(p, kHugePageBytes); }
  };
  const size_t page_bytes_;
  const size_t pages_per_block_;
  const size_t max_small_pages_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<char[]>> small_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<char, FreeBlock>> blocks_ ABSL_GUARDED_BY(mu_);
  size_t block_pages_left_ ABSL_GUARDED_BY(mu_) = 0;
};

// A std::allocator that takes allocations of at least kHugePageBytes from
// AllocateHugePages (smaller ones as std::allocator does): for hash maps
// that grow large (absl::flat_hash_map's backing array).
template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) return std::allocator<T>().allocate(n);
    void* p = AllocateHugePages(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) {
      std::allocator<T>().deallocate(p, n);
    } else {
      FreeHugePages(p, bytes);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_HUGE_PAGES_H_
