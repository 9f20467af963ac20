#include "worker/client/topk_compression.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace ps::client {
namespace {

TEST(TopKCompressor, SendsTheLargestMagnitudesAndKeepsTheRest) {
  absl::StatusOr<TopKCompressor> c = TopKCompressor::Create({6}, 0.5);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->k(0), 3);
  const std::vector<float> g = {0.1f, -5.0f, 2.0f, 0.0f, 3.0f, -0.5f};
  absl::StatusOr<SparseGradient> s = c->Compress(0, g);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->indices, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(s->values, (std::vector<float>{-5.0f, 2.0f, 3.0f}));
  EXPECT_EQ(c->residual(0),
            (std::vector<float>{0.1f, 0.0f, 0.0f, 0.0f, 0.0f, -0.5f}));
  // The residual joins the next gradient: -0.5 - 1 beats the new 1.2 and 1.
  s = c->Compress(0, std::vector<float>{0, 0, 0, 1.2f, 1.0f, -1.0f});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->indices, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_FLOAT_EQ(s->values[2], -1.5f);
  // Ties go to the lower offset.
  absl::StatusOr<TopKCompressor> t = TopKCompressor::Create({4}, 0.25);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Compress(0, std::vector<float>{1, -1, 1, 1})->indices,
            (std::vector<int64_t>{0}));
}

// Error feedback loses nothing: after any number of steps, what was sent
// plus the residual is the sum of the gradients, exactly (small integers,
// so that float sums are exact whatever their order).
TEST(TopKCompressor, SentPlusResidualIsTheSumOfTheGradients) {
  const std::vector<int64_t> sizes = {1, 7, 1000};
  for (double ratio : {0.01, 0.1, 0.5, 1.0}) {
    absl::StatusOr<TopKCompressor> c = TopKCompressor::Create(sizes, ratio);
    ASSERT_TRUE(c.ok());
    std::mt19937 rng(42);
    std::uniform_int_distribution<int> value(-8, 8);
    std::vector<std::vector<double>> total(sizes.size()), sent(sizes.size());
    for (size_t t = 0; t < sizes.size(); ++t) {
      total[t].assign(sizes[t], 0.0);
      sent[t].assign(sizes[t], 0.0);
    }
    for (int step = 0; step < 50; ++step) {
      for (size_t t = 0; t < sizes.size(); ++t) {
        std::vector<float> g(sizes[t]);
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = static_cast<float>(value(rng));
          total[t][i] += g[i];
        }
        absl::StatusOr<SparseGradient> s = c->Compress(t, g);
        ASSERT_TRUE(s.ok());
        ASSERT_EQ(static_cast<int64_t>(s->indices.size()), c->k(t));
        for (size_t j = 0; j < s->indices.size(); ++j) {
          if (j > 0) {
            ASSERT_LT(s->indices[j - 1], s->indices[j]);
          }
          sent[t][s->indices[j]] += s->values[j];
        }
      }
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (int64_t i = 0; i < sizes[t]; ++i) {
        ASSERT_EQ(sent[t][i] + c->residual(t)[i], total[t][i])
            << "ratio " << ratio << " tensor " << t << " element " << i;
      }
    }
    if (ratio == 1.0) {
      for (size_t t = 0; t < sizes.size(); ++t) {
        for (float r : c->residual(t)) EXPECT_EQ(r, 0.0f);
      }
    }
  }
}

TEST(TopKCompressor, BadInputAndNonFiniteValues) {
  EXPECT_FALSE(TopKCompressor::Create({4}, 0.0).ok());
  EXPECT_FALSE(TopKCompressor::Create({4}, 1.5).ok());
  EXPECT_FALSE(TopKCompressor::Create({4}, std::nan("")).ok());
  EXPECT_FALSE(TopKCompressor::Create({0}, 0.5).ok());
  absl::StatusOr<TopKCompressor> c = TopKCompressor::Create({4, 1000}, 0.001);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->k(0), 1);  // at least one element a tensor
  EXPECT_EQ(c->k(1), 1);
  EXPECT_EQ(c->Compress(2, std::vector<float>(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Compress(0, std::vector<float>(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A NaN is sent at once, with everything else, for the shard to refuse.
  std::vector<float> g = {1, std::numeric_limits<float>::quiet_NaN(), 2, 3};
  absl::StatusOr<SparseGradient> s = c->Compress(0, g);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->indices.size(), 4u);
  EXPECT_TRUE(std::isnan(s->values[1]));
  for (float r : c->residual(0)) EXPECT_EQ(r, 0.0f);
  // Reset drops what was kept.
  ASSERT_TRUE(c->Compress(0, std::vector<float>{1, 2, 3, 4}).ok());
  EXPECT_NE(c->residual(0)[0], 0.0f);
  c->Reset();
  for (float r : c->residual(0)) EXPECT_EQ(r, 0.0f);
}

}  // namespace
}  // namespace ps::client
