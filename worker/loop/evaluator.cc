#include "worker/loop/evaluator.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/platform/status.h"

namespace ps::worker {

absl::StatusOr<TestScore> ScoreOnTestSet(TrainableModel* model,
                                         const Dataset& test, int64_t n) {
  constexpr int64_t kEvalBatch = 1000;
  double loss_sum = 0;
  int64_t correct = 0;
  ModelEvaluation all;
  for (int64_t begin = 0; begin < n; begin += kEvalBatch) {
    const int64_t len = std::min(kEvalBatch, n - begin);
    PS_ASSIGN_OR_RETURN(const ModelEvaluation e,
                        model->Evaluate(test, begin, len));
    loss_sum += e.loss * e.examples;
    correct += e.correct;
    all.head = e.head;
    all.auc.Merge(e.auc);
    all.log_loss.Merge(e.log_loss);
    all.rmse.Merge(e.rmse);
  }
  TestScore score;
  score.accuracy = static_cast<double>(correct) / n;
  score.loss = loss_sum / n;
  score.head = all.head;
  score.auc = all.auc.Value();
  score.log_loss = all.log_loss.Value();
  score.rmse = all.rmse.Value();
  return score;
}

void ReportTestScore(const TestScore& score, const MetricStamp& stamp,
                     const MetricSink& sink, int64_t step, bool final_model) {
  std::vector<MetricPoint> points;
  switch (score.head) {
    case HeadSpec::SIGMOID_CROSS_ENTROPY:
      points = {stamp.Point("test_auc", score.auc, step),
                stamp.Point("test_logloss", score.log_loss, step),
                stamp.Point("test_accuracy", score.accuracy, step),
                stamp.Point("test_loss", score.loss, step)};
      std::fprintf(stderr, "worker: step %lld test auc %.4f logloss %.4f%s\n",
                   static_cast<long long>(step), score.auc, score.log_loss,
                   final_model ? " (final model)" : "");
      break;
    case HeadSpec::MEAN_SQUARED_ERROR:
      points = {stamp.Point("test_rmse", score.rmse, step),
                stamp.Point("test_loss", score.loss, step)};
      std::fprintf(stderr, "worker: step %lld test rmse %.4f%s\n",
                   static_cast<long long>(step), score.rmse,
                   final_model ? " (final model)" : "");
      break;
    default:
      points = {stamp.Point("test_accuracy", score.accuracy, step),
                stamp.Point("test_loss", score.loss, step)};
      std::fprintf(stderr, "worker: step %lld test accuracy %.4f loss %.4f%s\n",
                   static_cast<long long>(step), score.accuracy, score.loss,
                   final_model ? " (final model)" : "");
  }
  for (MetricPoint& p : points) p.set_final_model(final_model);
  sink(std::move(points), false);
}

TestScorer IdxTestScorer(std::shared_ptr<const Dataset> test,
                         int64_t eval_examples) {
  if (test == nullptr) return nullptr;
  return [test = std::move(test), eval_examples](
             TrainableModel* model, int64_t) -> absl::StatusOr<TestScore> {
    const int64_t n = eval_examples > 0
                          ? std::min<int64_t>(eval_examples, test->num_examples)
                          : test->num_examples;
    return ScoreOnTestSet(model, *test, n);
  };
}

Evaluator::Evaluator(TestScorer scorer, const MetricStamp* stamp,
                     MetricSink sink, EvaluatorOptions options,
                     int64_t start_clock)
    : scorer_(std::move(scorer)),
      stamp_(stamp),
      sink_(std::move(sink)),
      options_(std::move(options)),
      next_eval_((start_clock / options_.eval_every_steps + 1) *
                 options_.eval_every_steps) {}

absl::Status Evaluator::EvaluateDue(TrainableModel* model, int64_t clock) {
  PS_RETURN_IF_ERROR(Evaluate(model, clock, /*final_model=*/false));
  next_eval_ =
      (clock / options_.eval_every_steps + 1) * options_.eval_every_steps;
  return absl::OkStatus();
}

absl::Status Evaluator::Evaluate(TrainableModel* model, int64_t step,
                                 bool final_model) {
  if (!IsEvaluator() || scorer_ == nullptr) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(const TestScore score, scorer_(model, step));
  test_accuracy_ = score.accuracy;
  ReportTestScore(score, *stamp_, sink_, step, final_model);
  return absl::OkStatus();
}

}  // namespace ps::worker
