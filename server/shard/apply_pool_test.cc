#include "server/shard/apply_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

TEST(ApplyPool, RunsEveryIndexOnceOverSeveralThreads) {
  ApplyPool pool(4);
  EXPECT_EQ(pool.threads(), 4);
  for (int64_t n : {0, 1, 2, 3, 7, 100, 1000}) {
    std::vector<std::atomic<int>> runs(n);
    absl::Mutex mu;
    std::set<std::thread::id> threads;
    pool.ParallelFor(n, [&](int64_t i) {
      runs[i].fetch_add(1);
      // Slow enough that helpers get a share.
      if (n == 100) absl::SleepFor(absl::Microseconds(200));
      absl::MutexLock l(&mu);
      threads.insert(std::this_thread::get_id());
    });
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(runs[i].load(), 1) << n << " " << i;
    if (n == 100) {
      EXPECT_GT(threads.size(), 1u);
    }
  }
}

TEST(ApplyPool, OneThreadRunsOnTheCaller) {
  ApplyPool pool(1);
  const std::thread::id me = std::this_thread::get_id();
  int sum = 0;
  pool.ParallelFor(10, [&](int64_t i) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    sum += static_cast<int>(i);
  });
  EXPECT_EQ(sum, 45);
}

// Several callers at once (jobs closing steps together) each get all of
// their own indices, and none of the others'.
TEST(ApplyPool, ConcurrentCallersKeepTheirLoopsApart) {
  ApplyPool pool(3);
  constexpr int kCallers = 4;
  constexpr int64_t kN = 500;
  std::vector<std::vector<std::atomic<int>>> runs;
  for (int c = 0; c < kCallers; ++c) runs.emplace_back(kN);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) {
        pool.ParallelFor(kN, [&](int64_t i) { runs[c][i].fetch_add(1); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(runs[c][i].load(), 20);
  }
}

}  // namespace
}  // namespace ps::server
