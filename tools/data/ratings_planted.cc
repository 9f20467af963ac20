#include "tools/data/ratings_planted.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/data/random.h"

namespace ps::data_tools {
namespace {

using worker::data::HashWords;
using worker::data::Mix64;
using worker::data::SplitMix64;

constexpr double kSqrt3 = 1.7320508075688772;
constexpr uint64_t kUserSalt = 0x75736572ULL;
constexpr uint64_t kItemSalt = 0x6974656dULL;
constexpr uint64_t kTimeSalt = 0x74696d65ULL;
// ml-100k's ratings span 1997-09-20 .. 1998-04-23.
constexpr int64_t kFirstTimestamp = 874724710;
constexpr int64_t kTimestampSpan = 18000000;

// Uniform with mean 0 and standard deviation 1, from a hash.
double UnitUniform(uint64_t hash) {
  return kSqrt3 * (2.0 * static_cast<double>(hash >> 11) * 0x1.0p-53 - 1.0);
}

double Normal(SplitMix64& rng) {
  const double u1 = 1.0 - rng.Uniform();
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, result.ptr);
}

}  // namespace

absl::StatusOr<RatingsPlanted> RatingsPlanted::Create(
    const RatingsPlantedOptions& options) {
  if (options.users < 1 || options.items < 1 || options.rank < 1 ||
      options.rank > 256 || !(options.user_bias_sd >= 0) ||
      !(options.item_bias_sd >= 0) || !(options.interaction_sd >= 0) ||
      !(options.noise_sd > 0) || !(options.user_zipf >= 0) ||
      !(options.item_zipf >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ratings model: users ", options.users, " and items ",
                     options.items, " (>= 1), rank ", options.rank,
                     " (1 .. 256), sds >= 0 with noise_sd ", options.noise_sd,
                     " > 0, Zipf exponents >= 0 (0: uniform)"));
  }
  std::optional<ZipfSampler> users;
  std::optional<ZipfSampler> items;
  if (options.user_zipf > 0) {
    absl::StatusOr<ZipfSampler> z =
        ZipfSampler::Create(options.users, options.user_zipf);
    if (!z.ok()) return z.status();
    users = *z;
  }
  if (options.item_zipf > 0) {
    absl::StatusOr<ZipfSampler> z =
        ZipfSampler::Create(options.items, options.item_zipf);
    if (!z.ok()) return z.status();
    items = *z;
  }
  return RatingsPlanted(options, users, items);
}

RatingsPlanted::RatingsPlanted(const RatingsPlantedOptions& options,
                               std::optional<ZipfSampler> users,
                               std::optional<ZipfSampler> items)
    : options_(options), user_zipf_(users), item_zipf_(items) {
  // Components of variance tau^2: var(<p, q>) = rank tau^4.
  factor_scale_ = std::pow(
      options.interaction_sd * options.interaction_sd / options.rank, 0.25);
}

double RatingsPlanted::Score(int64_t user, int64_t item) const {
  const uint64_t u = HashWords(options_.seed ^ kUserSalt, user);
  const uint64_t i = HashWords(options_.seed ^ kItemSalt, item);
  double score = options_.global_mean +
                 options_.user_bias_sd * UnitUniform(Mix64(u)) +
                 options_.item_bias_sd * UnitUniform(Mix64(i));
  double dot = 0.0;
  for (int c = 0; c < options_.rank; ++c) {
    dot += UnitUniform(HashWords(u, c + 1)) * UnitUniform(HashWords(i, c + 1));
  }
  return score + factor_scale_ * factor_scale_ * dot;
}

double RatingsPlanted::Expected(double score) const {
  // Values lo, lo + step, ..., hi; x rounds to the nearest (ties up) and
  // clamps, so value v takes x in [v - step/2, v + step/2), the ends open.
  const double step = options_.half_stars ? 0.5 : 1.0;
  const double lo = options_.half_stars ? 0.5 : 1.0;
  const double hi = 5.0;
  double expected = 0.0;
  double below = 0.0;  // P(x < v - step/2)
  for (double v = lo; v <= hi + 1e-9; v += step) {
    const double upper =
        v + step > hi + 1e-9
            ? 1.0
            : NormalCdf((v + 0.5 * step - score) / options_.noise_sd);
    expected += v * (upper - below);
    below = upper;
  }
  return expected;
}

RatingsPlanted::Rating RatingsPlanted::Generate(int stream, int64_t index,
                                                std::string* line) const {
  SplitMix64 rng(HashWords(options_.seed, static_cast<uint64_t>(stream) + 1,
                           static_cast<uint64_t>(index)));
  Rating r;
  r.user = user_zipf_ ? user_zipf_->Sample(rng)
                      : 1 + static_cast<int64_t>(rng.Below(options_.users));
  r.item = item_zipf_ ? item_zipf_->Sample(rng)
                      : 1 + static_cast<int64_t>(rng.Below(options_.items));
  r.score = Score(r.user, r.item);
  r.expected = Expected(r.score);
  const double x = r.score + options_.noise_sd * Normal(rng);
  if (options_.half_stars) {
    r.rating = std::clamp(std::floor(2 * x + 0.5) / 2, 0.5, 5.0);
  } else {
    r.rating = std::clamp(std::floor(x + 0.5), 1.0, 5.0);
  }
  const char* sep = options_.double_colon ? "::" : "\t";
  AppendInt(r.user, line);
  line->append(sep);
  AppendInt(r.item, line);
  line->append(sep);
  if (options_.half_stars && r.rating != std::floor(r.rating)) {
    absl::StrAppendFormat(line, "%.1f", r.rating);
  } else {
    AppendInt(static_cast<int64_t>(r.rating), line);
  }
  line->append(sep);
  AppendInt(kFirstTimestamp +
                static_cast<int64_t>(HashWords(kTimeSalt, stream, index) %
                                     kTimestampSpan),
            line);
  return r;
}

}  // namespace ps::data_tools
