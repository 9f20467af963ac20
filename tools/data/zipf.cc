#include "tools/data/zipf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ps::data_tools {
namespace {

// log1p(x) / x, continuous at 0.
double Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x
                            : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

// expm1(x) / x, continuous at 0.
double Helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x
                            : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

}  // namespace

absl::StatusOr<ZipfSampler> ZipfSampler::Create(int64_t n, double s) {
  if (n < 1 || !(s > 0) || !std::isfinite(s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf needs n >= 1 and an exponent > 0, got n ", n, ", exponent ", s));
  }
  return ZipfSampler(n, s);
}

ZipfSampler::ZipfSampler(int64_t n, double s) : n_(n), s_(s) {
  h_integral_x1_ = HIntegral(1.5) - 1;
  h_integral_n_ = HIntegral(static_cast<double>(n) + 0.5);
  shortcut_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
}

// x^-s.
double ZipfSampler::H(double x) const { return std::exp(-s_ * std::log(x)); }

// The integral of H from 1 to x: (x^(1-s) - 1) / (1 - s), or log x at s = 1.
double ZipfSampler::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1 - s_) * log_x) * log_x;
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // rounding can take it just past the domain
  return std::exp(Helper1(t) * x);
}

int64_t ZipfSampler::Sample(worker::data::SplitMix64& rng) const {
  for (;;) {
    const double u =
        h_integral_n_ + rng.Uniform() * (h_integral_x1_ - h_integral_n_);
    const double x = HIntegralInverse(u);
    int64_t k = static_cast<int64_t>(x + 0.5);
    k = std::clamp<int64_t>(k, 1, n_);
    if (k - x <= shortcut_ || u >= HIntegral(static_cast<double>(k) + 0.5) -
                                       H(static_cast<double>(k))) {
      return k;
    }
  }
}

}  // namespace ps::data_tools
