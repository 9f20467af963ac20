#include "tools/data/zipf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/random.h"

namespace ps::data_tools {
namespace {

// Draws against the exact probabilities 1/k^s / H(n, s), for exponents
// below, at and above 1.
TEST(ZipfSampler, MatchesTheDistribution) {
  for (const double s : {0.5, 1.0, 1.05, 2.0}) {
    const int64_t n = 20;
    absl::StatusOr<ZipfSampler> zipf = ZipfSampler::Create(n, s);
    ASSERT_TRUE(zipf.ok());
    worker::data::SplitMix64 rng(123);
    const int draws = 400000;
    std::vector<int64_t> counts(n + 1, 0);
    for (int i = 0; i < draws; ++i) {
      const int64_t k = zipf->Sample(rng);
      ASSERT_GE(k, 1);
      ASSERT_LE(k, n);
      ++counts[k];
    }
    double norm = 0;
    for (int k = 1; k <= n; ++k) norm += std::pow(k, -s);
    double chi2 = 0;
    for (int k = 1; k <= n; ++k) {
      const double expected = draws * std::pow(k, -s) / norm;
      chi2 += (counts[k] - expected) * (counts[k] - expected) / expected;
    }
    // 19 degrees of freedom: P(chi2 > 43.8) = 0.001.
    EXPECT_LT(chi2, 43.8) << "s = " << s;
  }
}

TEST(ZipfSampler, LargeAndDegenerateRanges) {
  absl::StatusOr<ZipfSampler> one = ZipfSampler::Create(1, 1.1);
  ASSERT_TRUE(one.ok());
  worker::data::SplitMix64 rng(1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one->Sample(rng), 1);

  absl::StatusOr<ZipfSampler> big = ZipfSampler::Create(10000000, 1.05);
  ASSERT_TRUE(big.ok());
  int64_t ones = 0;
  int64_t max = 0;
  for (int i = 0; i < 100000; ++i) {
    const int64_t k = big->Sample(rng);
    ASSERT_GE(k, 1);
    ASSERT_LE(k, 10000000);
    ones += k == 1;
    max = std::max(max, k);
  }
  // P(1) = 1 / H(10^7, 1.05) = 0.08586 (numpy).
  EXPECT_NEAR(ones / 100000.0, 0.08586, 0.003);
  EXPECT_GT(max, 100000);

  EXPECT_FALSE(ZipfSampler::Create(0, 1.0).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, 0.0).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, NAN).ok());
}

}  // namespace
}  // namespace ps::data_tools
