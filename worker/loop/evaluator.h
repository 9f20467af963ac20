// Test-set evaluation during training: when it is due (every eval_every
// steps), on the worker that holds the evaluator role at that moment, by
// the loop's scorer (the first eval_examples of the test data: the IDX test
// set or the test files, worker/loop/training_data.h); reports the metrics
// the model's head implies.
#ifndef PS_WORKER_LOOP_EVALUATOR_H_
#define PS_WORKER_LOOP_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/client/parameter_access.h"
#include "worker/data/batch_reader.h"
#include "worker/loop/metric_window.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {

struct TestScore {
  double accuracy = 0;
  double loss = 0;  // mean over the examples
  // As the model's head reports them (ModelEvaluation), merged over the
  // batches: a sigmoid head's AUC and log loss, a squared-error head's RMSE.
  HeadSpec::Loss head = HeadSpec::SOFTMAX_CROSS_ENTROPY;
  double auc = 0;
  double log_loss = 0;
  double rmse = 0;
};

// Opens the test data, read in the same order every time.
using TestReaderOpener =
    std::function<absl::StatusOr<std::unique_ptr<data::BatchReader>>()>;

// `model` on the first `max_examples` (0: all) examples `open` reads, in
// batches of 1000, on the dense weights the model holds and, for a model
// with sparse tables, each batch's rows pulled from `params` at `clock`
// (params may be null for a model without). The reader's, the model's and
// the pulls' errors; FAILED_PRECONDITION for no test example.
absl::StatusOr<TestScore> ScoreOnTestData(TrainableModel& model,
                                          client::ParameterAccess* params,
                                          const TestReaderOpener& open,
                                          int64_t clock, int64_t max_examples);

// Sends `score` stamped `step` as the metrics its head implies
// (test_auc, test_logloss, test_accuracy and test_loss for a sigmoid head;
// test_rmse and test_loss for squared error; test_accuracy and test_loss
// otherwise), marked MetricPoint.final_model when `final_model`, and logs
// them.
void ReportTestScore(const TestScore& score, const MetricStamp& stamp,
                     const MetricSink& sink, int64_t step, bool final_model);

// Scores the model, which holds the weights of step `step`.
using TestScorer = std::function<absl::StatusOr<TestScore>(
    TrainableModel* model, int64_t step)>;

// ScoreOnTestData as a scorer (not owning `params`); null for a null
// `open` (nothing to evaluate).
TestScorer TestDataScorer(TestReaderOpener open,
                          client::ParameterAccess* params,
                          int64_t max_examples);

struct EvaluatorOptions {
  int64_t eval_every_steps = 1;  // at least 1
  // Whether this worker evaluates now (the role moves when the coordinator
  // evicts the evaluator); asked at every evaluation. Required.
  std::function<bool()> is_evaluator;
};

// Keeps the cadence and scores the model. `stamp` is not owned; `scorer`
// may be null (nothing to evaluate). Thread-compatible.
class Evaluator {
 public:
  // The first evaluation is due at the first multiple of eval_every_steps
  // after `start_clock`.
  Evaluator(TestScorer scorer, const MetricStamp* stamp, MetricSink sink,
            EvaluatorOptions options, int64_t start_clock);

  // Whether an evaluation is due at `clock` (whatever the role: every
  // worker's step is shaped alike).
  bool Due(int64_t clock) const { return clock >= next_eval_; }
  bool IsEvaluator() const { return options_.is_evaluator(); }
  // Whether Evaluate() would score: this worker evaluates and has a
  // scorer.
  bool scores() const { return scorer_ != nullptr && IsEvaluator(); }

  // The evaluation due at `clock`: Evaluate(model, clock), then the next
  // one is due at the next multiple of eval_every_steps after `clock`.
  absl::Status EvaluateDue(TrainableModel* model, int64_t clock);
  // Scores `model` now and reports it stamped `step` (marked as the job's
  // final model when `final_model`), if this worker is the evaluator and
  // there is a scorer; otherwise does nothing.
  absl::Status Evaluate(TrainableModel* model, int64_t step, bool final_model);

  // The last evaluation's accuracy; -1 before any.
  double test_accuracy() const { return test_accuracy_; }

 private:
  const TestScorer scorer_;
  const MetricStamp* const stamp_;
  const MetricSink sink_;
  const EvaluatorOptions options_;
  int64_t next_eval_;
  double test_accuracy_ = -1;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_EVALUATOR_H_
