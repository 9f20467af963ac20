#include "worker/loop/evaluator.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/platform/status.h"

namespace ps::worker {

absl::StatusOr<TestScore> ScoreOnTestData(TrainableModel& model,
                                          client::ParameterAccess* params,
                                          const TestReaderOpener& open,
                                          int64_t clock, int64_t max_examples) {
  constexpr int64_t kEvalBatch = 1000;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<data::BatchReader> reader, open());
  const bool sparse = !model.sparse_tables().empty();
  double loss_sum = 0;
  ModelEvaluation all;
  std::vector<std::vector<float>> rows;
  while (max_examples <= 0 || all.examples < max_examples) {
    const int want = static_cast<int>(
        max_examples <= 0 ? kEvalBatch
                          : std::min(kEvalBatch, max_examples - all.examples));
    PS_ASSIGN_OR_RETURN(const data::Batch batch, reader->Next(want));
    if (batch.size == 0) break;
    if (sparse) {
      // Every table's rows in one call.
      PS_ASSIGN_OR_RETURN(const std::vector<std::vector<uint64_t>> keys,
                          model.PrepareSparse(batch));
      rows.resize(keys.size());
      client::PullArgs pull;
      pull.clock = clock;
      for (size_t t = 0; t < keys.size(); ++t) {
        rows[t].resize(keys[t].size() *
                       static_cast<size_t>(model.sparse_tables()[t].dim));
        pull.rows.push_back(
            {static_cast<int>(t), keys[t], absl::MakeSpan(rows[t])});
      }
      if (params == nullptr) {
        return absl::InvalidArgumentError(
            "a model with sparse tables needs a parameter access");
      }
      PS_RETURN_IF_ERROR(params->Pull(std::move(pull)).Wait().status());
      for (size_t t = 0; t < keys.size(); ++t) {
        PS_RETURN_IF_ERROR(model.SetSparseRows(static_cast<int>(t), rows[t]));
      }
    }
    PS_ASSIGN_OR_RETURN(const ModelEvaluation e, model.Evaluate(batch));
    loss_sum += static_cast<double>(e.loss) * e.examples;
    all.correct += e.correct;
    all.examples += e.examples;
    all.head = e.head;
    all.auc.Merge(e.auc);
    all.log_loss.Merge(e.log_loss);
    all.rmse.Merge(e.rmse);
  }
  if (all.examples == 0) {
    return absl::FailedPreconditionError("no test example");
  }
  TestScore score;
  score.accuracy = static_cast<double>(all.correct) / all.examples;
  score.loss = loss_sum / all.examples;
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

TestScorer TestDataScorer(TestReaderOpener open,
                          client::ParameterAccess* params,
                          int64_t max_examples) {
  if (open == nullptr) return nullptr;
  return [open = std::move(open), params, max_examples](TrainableModel* model,
                                                        int64_t step) {
    return ScoreOnTestData(*model, params, open, step, max_examples);
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
