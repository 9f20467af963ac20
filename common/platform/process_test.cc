#include "common/platform/process.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

[[maybe_unused]] long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Allocates, touches and frees four 12 MB buffers; returns the page faults
// that took.
[[maybe_unused]] long FaultsOfOneRound() {
  const long before = MinorFaults();
  std::vector<char*> blocks;
  for (int i = 0; i < 4; ++i) {
    char* p = static_cast<char*>(std::malloc(12 << 20));
    std::memset(p, i + 1, 12 << 20);
    blocks.push_back(p);
  }
  // Keep the stores: the compiler may drop memset before free otherwise.
  volatile char sink = blocks[3][12345];
  (void)sink;
  for (char* p : blocks) std::free(p);
  return MinorFaults() - before;
}

TEST(TuneMallocTest, FreedMessageBuffersAreNotFaultedInAgain) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer supplies the allocator; mallopt does not apply";
#else
  ASSERT_TRUE(TuneMallocForLargeMessages(/*enabled=*/true));
  // A 20 MB buffer freed first: with glibc's default dynamic thresholds
  // this sets the mmap threshold to 20 MB and the trim threshold to 40 MB,
  // so the four 12 MB buffers below come from the heap, and freeing them
  // trims the heap and gives their pages back: every round faults all of
  // its 12k pages in again. Tuned, the pages stay.
  char* big = static_cast<char*>(std::malloc(20 << 20));
  std::memset(big, 1, 20 << 20);
  std::free(big);
  FaultsOfOneRound();  // the first round faults the pages in once
  long later = 0;
  for (int round = 0; round < 4; ++round) later += FaultsOfOneRound();
  const long pages_per_round = 4 * (12 << 20) / 4096;
  EXPECT_LT(later, pages_per_round / 4)
      << later << " page faults in 4 rounds of " << pages_per_round
      << " pages each";
#endif
}

// Resident memory of this process in bytes (/proc/self/statm's second
// field, in pages).
[[maybe_unused]] long ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * 4096 : -1;
}

TEST(ReleaseFreedMemoryTest, FreedHeapMemoryLeavesTheProcess) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer supplies the allocator; malloc_trim does not "
                  "apply";
#else
  ASSERT_TRUE(TuneMallocForLargeMessages(/*enabled=*/true));
  // 64 MB in 64 KB blocks (below the mmap threshold: from the heap), as a
  // job's tables are, freed with one small block kept after them so that
  // the heap's top cannot shrink past them.
  constexpr size_t kBlock = 64 << 10;
  constexpr int kBlocks = 1024;
  std::vector<char*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
    std::memset(blocks.back(), 1, kBlock);
  }
  char* pin = static_cast<char*>(std::malloc(64));
  std::memset(pin, 1, 64);
  const long held = ResidentBytes();
  for (char* p : blocks) std::free(p);
  const long freed = ResidentBytes();
  EXPECT_GT(freed, held - (16 << 20)) << "tuned, freed memory stays resident";
  EXPECT_TRUE(ReleaseFreedMemory());
  const long released = ResidentBytes();
  EXPECT_LT(released, freed - (48 << 20))
      << "held " << held << ", freed " << freed << ", released " << released;
  std::free(pin);
#endif
}

TEST(TuneMallocTest, ZeroInTheEnvironmentTurnsItOff) {
  EXPECT_FALSE(TuneMallocForLargeMessages(MallocTuningEnabled("0")));
  EXPECT_TRUE(MallocTuningEnabled(nullptr));  // unset
  EXPECT_TRUE(MallocTuningEnabled("1"));
  EXPECT_TRUE(MallocTuningEnabled(""));
}

}  // namespace
}  // namespace ps
