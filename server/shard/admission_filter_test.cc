#include "server/shard/admission_filter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ps::server {
namespace {

AdmissionSpec Spec(int min_count, int width = 1 << 16, int depth = 4) {
  AdmissionSpec s;
  s.set_min_count(min_count);
  s.set_sketch_width(width);
  s.set_sketch_depth(depth);
  return s;
}

TEST(AdmissionFilter, AdmitsOnTheKthSighting) {
  AdmissionFilter f(Spec(3));
  EXPECT_FALSE(f.Admitted(42));
  EXPECT_FALSE(f.Count(42));
  EXPECT_FALSE(f.Count(42));
  EXPECT_FALSE(f.Admitted(42));
  EXPECT_TRUE(f.Count(42));
  EXPECT_TRUE(f.Admitted(42));
  EXPECT_FALSE(f.Admitted(43));
  EXPECT_EQ(f.bytes(), 2 * (1 << 16) * 4);
}

TEST(AdmissionFilter, MinCountOneAdmitsAtOnce) {
  AdmissionFilter f(Spec(1));
  EXPECT_TRUE(f.Count(7));
}

// A sketch over-counts only through collisions: with 10^4 keys in 4 x 2^16
// counters, almost no key seen once passes a threshold of 2.
TEST(AdmissionFilter, FewFalseAdmissions) {
  AdmissionFilter f(Spec(2));
  for (uint64_t k = 0; k < 10000; ++k) f.Count(k);
  int early = 0;
  for (uint64_t k = 0; k < 10000; ++k) early += f.Admitted(k) ? 1 : 0;
  EXPECT_LT(early, 10);
}

TEST(AdmissionFilter, ConcurrentSightingsAllCount) {
  AdmissionFilter f(Spec(800, 1024, 2));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) f.Count(5);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(f.Admitted(5));
}

}  // namespace
}  // namespace ps::server
