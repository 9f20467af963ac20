#include "worker/loop/data_trainer.h"

#include <algorithm>
#include <cstdio>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "common/platform/status.h"
#include "worker/data/shard_batches.h"
#include "worker/data/spec_readers.h"
#include "worker/loop/metric_window.h"
#include "worker/loop/plan_batches.h"
#include "worker/loop/sparse_step.h"
#include "worker/loop/step_pipeline.h"
#include "worker/model/layer_model.h"

namespace ps::worker {
namespace {

constexpr int kEvalBatch = 1000;

template <typename T>
absl::StatusOr<T> Annotated(absl::StatusOr<T> s, absl::string_view context) {
  if (!s.ok()) return Annotate(s.status(), context);
  return s;
}

struct Budget : DataShape {
  int64_t bad_lines = -1;  // in the counting pass; -1: none was made
};

// Training batches read ahead of their steps, by step and address: the
// step loop reads the next step's batch before its step's pushes (its keys
// ride on them), and the one after while they are on their way. A batch
// whose address the plan has changed since is read again.
class BatchesAhead {
 public:
  explicit BatchesAhead(data::ShardBatches* batches) : batches_(batches) {}

  // The batch of step `step` at `at`, read before or now (valid until
  // DropBefore passes `step`).
  absl::StatusOr<const data::Batch*> Get(int64_t step, const PlannedBatch& at) {
    for (const Entry& e : entries_) {
      if (e.step == step && e.at.data_shard == at.data_shard &&
          e.at.epoch == at.epoch && e.at.index == at.index) {
        return &e.batch;
      }
    }
    PS_ASSIGN_OR_RETURN(data::Batch batch,
                        batches_->BatchAt(at.data_shard, at.epoch, at.index));
    entries_.push_back({step, at, std::move(batch)});
    return &entries_.back().batch;
  }

  // Forgets the batches of steps before `step`.
  void DropBefore(int64_t step) {
    entries_.remove_if([step](const Entry& e) { return e.step < step; });
  }

 private:
  struct Entry {
    int64_t step = 0;
    PlannedBatch at;
    data::Batch batch;
  };
  data::ShardBatches* const batches_;
  std::list<Entry> entries_;  // a list: Get's pointers outlive insertions
};

void LogBadLines(const char* what, int64_t bad,
                 const std::vector<std::string>& samples) {
  if (bad == 0) return;
  std::fprintf(stderr, "worker: %lld bad lines in the %s; first: %s\n",
               static_cast<long long>(bad), what,
               absl::StrJoin(samples, "; ").c_str());
}

// data.max_steps; or the job's shape as the coordinator has it (a worker
// counted it: one that resumes or rejoins does not count again); or epochs
// x the smallest shard's full batches, counted.
absl::StatusOr<Budget> BudgetFor(const WorkerAssignment& a, int num_shards) {
  const DataSpec& d = a.spec().data();
  Budget b;
  if (d.max_steps() > 0) {
    b.steps_per_epoch = d.max_steps();
    b.total_steps = d.max_steps();
    return b;
  }
  if (a.shard_steps() > 0 && a.steps_per_epoch() > 0) {
    b.steps_per_epoch = a.steps_per_epoch();
    b.total_steps = a.shard_steps();
    return b;
  }
  data::ReaderStats stats;
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> counts,
                      Annotated(data::CountShardExamples(d, num_shards, &stats),
                                "counting the training examples"));
  const int64_t smallest = *std::min_element(counts.begin(), counts.end());
  std::fprintf(stderr,
               "worker: %lld training examples in %lld lines over %d data "
               "shards (the smallest holds %lld)\n",
               static_cast<long long>(stats.examples),
               static_cast<long long>(stats.lines), num_shards,
               static_cast<long long>(smallest));
  LogBadLines("training files", stats.bad_lines, stats.bad_line_samples);
  b.bad_lines = stats.bad_lines;
  b.steps_per_epoch = smallest / d.batch_size();
  b.total_steps = d.epochs() * b.steps_per_epoch;
  if (b.steps_per_epoch < 1 || b.total_steps < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no full batch of ", d.batch_size(),
                     " per data shard: the smallest of ", num_shards,
                     " data shards holds ", smallest, " examples"));
  }
  return b;
}

ModelEvaluation Merge(ModelEvaluation all, const ModelEvaluation& e) {
  all.loss += e.loss * e.examples;  // a sum until the end
  all.correct += e.correct;
  all.examples += e.examples;
  all.head = e.head;
  all.auc.Merge(e.auc);
  all.log_loss.Merge(e.log_loss);
  all.rmse.Merge(e.rmse);
  return all;
}

// Pulls the dense weights of step `clock` into `model`.
absl::Status PullDense(TrainableModel& model, client::ParameterAccess& params,
                       int64_t clock) {
  std::vector<std::vector<float>> dense;
  std::vector<absl::Span<float>> views;
  dense.reserve(model.parameters().size());
  for (const ParameterInfo& p : model.parameters()) {
    dense.emplace_back(static_cast<size_t>(p.size));
    views.push_back(absl::MakeSpan(dense.back()));
  }
  client::PullArgs pull;
  pull.clock = clock;
  pull.tensors = std::move(views);
  PS_RETURN_IF_ERROR(params.Pull(std::move(pull)).Wait().status());
  for (int i = 0; i < model.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(model.SetParameterRange(i, 0, dense[i]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestScore> ScoreOnTestFiles(TrainableModel& model,
                                           client::ParameterAccess& params,
                                           const DataSpec& d, int64_t clock,
                                           int64_t max_examples) {
  PS_RETURN_IF_ERROR(PullDense(model, params, clock));
  const std::vector<std::string> files(d.test_files().begin(),
                                       d.test_files().end());
  DataSpec in_order = d;
  in_order.set_shuffle_buffer(0);
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<data::BatchReader> reader,
      Annotated(data::OpenSpecReader(in_order, files, 0, {}), "test files"));
  ModelEvaluation all;
  while (max_examples <= 0 || all.examples < max_examples) {
    const int want = static_cast<int>(
        max_examples <= 0
            ? kEvalBatch
            : std::min<int64_t>(kEvalBatch, max_examples - all.examples));
    PS_ASSIGN_OR_RETURN(data::Batch batch,
                        Annotated(reader->Next(want), "test files"));
    if (batch.size == 0) break;
    PS_ASSIGN_OR_RETURN(const std::vector<std::vector<uint64_t>> keys,
                        model.PrepareSparse(batch));
    // Every table's rows in one call.
    std::vector<std::vector<float>> rows(keys.size());
    client::PullArgs pull;
    pull.clock = clock;
    for (size_t t = 0; t < keys.size(); ++t) {
      rows[t].resize(keys[t].size() *
                     static_cast<size_t>(model.sparse_tables()[t].dim));
      pull.rows.push_back(
          {static_cast<int>(t), keys[t], absl::MakeSpan(rows[t])});
    }
    if (!pull.rows.empty()) {
      PS_RETURN_IF_ERROR(params.Pull(std::move(pull)).Wait().status());
    }
    for (size_t t = 0; t < keys.size(); ++t) {
      PS_RETURN_IF_ERROR(model.SetSparseRows(static_cast<int>(t), rows[t]));
    }
    PS_ASSIGN_OR_RETURN(const ModelEvaluation e,
                        model.EvaluateDataBatch(batch));
    all = Merge(std::move(all), e);
  }
  if (all.examples == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no test example in ", absl::StrJoin(files, ", ")));
  }
  TestScore score;
  score.accuracy = static_cast<double>(all.correct) / all.examples;
  score.loss = all.loss / all.examples;
  score.head = all.head;
  score.auc = all.auc.Value();
  score.log_loss = all.log_loss.Value();
  score.rmse = all.rmse.Value();
  return score;
}

absl::StatusOr<TrainResult> TrainOnStreamedData(
    const WorkerAssignment& a, kernels::Backend* backend,
    client::ParameterAccess* params, MetricSink sink,
    const std::atomic<bool>* stop, const TrainerOptions& options,
    std::function<WorkerPlan()> current_plan) {
  const JobSpec& spec = a.spec();
  const DataSpec& d = spec.data();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<data::LineParser> parser,
                      data::ParserForSpec(d));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TrainableModel> model,
                      model::CreateLayerModel(
                          spec.model(), parser->schema().dense_dim, backend));
  const int num_shards = std::max(1, a.num_data_shards());
  PS_ASSIGN_OR_RETURN(const Budget budget, BudgetFor(a, num_shards));
  if (options.on_data_shape) {
    options.on_data_shape(budget.total_steps, budget.steps_per_epoch);
  }
  const std::vector<std::string> files(d.train_files().begin(),
                                       d.train_files().end());
  data::ShardBatches batches(
      [&d, &files](const data::ShardSpec& s) {
        return data::OpenSpecReader(d, files, d.shuffle_seed(), s);
      },
      num_shards, d.batch_size());
  // The plan, read again before every step: it grows when a leaver's
  // batches are moved here (leftover_data TRAIN), or shrinks when a
  // rejoining worker takes its data shard back.
  LivePlan plan(a, std::move(current_plan), budget);

  const Clock* const clock = Clock::Real();
  const MetricStamp stamp(clock, budget.steps_per_epoch);
  MetricWindow window(&stamp, clock,
                      {.report_every_steps = options.report_every_steps,
                       .batch_size = d.batch_size(),
                       .extra = options.report_extra});
  TestScorer scorer;
  if (!d.test_files().empty()) {
    scorer = [&d, params](TrainableModel* m, int64_t step) {
      return ScoreOnTestFiles(*m, *params, d, step, d.eval_examples());
    };
  }
  TrainResult result;
  size_t samples_logged = 0;
  // Straggler injection (JobSpec.stragglers) as in the IDX pipeline, except
  // that a sparse step's pulls, compute and pushes are one call: the worker
  // sleeps after the step, in proportion to the whole step's time.
  const Slowdown slowdown = SlowdownFor(spec, a.rank());

  BatchesAhead read_ahead(&batches);
  const auto batch_at = [&](int64_t s) -> absl::StatusOr<const data::Batch*> {
    PS_ASSIGN_OR_RETURN(const PlannedBatch at, plan.BatchAt(s));
    return Annotated(read_ahead.Get(s, at), "training data");
  };
  const ConsistencySpec& consistency = spec.consistency();
  SparseStepper stepper(
      *model, *params,
      {.overlap = consistency.model() == ConsistencySpec::ASP &&
                  consistency.overlap_communication(),
       .clock = clock});
  const bool bsp = consistency.model() == ConsistencySpec::BSP;
  int64_t step = a.start_step();
  if (bsp) {
    // The clock is the step the shards are at, whatever start_step said
    // (a late joiner, a worker that rejoined).
    PS_ASSIGN_OR_RETURN(const int64_t at, stepper.Join(step));
    result.skipped_steps += std::max<int64_t>(0, at - step);
    step = at;
  }
  Evaluator evaluator(std::move(scorer), &stamp, sink,
                      EvaluatorOptionsFor(a, budget.steps_per_epoch, options),
                      step);
  int64_t end = 0;
  while (step < (end = plan.End())) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat("stopped at step ", step));
    }
    const absl::Time t0 = clock->Now();
    PS_ASSIGN_OR_RETURN(const data::Batch* batch, batch_at(step));
    // The next steps' batches, as far as this worker trains them (usually
    // read while the last step's calls were on their way): the rows of the
    // last come back with this step's end. One that fails to read is not
    // asked for, and fails at its own step.
    std::vector<const data::Batch*> ahead;
    for (int64_t s = step + 1; s < end && s <= step + stepper.lookahead();
         ++s) {
      absl::StatusOr<const data::Batch*> n = batch_at(s);
      ahead.push_back(n.ok() ? *n : nullptr);
    }
    for (; samples_logged < batches.bad_line_samples().size();
         ++samples_logged) {
      std::fprintf(stderr, "worker: bad line %s\n",
                   batches.bad_line_samples()[samples_logged].c_str());
    }
    if (evaluator.Due(step)) {
      PS_RETURN_IF_ERROR(stepper.Drain());
      PS_RETURN_IF_ERROR(evaluator.EvaluateDue(model.get(), step));
    }
    const absl::Time t1 = clock->Now();
    const int64_t later = step + stepper.lookahead() + 1;
    const auto read_later = [&, later, end] {
      if (later < end) (void)batch_at(later);
    };
    PS_ASSIGN_OR_RETURN(const SparseStepResult r,
                        stepper.Step(step, *batch, ahead, read_later));
    if (slowdown.slowed()) {
      absl::SleepFor(slowdown.Delay(clock->Now() - t1 - r.in_flight));
    }
    window.AddStep(r.loss, {.wait = t1 - t0 + r.in_flight,
                            .pull = r.pull,
                            .compute = r.compute,
                            .push = r.push});
    window.AddStaleness(static_cast<double>(r.staleness), r.staleness_ends);
    result.last_loss = r.loss;
    ++result.steps;
    ++step;
    if (bsp && r.next_version > step) {
      // The job moved on without this worker (a backup whose gradients
      // came late): it catches up rather than computing gradients that
      // would be dropped.
      result.skipped_steps += r.next_version - step;
      step = r.next_version;
      stepper.SkipTo(step);
    }
    read_ahead.DropBefore(step);
    if (window.Due(step, end)) {
      window.Report(step, sink);
      const int64_t bad =
          budget.bad_lines >= 0 ? budget.bad_lines : batches.bad_lines();
      sink({stamp.Point("bad_lines", static_cast<double>(bad), step)}, false);
    }
    if (options.on_step) options.on_step(step);
  }
  result.final_clock = step;
  PS_RETURN_IF_ERROR(stepper.Drain());  // a plan that shrank under a step
  // The final weights, once every worker's are in.
  if (evaluator.scores()) {
    PS_RETURN_IF_ERROR(
        evaluator.Evaluate(model.get(), step, AwaitOthersDone(options, stop)));
  }
  result.test_accuracy = evaluator.test_accuracy();
  sink({}, true);
  return result;
}

}  // namespace ps::worker
