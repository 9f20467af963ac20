#include "worker/loop/evaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/platform/fake_clock.h"
#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "worker/client/local_parameter_access.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker {
namespace {

// A model that only evaluates: a batch of examples [begin, begin + count)
// (Batch::first_example, size) scores correct = count / 2 and loss = 1 +
// begin / 1000. Records the ranges.
class ScriptedModel : public TrainableModel {
 public:
  const std::vector<ParameterInfo>& parameters() const override {
    return none_;
  }
  bool SplitsRows(int) const override { return false; }
  kernels::DeviceSpan<float> parameter(int) override { return {}; }
  kernels::DeviceSpan<const float> gradient(int) const override { return {}; }
  absl::Status SetParameterRange(int, int64_t,
                                 absl::Span<const float>) override {
    return absl::UnimplementedError("evaluation only");
  }
  absl::Status GetGradientRange(int, int64_t, absl::Span<float>) override {
    return absl::UnimplementedError("evaluation only");
  }
  absl::Status SwapParameterBuffer(int, kernels::DeviceBuffer&) override {
    return absl::UnimplementedError("evaluation only");
  }
  absl::Status SwapGradientBuffer(int, kernels::DeviceBuffer&) override {
    return absl::UnimplementedError("evaluation only");
  }
  const std::vector<SparseTableInfo>& sparse_tables() const override {
    return no_tables_;
  }
  absl::StatusOr<std::vector<std::vector<uint64_t>>> PrepareSparse(
      const data::Batch&) override {
    return std::vector<std::vector<uint64_t>>();
  }
  absl::Status SetSparseRows(int, absl::Span<const float>) override {
    return absl::UnimplementedError("no tables");
  }
  absl::Status GetSparseGradient(int, absl::Span<float>) override {
    return absl::UnimplementedError("no tables");
  }
  absl::StatusOr<float> TrainStep(const data::Batch&,
                                  const ModelStepHooks&) override {
    return absl::UnimplementedError("evaluation only");
  }
  absl::StatusOr<ModelEvaluation> Evaluate(const data::Batch& b) override {
    const int64_t begin = b.first_example, count = b.size;
    ranges.push_back({begin, begin + count});
    if (!status.ok()) return status;
    ModelEvaluation e;
    e.loss = 1.0f + static_cast<float>(begin / 1000);
    e.correct = count / 2;
    e.examples = count;
    e.head = head;
    if (head == HeadSpec::SIGMOID_CROSS_ENTROPY) {
      // Each batch ranks its one positive above its one negative except
      // the batch at 1000, which ranks them the other way.
      e.auc.Add(begin == 1000 ? 0.1f : 0.9f, 1.0f);
      e.auc.Add(begin == 1000 ? 0.9f : 0.1f, 0.0f);
      e.log_loss = LogLoss(0.2 * count, count);
    } else if (head == HeadSpec::MEAN_SQUARED_ERROR) {
      e.rmse = Rmse(4.0 * count, count);
    }
    return e;
  }

  std::vector<std::pair<int64_t, int64_t>> ranges;
  absl::Status status;
  HeadSpec::Loss head = HeadSpec::SOFTMAX_CROSS_ENTROPY;

 private:
  std::vector<ParameterInfo> none_;
  std::vector<SparseTableInfo> no_tables_;
};

// `n` test examples: ratings 2 of item e by user e (batches as asked,
// numbered by first_example; the scripted model reads no more than that).
class RatingsReader : public data::BatchReader {
 public:
  explicit RatingsReader(int64_t n) : BatchReader({}), n_(n) {}
  absl::StatusOr<data::Batch> Next(int max_examples) override {
    const int64_t size = std::min<int64_t>(max_examples, n_ - at_);
    std::vector<uint64_t> ids;
    for (int64_t e = 0; e < size; ++e) ids.push_back(at_ + e);
    data::Batch b =
        model::MfBatch(ids, ids, std::vector<float>(ids.size(), 2.0f));
    b.first_example = at_;
    at_ += size;
    return b;
  }
  int64_t position() const override { return at_; }
  data::ReaderStats stats() const override { return {}; }

 private:
  const int64_t n_;
  int64_t at_ = 0;
};

TestReaderOpener TestSet(int64_t n) {
  return [n]() -> absl::StatusOr<std::unique_ptr<data::BatchReader>> {
    return std::make_unique<RatingsReader>(n);
  };
}

// The test_* points sent, by name, with their steps.
struct Sent {
  std::vector<std::pair<std::string, MetricPoint>> points;
  MetricSink Sink() {
    return [this](std::vector<MetricPoint> p, bool) {
      for (const MetricPoint& m : p) points.push_back({m.name(), m});
    };
  }
};

class EvaluatorTest : public testing::Test {
 protected:
  Evaluator Make(TestReaderOpener test, int64_t every, int64_t examples,
                 int64_t start_clock) {
    EvaluatorOptions o;
    o.eval_every_steps = every;
    o.is_evaluator = [this] { return evaluator_; };
    return Evaluator(TestDataScorer(std::move(test), nullptr, examples),
                     &stamp_, sent_.Sink(), o, start_clock);
  }
  FakeClock clock_;
  MetricStamp stamp_{&clock_, 100};
  Sent sent_;
  bool evaluator_ = true;
  ScriptedModel model_;
};

TEST_F(EvaluatorTest, DueAtTheMultiplesAfterTheStartClock) {
  struct Case {
    int64_t start, first_due;
  } cases[] = {{0, 100}, {99, 100}, {100, 200}, {250, 300}};
  for (const Case& c : cases) {
    Evaluator e = Make(TestSet(10), 100, 0, c.start);
    EXPECT_FALSE(e.Due(c.first_due - 1)) << "start " << c.start;
    EXPECT_TRUE(e.Due(c.first_due)) << "start " << c.start;
  }
}

TEST_F(EvaluatorTest, AfterAnEvaluationTheNextIsDueAtTheNextMultiple) {
  Evaluator e = Make(TestSet(10), 100, 0, 0);
  ASSERT_TRUE(e.EvaluateDue(&model_, 100).ok());
  EXPECT_FALSE(e.Due(199));
  EXPECT_TRUE(e.Due(200));
  // A BSP catch-up jumped past a multiple: the next is still a multiple.
  ASSERT_TRUE(e.EvaluateDue(&model_, 305).ok());
  EXPECT_FALSE(e.Due(399));
  EXPECT_TRUE(e.Due(400));
  EXPECT_EQ(model_.ranges.size(), 2u);
}

TEST_F(EvaluatorTest, ScoresInBatchesOfAThousandAndReports) {
  Evaluator e = Make(TestSet(2500), 100, 0, 0);
  EXPECT_EQ(e.test_accuracy(), -1);
  clock_.AdvanceMs(40);
  ASSERT_TRUE(e.EvaluateDue(&model_, 100).ok());
  EXPECT_EQ(model_.ranges, (std::vector<std::pair<int64_t, int64_t>>{
                               {0, 1000}, {1000, 2000}, {2000, 2500}}));
  // 500 + 500 + 250 correct of 2500; loss (1 x 1000 + 2 x 1000 + 3 x 500)
  // / 2500.
  EXPECT_DOUBLE_EQ(e.test_accuracy(), 0.5);
  ASSERT_EQ(sent_.points.size(), 2u);
  EXPECT_EQ(sent_.points[0].first, "test_accuracy");
  EXPECT_DOUBLE_EQ(sent_.points[0].second.value(), 0.5);
  EXPECT_EQ(sent_.points[1].first, "test_loss");
  EXPECT_DOUBLE_EQ(sent_.points[1].second.value(), 1.8);
  for (const auto& [name, p] : sent_.points) {
    EXPECT_EQ(p.step(), 100) << name;
    EXPECT_DOUBLE_EQ(p.epoch(), 1) << name;
    EXPECT_EQ(p.time_ms(), 40) << name;
    EXPECT_FALSE(p.final_model()) << name;
  }
}

TEST_F(EvaluatorTest, AnEvaluationOfTheFinalModelIsMarkedSo) {
  Evaluator e = Make(TestSet(10), 100, 0, 0);
  ASSERT_TRUE(e.Evaluate(&model_, 120, /*final_model=*/true).ok());
  ASSERT_EQ(sent_.points.size(), 2u);
  for (const auto& [name, p] : sent_.points) {
    EXPECT_TRUE(p.final_model()) << name;
    EXPECT_EQ(p.step(), 120) << name;
  }
}

// A sigmoid head reports AUC and log loss merged over the batches (not
// averaged per batch); a squared-error head the RMSE.
TEST_F(EvaluatorTest, ReportsWhatTheModelsHeadScores) {
  model_.head = HeadSpec::SIGMOID_CROSS_ENTROPY;
  Evaluator e = Make(TestSet(2500), 100, 0, 0);
  ASSERT_TRUE(e.EvaluateDue(&model_, 100).ok());
  std::map<std::string, double> got;
  for (const auto& [name, p] : sent_.points) got[name] = p.value();
  // Positives 0.9, 0.1, 0.9 against negatives 0.1, 0.9, 0.1: of the 9
  // pairs, 4 ordered and 4 tied (counting one half).
  EXPECT_NEAR(got["test_auc"], (4 + 0.5 * 4) / 9.0, 1e-12);
  EXPECT_NEAR(got["test_logloss"], 0.2, 1e-12);
  EXPECT_EQ(got.count("test_accuracy"), 1u);
  EXPECT_EQ(got.count("test_loss"), 1u);

  model_.head = HeadSpec::MEAN_SQUARED_ERROR;
  sent_.points.clear();
  ASSERT_TRUE(e.EvaluateDue(&model_, 200).ok());
  got.clear();
  for (const auto& [name, p] : sent_.points) got[name] = p.value();
  EXPECT_EQ(got.size(), 2u);
  EXPECT_NEAR(got["test_rmse"], 2.0, 1e-12);
  EXPECT_EQ(got.count("test_loss"), 1u);
}

TEST_F(EvaluatorTest, EvalExamplesCapsTheTestSet) {
  Evaluator capped = Make(TestSet(2500), 100, 1200, 0);
  ASSERT_TRUE(capped.Evaluate(&model_, 7, false).ok());
  EXPECT_EQ(model_.ranges, (std::vector<std::pair<int64_t, int64_t>>{
                               {0, 1000}, {1000, 1200}}));
  EXPECT_DOUBLE_EQ(capped.test_accuracy(), 600.0 / 1200);
  // More than there are: all of them.
  model_.ranges.clear();
  Evaluator all = Make(TestSet(30), 100, 1200, 0);
  ASSERT_TRUE(all.Evaluate(&model_, 7, false).ok());
  EXPECT_EQ(model_.ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, 30}}));
}

TEST_F(EvaluatorTest, OnlyTheWorkerThatHoldsTheRoleNowEvaluates) {
  Evaluator e = Make(TestSet(10), 100, 0, 0);
  evaluator_ = false;
  EXPECT_FALSE(e.IsEvaluator());
  ASSERT_TRUE(e.EvaluateDue(&model_, 100).ok());
  EXPECT_TRUE(model_.ranges.empty());
  EXPECT_TRUE(sent_.points.empty());
  EXPECT_EQ(e.test_accuracy(), -1);
  // The cadence moved on all the same.
  EXPECT_FALSE(e.Due(199));
  // The role moved here (the evaluator was evicted).
  evaluator_ = true;
  EXPECT_TRUE(e.IsEvaluator());
  ASSERT_TRUE(e.EvaluateDue(&model_, 200).ok());
  EXPECT_EQ(model_.ranges.size(), 1u);
  EXPECT_EQ(sent_.points.size(), 2u);
}

TEST_F(EvaluatorTest, WithoutATestSetThereIsNothingToDo) {
  Evaluator e = Make(nullptr, 100, 0, 0);
  ASSERT_TRUE(e.EvaluateDue(&model_, 100).ok());
  ASSERT_TRUE(e.Evaluate(&model_, 150, true).ok());
  EXPECT_TRUE(model_.ranges.empty());
  EXPECT_TRUE(sent_.points.empty());
  EXPECT_TRUE(e.Due(200));
  EXPECT_FALSE(e.Due(199));
}

TEST_F(EvaluatorTest, TheModelsErrorsReturnAndNothingIsReported) {
  Evaluator e = Make(TestSet(2500), 100, 0, 0);
  model_.status = absl::InternalError("device lost");
  EXPECT_EQ(e.EvaluateDue(&model_, 100).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(sent_.points.empty());
  EXPECT_EQ(e.test_accuracy(), -1);
  // Still due: the evaluation did not happen.
  EXPECT_TRUE(e.Due(100));
}

}  // namespace
}  // namespace ps::worker

namespace ps::worker {
namespace {

// The scorer is the loop's: called with the step, its score reported; no
// scorer, nothing scored.
TEST(EvaluatorScorer, ScoresWithTheLoopsScorer) {
  FakeClock clock;
  MetricStamp stamp(&clock, 100);
  std::vector<std::string> names;
  MetricSink sink = [&names](std::vector<MetricPoint> p, bool) {
    for (const MetricPoint& m : p) names.push_back(m.name());
  };
  EvaluatorOptions o;
  o.eval_every_steps = 10;
  o.is_evaluator = [] { return true; };
  std::vector<int64_t> asked;
  Evaluator e(
      [&asked](TrainableModel*, int64_t step) -> absl::StatusOr<TestScore> {
        asked.push_back(step);
        TestScore s;
        s.head = HeadSpec::MEAN_SQUARED_ERROR;
        s.rmse = 0.5;
        return s;
      },
      &stamp, sink, o, 3);
  EXPECT_TRUE(e.scores());
  EXPECT_FALSE(e.Due(9));
  ASSERT_TRUE(e.Due(10));
  ASSERT_TRUE(e.EvaluateDue(nullptr, 12).ok());
  EXPECT_FALSE(e.Due(19));
  EXPECT_TRUE(e.Due(20));
  EXPECT_EQ(asked, (std::vector<int64_t>{12}));
  EXPECT_NE(std::find(names.begin(), names.end(), "test_rmse"), names.end());

  Evaluator none(nullptr, &stamp, sink, o, 0);
  EXPECT_FALSE(none.scores());
  EXPECT_TRUE(none.Evaluate(nullptr, 5, true).ok());
  EXPECT_EQ(asked.size(), 1u);
}

// A model with sparse tables is scored on each test batch's rows, pulled
// at the step in one call per batch: with every row zero the MF model
// predicts 0 for a rating of 2.
TEST(ScoreOnTestData, PullsEachBatchsRowsAtTheStep) {
  std::unique_ptr<kernels::Backend> backend = *kernels::CreateCpuBackend({});
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(model::kMfModelSpec,
                                                            &spec));
  absl::StatusOr<std::unique_ptr<TrainableModel>> m =
      model::CreateLayerModel(spec, 0, backend.get());
  ASSERT_TRUE(m.ok()) << m.status();
  client::LocalParameterAccess params(
      {},
      {{.name = "users", .dim = 4, .init_scale = 0.0f},
       {.name = "items", .dim = 4, .init_scale = 0.0f}},
      /*learning_rate=*/0.1f, /*seed=*/1);
  const TestReaderOpener open =
      []() -> absl::StatusOr<std::unique_ptr<data::BatchReader>> {
    return std::make_unique<RatingsReader>(2300);
  };
  absl::StatusOr<TestScore> s = ScoreOnTestData(**m, &params, open, 3, 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->head, HeadSpec::MEAN_SQUARED_ERROR);
  EXPECT_NEAR(s->rmse, 2.0, 1e-6);
  EXPECT_EQ(params.row_pulls(), 3);  // batches of 1000, 1000 and 300
  // Capped at 1500 examples: two batches.
  s = ScoreOnTestData(**m, &params, open, 3, 1500);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(params.row_pulls(), 5);
  // Its rows need an access; no test example is an error.
  EXPECT_EQ(ScoreOnTestData(**m, nullptr, open, 3, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const TestReaderOpener empty =
      []() -> absl::StatusOr<std::unique_ptr<data::BatchReader>> {
    return std::make_unique<RatingsReader>(0);
  };
  EXPECT_EQ(ScoreOnTestData(**m, &params, empty, 3, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::worker
