#include "tools/data/ratings_planted.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "common/spec/eval_metrics.h"
#include "gtest/gtest.h"
#include "worker/data/batch.h"
#include "worker/data/movielens_format.h"
#include "worker/data/random.h"

namespace ps::data_tools {
namespace {

// Lines parse with the reader (both separators, both scales), ratings are
// allowed values, and the noise floor is below the planted score's RMSE and
// near the noise for whole stars.
TEST(RatingsPlanted, LinesParseAndTheNoiseFloorIsTheBest) {
  for (const bool colons : {false, true}) {
    for (const bool half : {false, true}) {
      RatingsPlantedOptions options;
      options.double_colon = colons;
      options.half_stars = half;
      absl::StatusOr<RatingsPlanted> model = RatingsPlanted::Create(options);
      ASSERT_TRUE(model.ok());
      worker::data::MovieLensOptions reader_options;
      reader_options.separator =
          colons ? worker::data::RatingsSeparator::kDoubleColon
                 : worker::data::RatingsSeparator::kTab;
      absl::StatusOr<std::unique_ptr<worker::data::LineParser>> parser =
          worker::data::NewMovieLensParser(reader_options);
      ASSERT_TRUE(parser.ok());
      worker::data::BatchBuilder builder((*parser)->schema());
      Rmse best;
      Rmse score;
      Rmse mean;
      std::set<double> values;
      for (int i = 0; i < 20000; ++i) {
        std::string line;
        const RatingsPlanted::Rating r = model->Generate(1, i, &line);
        ASSERT_TRUE((*parser)->Parse(line, &builder).ok()) << line;
        const worker::data::Batch batch = builder.Take();
        builder.Reset(0);
        EXPECT_EQ(batch.labels[0], static_cast<float>(r.rating)) << line;
        EXPECT_EQ(batch.sparse[0].keys[0], static_cast<uint64_t>(r.user));
        EXPECT_EQ(batch.sparse[1].keys[0], static_cast<uint64_t>(r.item));
        values.insert(r.rating);
        best.Add(r.expected, r.rating);
        score.Add(r.score, r.rating);
        mean.Add(3.5, r.rating);
      }
      EXPECT_EQ(values.size(), half ? 10u : 5u);
      EXPECT_LT(best.Value(), score.Value());
      EXPECT_LT(best.Value(), mean.Value() - 0.1);
      // Whole-star rounding adds about 1/12 of variance to the noise's 0.49.
      if (!half) {
        EXPECT_NEAR(best.Value(), std::sqrt(0.49 + 1.0 / 12), 0.06);
      }
    }
  }
}

TEST(RatingsPlanted, ExpectedRatingIsTheMeanOfTheRoundedNoise) {
  absl::StatusOr<RatingsPlanted> model = RatingsPlanted::Create({});
  ASSERT_TRUE(model.ok());
  // Far above 5 or below 1 the rating is pinned.
  EXPECT_NEAR(model->Expected(20.0), 5.0, 1e-12);
  EXPECT_NEAR(model->Expected(-20.0), 1.0, 1e-12);
  // At 3, symmetric: 3.
  EXPECT_NEAR(model->Expected(3.0), 3.0, 1e-12);
  // Against a Monte Carlo estimate at 4.2.
  worker::data::SplitMix64 rng(3);
  double sum = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    const double u1 = 1.0 - rng.Uniform();
    const double u2 = rng.Uniform();
    const double z =
        std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    sum += std::clamp(std::floor(4.2 + 0.7 * z + 0.5), 1.0, 5.0);
  }
  EXPECT_NEAR(model->Expected(4.2), sum / n, 0.005);
}

TEST(RatingsPlanted, DeterministicAndSkewed) {
  absl::StatusOr<RatingsPlanted> a = RatingsPlanted::Create({});
  absl::StatusOr<RatingsPlanted> b = RatingsPlanted::Create({});
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t user_one = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string la, lb;
    const RatingsPlanted::Rating r = a->Generate(0, i, &la);
    b->Generate(0, i, &lb);
    EXPECT_EQ(la, lb);
    user_one += r.user == 1;
  }
  // Zipf(0.5) over 943 users: user 1 rates about 1.7% (1 / H(943, 0.5)).
  EXPECT_GT(user_one, 40);
  EXPECT_LT(user_one, 130);

  RatingsPlantedOptions bad;
  bad.noise_sd = 0;
  EXPECT_FALSE(RatingsPlanted::Create(bad).ok());
  bad = {};
  bad.rank = 0;
  EXPECT_FALSE(RatingsPlanted::Create(bad).ok());
}

}  // namespace
}  // namespace ps::data_tools
