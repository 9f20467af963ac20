// Patterns that are correct with absl::Mutex but that TSan reports as races
// when the shim (absl_mutex_tsan.cc) misses an edge. Each one frees or
// rewrites, right after the Mutex call returns, memory that a Condition read
// in another thread (absl evaluates a waiter's Condition in the thread that
// releases the lock). See the BUILD file for how it runs under TSan.
//
// Under TSan, main() runs the tests again in a fresh process without the
// suppressions file: tsan.supp silences every race whose stack passes
// through Debian's Abseil, which is every Condition evaluation, so with it
// a missing edge would be hidden here.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

constexpr int kRounds = 100;

// The waiter's Condition reads its own heap string; the other thread's
// Unlock evaluates it and wakes the waiter, which frees the string at once.
TEST(AbslMutexTsanTest, AwaitConditionEvaluatedByTheUnlockingThread) {
  absl::Mutex mu;
  int value = 0;
  for (int round = 1; round <= kRounds; ++round) {
    std::thread waiter([&] {
      auto known = std::make_unique<std::string>("assignment of round");
      absl::MutexLock l(&mu);
      auto changed = [&] { return value == round && !known->empty(); };
      mu.Await(absl::Condition(&changed));
      known.reset();  // still under the lock
    });
    absl::SleepFor(absl::Milliseconds(1));  // the waiter waits by now
    {
      absl::MutexLock l(&mu);
      value = round;
    }
    waiter.join();
  }
  EXPECT_EQ(value, kRounds);
}

// The same with a timeout, the way CoordinatorLink::WaitForChange waits,
// and the waiter rewriting its copy outside the lock.
TEST(AbslMutexTsanTest, AwaitWithTimeoutThenRewriteOutsideTheLock) {
  absl::Mutex mu;
  std::string current;  // guarded by mu
  int taken = 0;        // guarded by mu
  std::thread waiter([&] {
    std::string seen = "round 0";  // the waiter's own, read by its Condition
    for (int round = 1; round <= kRounds; ++round) {
      std::string copy;
      {
        absl::MutexLock l(&mu);
        auto changed = [&] { return current != seen; };
        mu.AwaitWithTimeout(absl::Condition(&changed), absl::Seconds(10));
        copy = current;
        taken = round;
      }
      seen = std::move(copy);  // outside the lock
    }
  });
  for (int round = 1; round <= kRounds; ++round) {
    absl::MutexLock l(&mu);
    current = "round " + std::to_string(round);
    auto was_taken = [&] { return taken == round; };
    mu.Await(absl::Condition(&was_taken));
  }
  waiter.join();
  EXPECT_EQ(taken, kRounds);
}

// LockWhen: the Condition runs before the waiter holds the lock.
TEST(AbslMutexTsanTest, LockWhenConditionReadsTheWaitersLocal) {
  absl::Mutex mu;
  int value = 0;
  for (int round = 1; round <= kRounds; ++round) {
    std::thread waiter([&] {
      int want = round;
      auto ready = [&] { return value >= want; };
      mu.LockWhen(absl::Condition(&ready));
      mu.Unlock();
      want = -1;  // the Condition read it
    });
    absl::SleepFor(absl::Milliseconds(1));  // the waiter waits by now
    {
      absl::MutexLock l(&mu);
      value = round;
    }
    waiter.join();
  }
  EXPECT_EQ(value, kRounds);
}

}  // namespace

extern "C" void __tsan_acquire(void* addr) __attribute__((weak));

int main(int argc, char** argv) {
  if (__tsan_acquire != nullptr &&
      std::getenv("PS_TSAN_SHIM_TEST_CHILD") == nullptr) {
    setenv("PS_TSAN_SHIM_TEST_CHILD", "1", 1);
    setenv("TSAN_OPTIONS", "halt_on_error=1:exitcode=66", 1);
    std::fprintf(stderr,
                 "absl_mutex_tsan_test: TSan: running again without "
                 "the suppressions file\n");
    execv("/proc/self/exe", argv);
    std::perror("absl_mutex_tsan_test: execv");
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
