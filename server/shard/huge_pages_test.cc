#include "server/shard/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

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

TEST(HugePages, CollapseKeepsTheContents) {
  char* p = static_cast<char*>(AllocateAlignedPages(kHugePageBytes));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  // Part written (the rest never touched), then collapsed.
  for (size_t i = 0; i < kHugePageBytes / 2; ++i) p[i] = static_cast<char>(i);
  CollapseToHugePages(p, kHugePageBytes);
  size_t wrong = 0;
  for (size_t i = 0; i < kHugePageBytes / 2; ++i) {
    wrong += p[i] != static_cast<char>(i);
  }
  for (size_t i = kHugePageBytes / 2; i < kHugePageBytes; ++i) {
    wrong += p[i] != 0;
  }
  EXPECT_EQ(wrong, 0u);
  FreeHugePages(p, kHugePageBytes);
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
