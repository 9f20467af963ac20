// Evaluation metrics of a model's predictions: AUC (exact, or binned with a
// bounded error), log loss, RMSE and accuracy. Each accumulates over batches
// (Add) and merges with the same metric from other workers (Merge); the
// result of adding examples in any split over any number of instances,
// merged, is the result of adding them all to one (up to floating-point
// summation order). Plain values, not thread-safe: one per evaluating thread,
// merged at the end.
#ifndef PS_COMMON_SPEC_EVAL_METRICS_H_
#define PS_COMMON_SPEC_EVAL_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps {

// The area under the ROC curve, exactly: the probability that a random
// positive scores above a random negative, ties counting one half (the
// Mann-Whitney U statistic over P * N). Keeps every score (4 bytes per
// example) and sorts them in Value(): O(n log n), fine for evaluation sets of
// up to ~10^8 examples. Merge concatenates.
class ExactAuc {
 public:
  // A label above 0.5 is positive. A NaN score makes Value() NaN.
  void Add(float score, float label);
  // scores.size() == labels.size() (INVALID_ARGUMENT otherwise).
  absl::Status Add(absl::Span<const float> scores,
                   absl::Span<const float> labels);
  void Merge(const ExactAuc& other);

  // NaN while either class has no example (AUC is undefined), or if a score
  // was NaN.
  double Value() const;

  int64_t positives() const { return positive_.size(); }
  int64_t negatives() const { return negative_.size(); }
  // The state, for sending to another process.
  const std::vector<float>& positive_scores() const { return positive_; }
  const std::vector<float>& negative_scores() const { return negative_; }

 private:
  std::vector<float> positive_;
  std::vector<float> negative_;
  bool saw_nan_ = false;
};

// AUC in bounded memory: scores fall into 2^bits bins by the top `bits` bits
// of an order-preserving map of the float (sign, exponent, then mantissa: a
// relative resolution of 2^-(bits - 9), about 0.8% at 16 bits and 0.05% at
// 20), one count per class and bin (16 bytes per bin). Pairs in different
// bins are ordered exactly; pairs sharing a bin count one half, so
//   |Value() - exact AUC| <= ErrorBound() =
//       (1/2) * sum over bins of positives(bin) * negatives(bin) / (P * N),
// a bound computed from the data, reported next to the value. Merge adds
// the counts (same `bits` only).
class BinnedAuc {
 public:
  static constexpr int kMinBits = 8;
  static constexpr int kMaxBits = 24;

  // INVALID_ARGUMENT unless kMinBits <= bits <= kMaxBits.
  static absl::StatusOr<BinnedAuc> Create(int bits = 16);

  void Add(float score, float label);
  absl::Status Add(absl::Span<const float> scores,
                   absl::Span<const float> labels);
  // INVALID_ARGUMENT if the bin counts differ.
  absl::Status Merge(const BinnedAuc& other);

  // NaN while either class is empty or if a score was NaN (as ExactAuc).
  double Value() const;
  double ErrorBound() const;

  int bits() const { return bits_; }
  int64_t positives() const { return positives_; }
  int64_t negatives() const { return negatives_; }

 private:
  explicit BinnedAuc(int bits);
  uint32_t Bin(float score) const;

  int bits_;
  std::vector<uint64_t> positive_;  // per bin
  std::vector<uint64_t> negative_;
  int64_t positives_ = 0;
  int64_t negatives_ = 0;
  bool saw_nan_ = false;
};

// Mean binary cross-entropy, -(y log p + (1 - y) log(1 - p)), for labels y in
// [0, 1] (clicks: 0 or 1).
class LogLoss {
 public:
  // Probabilities are clamped to [kEpsilon, 1 - kEpsilon] first, so a
  // confident mistake costs at most -log(kEpsilon) ~ 16.1 rather than
  // infinity (scikit-learn's convention).
  static constexpr double kEpsilon = 1e-7;

  LogLoss() = default;
  LogLoss(double sum, int64_t count) : sum_(sum), count_(count) {}

  void AddProbability(double p, double label);
  // From a logit z (p = sigmoid(z)), without clamping and without overflow:
  // softplus(z) - y z.
  void AddLogit(double z, double label);
  void Merge(const LogLoss& other) {
    sum_ += other.sum_;
    count_ += other.count_;
  }

  // NaN with no example.
  double Value() const;
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// Root of the mean squared error.
class Rmse {
 public:
  Rmse() = default;
  Rmse(double sum_squares, int64_t count)
      : sum_squares_(sum_squares), count_(count) {}

  void Add(double prediction, double target) {
    const double e = prediction - target;
    sum_squares_ += e * e;
    ++count_;
  }
  void Merge(const Rmse& other) {
    sum_squares_ += other.sum_squares_;
    count_ += other.count_;
  }

  // NaN with no example.
  double Value() const;
  double Mse() const;
  double sum_squares() const { return sum_squares_; }
  int64_t count() const { return count_; }

 private:
  double sum_squares_ = 0.0;
  int64_t count_ = 0;
};

// The fraction of correct predictions.
class Accuracy {
 public:
  Accuracy() = default;
  Accuracy(int64_t correct, int64_t count) : correct_(correct), count_(count) {}

  void Add(bool correct) {
    correct_ += correct ? 1 : 0;
    ++count_;
  }
  void Add(int64_t predicted, int64_t actual) { Add(predicted == actual); }
  // Binary: predicted positive when p >= threshold; label above 0.5 is
  // positive.
  void AddBinary(double p, double label, double threshold = 0.5) {
    Add((p >= threshold) == (label > 0.5));
  }
  void Merge(const Accuracy& other) {
    correct_ += other.correct_;
    count_ += other.count_;
  }

  // NaN with no example.
  double Value() const;
  int64_t correct() const { return correct_; }
  int64_t count() const { return count_; }

 private:
  int64_t correct_ = 0;
  int64_t count_ = 0;
};

}  // namespace ps

#endif  // PS_COMMON_SPEC_EVAL_METRICS_H_
