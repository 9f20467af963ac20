// Zipf-distributed integers in [1, n]: P(k) proportional to 1 / k^s. By
// rejection-inversion (Hormann and Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996), as Apache
// Commons RNG does: O(1) time and memory whatever n, a few log/exp per draw.
#ifndef PS_TOOLS_DATA_ZIPF_H_
#define PS_TOOLS_DATA_ZIPF_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/data/random.h"

namespace ps::data_tools {

class ZipfSampler {
 public:
  // INVALID_ARGUMENT unless n >= 1 and s > 0.
  static absl::StatusOr<ZipfSampler> Create(int64_t n, double s);

  int64_t Sample(worker::data::SplitMix64& rng) const;

  int64_t n() const { return n_; }
  double exponent() const { return s_; }

 private:
  ZipfSampler(int64_t n, double s);
  double H(double x) const;
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;

  int64_t n_;
  double s_;
  double h_integral_x1_;
  double h_integral_n_;
  double shortcut_;
};

}  // namespace ps::data_tools

#endif  // PS_TOOLS_DATA_ZIPF_H_
