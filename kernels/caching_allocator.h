#ifndef PS_KERNELS_CACHING_ALLOCATOR_H_
#define PS_KERNELS_CACHING_ALLOCATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps::kernels {

// The raw memory a backend owns (cudaMalloc/cudaFree, aligned host memory).
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // Returns at least `bytes` bytes, aligned to 256, or RESOURCE_EXHAUSTED.
  virtual absl::StatusOr<void*> Allocate(int64_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
};

// A caching allocator over a RawAllocator: sizes are rounded up to a size
// class (512 B granularity below 1 MiB, then 1/8 of the next power of two), and
// freed blocks are kept per size class for reuse, so a training loop's
// steady-state steps allocate nothing. Up to `max_cached_bytes` stay cached;
// blocks beyond that go back to the raw allocator at once.
//
// Thread-safe. Owns the raw allocator; every cached block is released on
// destruction. Blocks still handed out at destruction are a caller bug.
// Stream order: the CUDA backend uses one stream per context, so a block freed
// after work was enqueued may be reused by later work on the same stream.
class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<RawAllocator> raw,
                            int64_t max_cached_bytes = int64_t{1} << 30);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a block of at least `bytes` bytes (bytes > 0) and its capacity.
  struct Block {
    void* ptr = nullptr;
    int64_t capacity = 0;
  };
  absl::StatusOr<Block> Allocate(int64_t bytes);
  void Free(Block block);

  // Returns every cached (free) block to the raw allocator.
  void Trim();

  struct Stats {
    int64_t raw_allocations = 0;  // calls that reached the raw allocator
    int64_t cache_hits = 0;
    int64_t bytes_in_use = 0;
    int64_t bytes_cached = 0;
  };
  Stats stats() const;

  static int64_t RoundUp(int64_t bytes);

 private:
  void TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<RawAllocator> raw_;
  const int64_t max_cached_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<int64_t, void*> free_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_CACHING_ALLOCATOR_H_
