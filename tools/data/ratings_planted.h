// A rating model with known parameters that writes MovieLens-format lines
// (worker/data/movielens_format.h): the ground truth behind generated
// ratings, so tests and benchmarks know the best achievable RMSE.
//
// The model, for one rating:
//   user u ~ Zipf(user_zipf) over 1..users (a few users rate a lot), item
//     i ~ Zipf(item_zipf) over 1..items (a few items are popular); exponent
//     0 means uniform. Ids are the ranks, so user 1 is the most active;
//   score s = global_mean + b_u + b_i + <p_u, q_i>, with biases and rank-k
//     factors drawn (uniform, from hashes of (seed, id)) so that sd(b_u) =
//     user_bias_sd, sd(b_i) = item_bias_sd, sd(<p_u, q_i>) = interaction_sd;
//   x = s + N(0, noise_sd^2), written as the nearest allowed rating: whole
//     stars 1..5 (MovieLens 100k and 1M), or half stars 0.5..5 (later sets).
// The best predictor of a rating under squared error is E[rating | u, i],
// computed exactly from the normal CDF over the allowed values; its RMSE on
// the test file is the noise floor no model can beat (in expectation).
#ifndef PS_TOOLS_DATA_RATINGS_PLANTED_H_
#define PS_TOOLS_DATA_RATINGS_PLANTED_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tools/data/zipf.h"

namespace ps::data_tools {

struct RatingsPlantedOptions {
  uint64_t seed = 1;
  int64_t users = 943;  // MovieLens 100k's counts
  int64_t items = 1682;
  int rank = 8;
  double global_mean = 3.5;
  double user_bias_sd = 0.3;
  double item_bias_sd = 0.4;
  double interaction_sd = 0.6;
  double noise_sd = 0.7;
  double user_zipf = 0.5;
  double item_zipf = 0.9;
  bool half_stars = false;
  bool double_colon = false;  // "::" (ratings.dat) instead of tabs (u.data)
};

class RatingsPlanted {
 public:
  // INVALID_ARGUMENT for users or items < 1, rank outside [1, 256], a
  // negative sd, noise_sd <= 0, or a negative exponent.
  static absl::StatusOr<RatingsPlanted> Create(
      const RatingsPlantedOptions& options);

  struct Rating {
    int64_t user = 0;
    int64_t item = 0;
    double rating = 0.0;    // as written
    double score = 0.0;     // s, before noise and rounding
    double expected = 0.0;  // E[rating | user, item]
  };

  // Appends rating `index` of stream `stream` (0 train, 1 test) as one line
  // without its newline. A pure function of (options, stream, index).
  Rating Generate(int stream, int64_t index, std::string* line) const;

  // E[rating | score s] over the allowed values.
  double Expected(double score) const;

  const RatingsPlantedOptions& options() const { return options_; }

 private:
  RatingsPlanted(const RatingsPlantedOptions& options,
                 std::optional<ZipfSampler> users,
                 std::optional<ZipfSampler> items);
  double Score(int64_t user, int64_t item) const;

  RatingsPlantedOptions options_;
  std::optional<ZipfSampler> user_zipf_;  // empty: uniform
  std::optional<ZipfSampler> item_zipf_;
  double factor_scale_ = 0.0;
};

}  // namespace ps::data_tools

#endif  // PS_TOOLS_DATA_RATINGS_PLANTED_H_
