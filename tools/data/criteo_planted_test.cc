#include "tools/data/criteo_planted.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "common/spec/eval_metrics.h"
#include "gtest/gtest.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_format.h"

namespace ps::data_tools {
namespace {

TEST(CriteoPlanted, LinesParseAndCtrMeetsTheTarget) {
  for (const double ctr : {0.03, 0.1, 0.25}) {
    CriteoPlantedOptions options;
    options.ctr = ctr;
    options.seed = 3;
    absl::StatusOr<CriteoPlanted> model = CriteoPlanted::Create(options);
    ASSERT_TRUE(model.ok()) << model.status();
    std::unique_ptr<worker::data::LineParser> parser =
        worker::data::NewCriteoParser({});
    worker::data::BatchBuilder builder(parser->schema());
    int64_t clicks = 0;
    const int lines = 20000;
    std::vector<int> missing(39, 0);
    for (int i = 0; i < lines; ++i) {
      std::string line;
      const CriteoPlanted::Impression impression = model->Generate(0, i, &line);
      clicks += impression.label;
      ASSERT_TRUE(parser->Parse(line, &builder).ok()) << line;
      const std::vector<std::string> fields = absl::StrSplit(line, '\t');
      ASSERT_EQ(fields.size(), 40u);
      EXPECT_EQ(fields[0], impression.label ? "1" : "0");
      for (int f = 1; f < 40; ++f) missing[f - 1] += fields[f].empty();
      if (builder.size() == 1000) builder.Reset(0);
    }
    EXPECT_NEAR(static_cast<double>(clicks) / lines, ctr, 0.15 * ctr) << ctr;
    // I12 is missing about 77% of the time, C22 76%, C1 never.
    EXPECT_NEAR(missing[11] / static_cast<double>(lines), 0.77, 0.02);
    EXPECT_NEAR(missing[13 + 21] / static_cast<double>(lines), 0.76, 0.02);
    EXPECT_EQ(missing[13], 0);
  }
}

TEST(CriteoPlanted, DeterministicBySeedStreamAndIndex) {
  absl::StatusOr<CriteoPlanted> a = CriteoPlanted::Create({});
  absl::StatusOr<CriteoPlanted> b = CriteoPlanted::Create({});
  CriteoPlantedOptions other_seed;
  other_seed.seed = 2;
  absl::StatusOr<CriteoPlanted> c = CriteoPlanted::Create(other_seed);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->bias(), b->bias());
  for (int64_t i : {int64_t{0}, int64_t{17}, int64_t{1} << 40}) {
    std::string la, lb, lc, test;
    const double za = a->Generate(0, i, &la).logit;
    EXPECT_EQ(za, b->Generate(0, i, &lb).logit);
    EXPECT_EQ(la, lb);
    c->Generate(0, i, &lc);
    EXPECT_NE(la, lc);
    a->Generate(1, i, &test);
    EXPECT_NE(la, test) << "train and test streams must differ";
  }
}

// The planted logits rank the clicks well (the best achievable AUC, which
// criteo_gen reports), and a no-signal model is a coin.
TEST(CriteoPlanted, TrueLogitsPredictClicks) {
  absl::StatusOr<CriteoPlanted> model = CriteoPlanted::Create({});
  CriteoPlantedOptions flat;
  flat.signal = 0;
  flat.interaction_scale = 0;
  absl::StatusOr<CriteoPlanted> noise = CriteoPlanted::Create(flat);
  ASSERT_TRUE(model.ok() && noise.ok());
  ExactAuc auc;
  ExactAuc flat_auc;
  LogLoss logloss;
  for (int i = 0; i < 20000; ++i) {
    std::string line;
    const CriteoPlanted::Impression impression = model->Generate(1, i, &line);
    auc.Add(static_cast<float>(impression.logit), impression.label);
    logloss.AddLogit(impression.logit, impression.label);
    line.clear();
    const CriteoPlanted::Impression coin = noise->Generate(1, i, &line);
    flat_auc.Add(static_cast<float>(coin.logit), coin.label);
  }
  EXPECT_GT(auc.Value(), 0.72);
  EXPECT_LT(auc.Value(), 0.9);
  // Below the entropy of a 10% rate (0.325): the features carry information.
  EXPECT_LT(logloss.Value(), 0.3);
  // All logits equal: every pair ties.
  EXPECT_DOUBLE_EQ(flat_auc.Value(), 0.5);
}

TEST(CriteoPlanted, VocabularyFollowsScaleAndCap) {
  CriteoPlantedOptions options;
  options.vocab_scale = 0.01;
  options.max_vocab = 1000;
  absl::StatusOr<CriteoPlanted> model = CriteoPlanted::Create(options);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->vocab(0), 15);    // 1460 * 0.01, rounded up
  EXPECT_EQ(model->vocab(2), 1000);  // 10131227 * 0.01, capped
  EXPECT_EQ(model->vocab(8), 2);     // 3 * 0.01, at least 2
}

TEST(CriteoPlanted, RejectsBadOptions) {
  for (double ctr : {0.02, 0.26, std::nan("")}) {
    CriteoPlantedOptions options;
    options.ctr = ctr;
    EXPECT_FALSE(CriteoPlanted::Create(options).ok()) << ctr;
  }
  CriteoPlantedOptions rank;
  rank.interaction_rank = 65;
  EXPECT_FALSE(CriteoPlanted::Create(rank).ok());
  CriteoPlantedOptions vocab;
  vocab.max_vocab = 1;
  EXPECT_FALSE(CriteoPlanted::Create(vocab).ok());
}

}  // namespace
}  // namespace ps::data_tools
