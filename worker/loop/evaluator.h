// Test-set evaluation during training, for both loops: when it is due
// (every eval_every steps), on the worker that holds the evaluator role at
// that moment, by the loop's scorer (the first eval_examples of the IDX
// test set, or of the test files: worker/loop/data_trainer.h); reports the
// metrics the model's head implies.
#ifndef PS_WORKER_LOOP_EVALUATOR_H_
#define PS_WORKER_LOOP_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
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

// `model` over the first `n` examples of `test` (n <= test.num_examples, at
// least 1), in batches of 1000. The model's errors.
absl::StatusOr<TestScore> ScoreOnTestSet(TrainableModel* model,
                                         const Dataset& test, int64_t n);

// Sends `score` stamped `step` as the metrics its head implies
// (test_auc, test_logloss, test_accuracy and test_loss for a sigmoid head;
// test_rmse and test_loss for squared error; test_accuracy and test_loss
// otherwise), marked MetricPoint.final_model when `final_model`, and logs
// them.
void ReportTestScore(const TestScore& score, const MetricStamp& stamp,
                     const MetricSink& sink, int64_t step, bool final_model);

// Scores the model on the weights of step `step` (the scorer may pull
// them itself).
using TestScorer = std::function<absl::StatusOr<TestScore>(
    TrainableModel* model, int64_t step)>;

// The scorer of an IDX test set: the first `eval_examples` examples of
// `test` (0: all); null for a null `test` (nothing to evaluate).
TestScorer IdxTestScorer(std::shared_ptr<const Dataset> test,
                         int64_t eval_examples);

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
