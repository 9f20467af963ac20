#include "server/shard/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ps::server {
namespace {

TEST(HugePages, AlignedZeroedAndWritable) {
  for (size_t bytes :
       {size_t{1}, size_t{4097}, kHugePageBytes, 3 * kHugePageBytes + 12345}) {
    char* p = static_cast<char*>(AllocateHugePages(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[bytes - 1], 0);
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[bytes - 1], 0x5a);
    FreeHugePages(p, bytes);
  }
}

TEST(HugePagePool, SmallPagesFirstThenBlocksSharedByEveryCaller) {
  constexpr size_t kPage = 64 << 10;
  HugePagePool pool(kPage, 4 * kPage);
  std::vector<char*> pages;
  for (int i = 0; i < 4 + 40; ++i) {
    char* p = pool.NewPage();
    ASSERT_NE(p, nullptr);
    std::memset(p, i, kPage);  // each page its own memory
    pages.push_back(p);
  }
  // The fifth page starts a block; the next 31 follow it in that block,
  // the 37th starts another.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages[4]) % kHugePageBytes, 0u);
  for (int i = 5; i < 36; ++i) EXPECT_EQ(pages[i], pages[i - 1] + kPage) << i;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages[36]) % kHugePageBytes, 0u);
  for (int i = 0; i < 44; ++i) {
    EXPECT_EQ(pages[i][0], static_cast<char>(i));
    EXPECT_EQ(pages[i][kPage - 1], static_cast<char>(i));
  }
  pool.Clear();
  EXPECT_NE(pool.NewPage(), nullptr);
}

TEST(HugePages, AllocatorBacksAHashMapThatGrowsPastAHugePage) {
  // 2^18 slots of 16 bytes: the backing array passes 2 MiB as it grows.
  absl::flat_hash_map<uint64_t, uint32_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, uint32_t>>>
      map;
  constexpr uint32_t kKeys = 200000;
  for (uint32_t i = 0; i < kKeys; ++i) map.emplace(uint64_t{i} * 7919, i);
  ASSERT_EQ(map.size(), kKeys);
  EXPECT_GE(map.capacity() * sizeof(std::pair<uint64_t, uint32_t>),
            kHugePageBytes);
  for (uint32_t i = 0; i < kKeys; i += 997) {
    auto it = map.find(uint64_t{i} * 7919);
    ASSERT_NE(it, map.end());
    EXPECT_EQ(it->second, i);
  }
  map.clear();
  map.rehash(0);  // gives the large array back
  EXPECT_TRUE(map.empty());
}

}  // namespace
}  // namespace ps::server
