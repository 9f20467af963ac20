#include "kernels/caching_allocator.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/host_memory.h"

namespace ps::kernels {
namespace {

// Counts raw calls and can be told to fail.
class CountingAllocator final : public RawAllocator {
 public:
  explicit CountingAllocator(int* live, int64_t fail_above = 1 << 30)
      : live_(live),
        fail_above_(fail_above),
        inner_(NewAlignedHostAllocator()) {}
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    if (bytes > fail_above_) return absl::ResourceExhaustedError("too big");
    ++*live_;
    return inner_->Allocate(bytes);
  }
  void Free(void* ptr) override {
    --*live_;
    inner_->Free(ptr);
  }

 private:
  int* live_;
  int64_t fail_above_;
  std::unique_ptr<RawAllocator> inner_;
};

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameSizeClass) {
  int live = 0;
  {
    CachingAllocator alloc(std::make_unique<CountingAllocator>(&live));
    absl::StatusOr<CachingAllocator::Block> a = alloc.Allocate(1000);
    ASSERT_TRUE(a.ok());
    EXPECT_GE(a->capacity, 1000);
    void* first = a->ptr;
    alloc.Free(*a);
    absl::StatusOr<CachingAllocator::Block> b =
        alloc.Allocate(900);  // same class
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->ptr, first);
    EXPECT_EQ(alloc.stats().raw_allocations, 1);
    EXPECT_EQ(alloc.stats().cache_hits, 1);
    absl::StatusOr<CachingAllocator::Block> c = alloc.Allocate(5000);
    ASSERT_TRUE(c.ok());
    EXPECT_NE(c->ptr, first);
    EXPECT_EQ(alloc.stats().bytes_in_use, b->capacity + c->capacity);
    alloc.Free(*b);
    alloc.Free(*c);
    EXPECT_EQ(live, 2);  // cached, not freed
  }
  EXPECT_EQ(live, 0);  // destruction releases the cache
}

TEST(CachingAllocator, SizeClassesBoundTheSlack) {
  for (int64_t bytes :
       std::vector<int64_t>{1, 511, 512, 513, 1 << 20, (1 << 20) + 1, 3 << 20,
                            (int64_t{1} << 33) + 7}) {
    const int64_t rounded = CachingAllocator::RoundUp(bytes);
    EXPECT_GE(rounded, bytes);
    EXPECT_LE(rounded, std::max<int64_t>(512, bytes + bytes / 8 + 512))
        << bytes;
  }
}

TEST(CachingAllocator, RespectsTheCacheLimitAndTrims) {
  int live = 0;
  CachingAllocator alloc(std::make_unique<CountingAllocator>(&live),
                         /*max_cached_bytes=*/1024);
  std::vector<CachingAllocator::Block> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(*alloc.Allocate(512));
  for (auto& b : blocks) alloc.Free(b);
  EXPECT_EQ(live, 2);  // two fit in the 1 KiB cache
  alloc.Trim();
  EXPECT_EQ(live, 0);
}

TEST(CachingAllocator, ReportsErrors) {
  int live = 0;
  CachingAllocator alloc(std::make_unique<CountingAllocator>(&live, 4096));
  EXPECT_EQ(alloc.Allocate(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.Allocate(1 << 20).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(live, 0);
}

}  // namespace
}  // namespace ps::kernels
