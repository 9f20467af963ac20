#include "worker/data/bad_lines.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps::worker::data {
namespace {

// How many samples an error message quotes.
constexpr int kSamplesInError = 5;

}  // namespace

absl::Status ValidateBadLinePolicy(const BadLinePolicy& policy) {
  if (!(policy.max_fraction >= 0.0 && policy.max_fraction <= 1.0) ||
      policy.min_lines < 0 || policy.max_samples < 0 ||
      policy.min_bad_lines < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad-line policy: max_fraction must be in [0, 1] (got ",
                     policy.max_fraction,
                     "), min_lines, max_samples and min_bad_lines >= 0 (got ",
                     policy.min_lines, ", ", policy.max_samples, ", ",
                     policy.min_bad_lines, ")"));
  }
  return absl::OkStatus();
}

absl::Status BadLineCounter::Check(bool at_end) const {
  if (bad_ <= policy_.min_bad_lines) return absl::OkStatus();
  const int64_t base = at_end ? lines_ : std::max(lines_, policy_.min_lines);
  if (static_cast<double>(bad_) <= policy_.max_fraction * base) {
    return absl::OkStatus();
  }
  const int shown = std::min<int>(samples_.size(), kSamplesInError);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %d bad lines out of %d read (%.3g%%), more than the %.3g%% "
      "allowed (max_bad_fraction %g)%s%s%s",
      what_, bad_, lines_, 100.0 * bad_ / std::max<int64_t>(lines_, 1),
      100.0 * policy_.max_fraction, policy_.max_fraction,
      shown > 0 ? "; first: " : "",
      absl::StrJoin(samples_.begin(), samples_.begin() + shown, "; "),
      static_cast<int64_t>(samples_.size()) < bad_ ? "; ..." : ""));
}

}  // namespace ps::worker::data
