#include "common/spec/eval_metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace ps {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

absl::Status CheckSizes(absl::Span<const float> scores,
                        absl::Span<const float> labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(scores.size(), " scores but ", labels.size(), " labels"));
  }
  return absl::OkStatus();
}

// Maps floats to uint32 so that a < b implies Key(a) < Key(b), and -0 and +0
// meet (both -> 0x80000000).
uint32_t OrderKey(float score) {
  if (score == 0.0f) score = 0.0f;
  const uint32_t bits = std::bit_cast<uint32_t>(score);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

}  // namespace

void ExactAuc::Add(float score, float label) {
  if (std::isnan(score)) saw_nan_ = true;
  (label > 0.5f ? positive_ : negative_).push_back(score);
}

absl::Status ExactAuc::Add(absl::Span<const float> scores,
                           absl::Span<const float> labels) {
  absl::Status sizes = CheckSizes(scores, labels);
  if (!sizes.ok()) return sizes;
  for (size_t i = 0; i < scores.size(); ++i) Add(scores[i], labels[i]);
  return absl::OkStatus();
}

void ExactAuc::Merge(const ExactAuc& other) {
  positive_.insert(positive_.end(), other.positive_.begin(),
                   other.positive_.end());
  negative_.insert(negative_.end(), other.negative_.begin(),
                   other.negative_.end());
  saw_nan_ = saw_nan_ || other.saw_nan_;
}

double ExactAuc::Value() const {
  if (saw_nan_ || positive_.empty() || negative_.empty()) return kNaN;
  std::vector<float> pos = positive_;
  std::vector<float> neg = negative_;
  std::sort(pos.begin(), pos.end());
  std::sort(neg.begin(), neg.end());
  // Twice the U statistic, in integers: per positive, 2 per negative below
  // it and 1 per negative equal to it.
  unsigned __int128 twice_u = 0;
  size_t below = 0;  // negatives < current positive
  size_t upto = 0;   // negatives <= current positive
  for (const float p : pos) {
    while (below < neg.size() && neg[below] < p) ++below;
    upto = std::max(upto, below);
    while (upto < neg.size() && neg[upto] <= p) ++upto;
    twice_u += 2 * below + (upto - below);
  }
  const double pairs = static_cast<double>(pos.size()) * neg.size();
  return static_cast<double>(twice_u) / (2.0 * pairs);
}

absl::StatusOr<BinnedAuc> BinnedAuc::Create(int bits) {
  if (bits < kMinBits || bits > kMaxBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUC bins: bits must be in [", kMinBits, ", ", kMaxBits,
                     "], got ", bits));
  }
  return BinnedAuc(bits);
}

BinnedAuc::BinnedAuc(int bits)
    : bits_(bits),
      positive_(size_t{1} << bits, 0),
      negative_(size_t{1} << bits, 0) {}

uint32_t BinnedAuc::Bin(float score) const {
  return OrderKey(score) >> (32 - bits_);
}

void BinnedAuc::Add(float score, float label) {
  if (std::isnan(score)) {
    saw_nan_ = true;
    return;
  }
  if (label > 0.5f) {
    ++positive_[Bin(score)];
    ++positives_;
  } else {
    ++negative_[Bin(score)];
    ++negatives_;
  }
}

absl::Status BinnedAuc::Add(absl::Span<const float> scores,
                            absl::Span<const float> labels) {
  absl::Status sizes = CheckSizes(scores, labels);
  if (!sizes.ok()) return sizes;
  for (size_t i = 0; i < scores.size(); ++i) Add(scores[i], labels[i]);
  return absl::OkStatus();
}

absl::Status BinnedAuc::Merge(const BinnedAuc& other) {
  if (other.bits_ != bits_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot merge AUC bins of ", other.bits_, " bits into ", bits_));
  }
  for (size_t b = 0; b < positive_.size(); ++b) {
    positive_[b] += other.positive_[b];
    negative_[b] += other.negative_[b];
  }
  positives_ += other.positives_;
  negatives_ += other.negatives_;
  saw_nan_ = saw_nan_ || other.saw_nan_;
  return absl::OkStatus();
}

double BinnedAuc::Value() const {
  if (saw_nan_ || positives_ == 0 || negatives_ == 0) return kNaN;
  unsigned __int128 twice_u = 0;
  uint64_t negatives_below = 0;
  for (size_t b = 0; b < positive_.size(); ++b) {
    twice_u += static_cast<unsigned __int128>(positive_[b]) *
               (2 * negatives_below + negative_[b]);
    negatives_below += negative_[b];
  }
  const double pairs = static_cast<double>(positives_) * negatives_;
  return static_cast<double>(twice_u) / (2.0 * pairs);
}

double BinnedAuc::ErrorBound() const {
  if (saw_nan_ || positives_ == 0 || negatives_ == 0) return kNaN;
  unsigned __int128 shared = 0;
  for (size_t b = 0; b < positive_.size(); ++b) {
    shared += static_cast<unsigned __int128>(positive_[b]) * negative_[b];
  }
  const double pairs = static_cast<double>(positives_) * negatives_;
  return 0.5 * static_cast<double>(shared) / pairs;
}

void LogLoss::AddProbability(double p, double label) {
  p = std::clamp(p, kEpsilon, 1.0 - kEpsilon);
  sum_ -= label * std::log(p) + (1.0 - label) * std::log1p(-p);
  ++count_;
}

void LogLoss::AddLogit(double z, double label) {
  // softplus(z) = log(1 + e^z) = max(z, 0) + log1p(e^-|z|).
  const double softplus = std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z)));
  sum_ += softplus - label * z;
  ++count_;
}

double LogLoss::Value() const {
  return count_ > 0 ? sum_ / static_cast<double>(count_) : kNaN;
}

double Rmse::Mse() const {
  return count_ > 0 ? sum_squares_ / static_cast<double>(count_) : kNaN;
}

double Rmse::Value() const { return std::sqrt(Mse()); }

double Accuracy::Value() const {
  return count_ > 0 ? static_cast<double>(correct_) / count_ : kNaN;
}

}  // namespace ps
