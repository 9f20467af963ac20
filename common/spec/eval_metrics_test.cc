#include "common/spec/eval_metrics.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// O(P * N) AUC straight from its definition.
double BruteForceAuc(const std::vector<float>& scores,
                     const std::vector<float>& labels) {
  double credit = 0;
  double pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] <= 0.5f) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] > 0.5f) continue;
      pairs += 1;
      credit += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0;
    }
  }
  return credit / pairs;
}

BinnedAuc Binned(int bits) {
  absl::StatusOr<BinnedAuc> auc = BinnedAuc::Create(bits);
  EXPECT_TRUE(auc.ok());
  return *std::move(auc);
}

TEST(ExactAuc, HandComputedValuesWithTies) {
  struct Case {
    std::vector<float> scores;
    std::vector<float> labels;
    double auc;
  };
  const std::vector<Case> cases = {
      {{0.9f, 0.1f}, {1, 0}, 1.0},
      {{0.1f, 0.9f}, {1, 0}, 0.0},
      {{0.5f, 0.5f}, {1, 0}, 0.5},
      // Positives 0.9, 0.5, 0.5; negatives 0.5, 0.1: credits 1 1 | .5 1 |
      // .5 1 = 5 of 6 pairs.
      {{0.9f, 0.5f, 0.5f, 0.5f, 0.1f}, {1, 1, 1, 0, 0}, 5.0 / 6},
      // sklearn.metrics.roc_auc_score([0,0,1,1], [0.1,0.4,0.35,0.8]) = 0.75.
      {{0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}, 0.75},
      // Everything tied: 0.5 whatever the labels.
      {{2, 2, 2, 2, 2}, {1, 0, 0, 1, 0}, 0.5},
      // Negative scores and logits work the same.
      {{-3, -1, 4, -2}, {0, 1, 1, 0}, 1.0},
  };
  for (const Case& c : cases) {
    ExactAuc auc;
    ASSERT_TRUE(auc.Add(c.scores, c.labels).ok());
    EXPECT_DOUBLE_EQ(auc.Value(), c.auc);
    BinnedAuc binned = Binned(16);
    ASSERT_TRUE(binned.Add(c.scores, c.labels).ok());
    EXPECT_NEAR(binned.Value(), c.auc, binned.ErrorBound() + 1e-12);
  }
}

TEST(ExactAuc, UndefinedWithOneClassOrNaN) {
  ExactAuc auc;
  EXPECT_TRUE(std::isnan(auc.Value()));
  auc.Add(0.3f, 1);
  auc.Add(0.2f, 1);
  EXPECT_TRUE(std::isnan(auc.Value()));
  auc.Add(0.1f, 0);
  EXPECT_DOUBLE_EQ(auc.Value(), 1.0);
  auc.Add(NAN, 0);
  EXPECT_TRUE(std::isnan(auc.Value()));
  std::vector<float> two = {1, 2};
  std::vector<float> one = {1};
  EXPECT_TRUE(absl::IsInvalidArgument(auc.Add(two, one)));
}

// Random scores with many ties (quantised), split over workers and merged:
// the exact AUC equals the brute force, the binned one is within its bound.
TEST(ExactAuc, MatchesBruteForceAndMergesAcrossWorkers) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(0, 32);
  std::bernoulli_distribution coin(0.3);
  std::vector<float> scores;
  std::vector<float> labels;
  for (int i = 0; i < 3000; ++i) {
    const bool positive = coin(rng);
    // Positives score higher on average. Multiples of 1/32: exact floats,
    // so equal values are equal bits.
    scores.push_back(level(rng) / 32.0f + (positive ? 0.25f : 0.0f));
    labels.push_back(positive ? 1 : 0);
  }
  const double want = BruteForceAuc(scores, labels);
  ExactAuc whole;
  ASSERT_TRUE(whole.Add(scores, labels).ok());
  EXPECT_NEAR(whole.Value(), want, 1e-12);

  std::vector<ExactAuc> workers(3);
  std::vector<BinnedAuc> binned_workers = {Binned(20), Binned(20), Binned(20)};
  for (size_t i = 0; i < scores.size(); ++i) {
    workers[i % 3].Add(scores[i], labels[i]);
    binned_workers[i % 3].Add(scores[i], labels[i]);
  }
  workers[0].Merge(workers[1]);
  workers[0].Merge(workers[2]);
  EXPECT_NEAR(workers[0].Value(), want, 1e-12);
  EXPECT_EQ(workers[0].positives() + workers[0].negatives(), 3000);

  ASSERT_TRUE(binned_workers[0].Merge(binned_workers[1]).ok());
  ASSERT_TRUE(binned_workers[0].Merge(binned_workers[2]).ok());
  // The distinct values are at least 2% apart, so at 20 bits (0.05%) each
  // has a bin of its own: the binned value is exact, and its bound counts
  // only true ties.
  EXPECT_NEAR(binned_workers[0].Value(), want, 1e-12);
  EXPECT_GT(binned_workers[0].ErrorBound(), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(binned_workers[0].Merge(Binned(13))));
}

TEST(BinnedAuc, ErrorStaysWithinTheReportedBound) {
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0, 1);
  std::bernoulli_distribution coin(0.1);
  ExactAuc exact;
  BinnedAuc coarse = Binned(8);
  BinnedAuc fine = Binned(20);
  for (int i = 0; i < 20000; ++i) {
    const float label = coin(rng) ? 1 : 0;
    const float logit = noise(rng) + label;
    const float p = 1 / (1 + std::exp(-logit));
    exact.Add(p, label);
    coarse.Add(p, label);
    fine.Add(p, label);
  }
  const double want = exact.Value();
  EXPECT_GT(want, 0.7);
  EXPECT_LE(std::abs(coarse.Value() - want), coarse.ErrorBound());
  EXPECT_LE(std::abs(fine.Value() - want), fine.ErrorBound());
  EXPECT_GT(coarse.ErrorBound(), fine.ErrorBound());
  EXPECT_LT(fine.ErrorBound(), 1e-3);
  EXPECT_TRUE(absl::IsInvalidArgument(BinnedAuc::Create(7).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(BinnedAuc::Create(25).status()));
}

TEST(BinnedAuc, OrdersNegativeZeroAndInfinities) {
  BinnedAuc auc = Binned(16);
  const std::vector<float> scores = {-INFINITY, -1, -0.0f, 0.0f, 1, INFINITY};
  const std::vector<float> labels = {0, 0, 0, 1, 1, 1};
  ASSERT_TRUE(auc.Add(scores, labels).ok());
  ExactAuc exact;
  ASSERT_TRUE(exact.Add(scores, labels).ok());
  // -0 and +0 tie: 8.5 of 9 pairs.
  EXPECT_DOUBLE_EQ(exact.Value(), 8.5 / 9);
  EXPECT_DOUBLE_EQ(auc.Value(), 8.5 / 9);
  EXPECT_DOUBLE_EQ(auc.ErrorBound(), 0.5 / 9);
}

TEST(LogLoss, HandComputedAndStable) {
  LogLoss loss;
  loss.AddProbability(0.8, 1);  // -ln 0.8
  loss.AddProbability(0.3, 0);  // -ln 0.7
  EXPECT_NEAR(loss.Value(), (0.22314355131420976 + 0.35667494393873245) / 2,
              1e-12);
  LogLoss clamped;
  clamped.AddProbability(0.0, 1);
  EXPECT_NEAR(clamped.Value(), -std::log(LogLoss::kEpsilon), 1e-9);

  LogLoss logits;
  logits.AddLogit(0, 1);     // ln 2
  logits.AddLogit(100, 0);   // 100
  logits.AddLogit(-100, 0);  // ~3.7e-44
  logits.AddLogit(-800, 1);  // 800, no overflow
  EXPECT_NEAR(logits.sum(), std::log(2.0) + 100 + 800, 1e-9);
  EXPECT_EQ(logits.count(), 4);
  // The same prediction as a logit and as a probability.
  LogLoss a;
  LogLoss b;
  a.AddLogit(1.3, 1);
  b.AddProbability(1 / (1 + std::exp(-1.3)), 1);
  EXPECT_NEAR(a.Value(), b.Value(), 1e-12);

  loss.Merge(logits);
  EXPECT_EQ(loss.count(), 6);
  EXPECT_TRUE(std::isnan(LogLoss().Value()));
  EXPECT_DOUBLE_EQ(LogLoss(3.0, 2).Value(), 1.5);
}

TEST(Rmse, HandComputedAndMerged) {
  Rmse a;
  a.Add(3, 1);  // 4
  a.Add(2, 2);  // 0
  Rmse b;
  b.Add(0, 2);  // 4
  b.Add(5, 4);  // 1
  a.Merge(b);
  EXPECT_DOUBLE_EQ(a.Mse(), 9.0 / 4);
  EXPECT_DOUBLE_EQ(a.Value(), 1.5);
  EXPECT_TRUE(std::isnan(Rmse().Value()));
}

TEST(Accuracy, ClassesAndBinary) {
  Accuracy a;
  a.Add(int64_t{3}, int64_t{3});
  a.Add(int64_t{1}, int64_t{2});
  Accuracy b;
  b.AddBinary(0.7, 1);
  b.AddBinary(0.5, 0);  // predicted positive at the threshold: wrong
  b.AddBinary(0.2, 0);
  a.Merge(b);
  EXPECT_EQ(a.correct(), 3);
  EXPECT_EQ(a.count(), 5);
  EXPECT_DOUBLE_EQ(a.Value(), 0.6);
  EXPECT_TRUE(std::isnan(Accuracy().Value()));
}

}  // namespace
}  // namespace ps
