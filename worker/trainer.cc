#include "worker/trainer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/model_graph.h"
#include "common/status.h"
#include "worker/batch_prefetcher.h"
#include "worker/evaluator.h"
#include "worker/mlp_model.h"
#include "worker/model/layer_model.h"
#include "worker/step_pipeline.h"
#include "worker/trainable_model.h"

namespace ps::worker {
namespace {

struct StepBudget {
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
};

absl::StatusOr<StepBudget> BudgetFor(const JobSpec& spec,
                                     int64_t train_examples, int num_shards) {
  const int batch = spec.data().batch_size();
  StepBudget b;
  b.steps_per_epoch = StepsPerEpoch(train_examples, num_shards, batch);
  b.total_steps = TotalSteps(spec, train_examples, num_shards);
  if (b.steps_per_epoch < 1 || b.total_steps < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no full batch of ", batch, " per data shard: ", train_examples,
        " examples over ", num_shards, " shards"));
  }
  return b;
}

// This worker's batches, prefetched from its data shards, starting at the
// assignment's step. A survivor of an eviction takes over data shards
// (`current_data_shards`) from the next epoch of its data.
class BatchSource {
 public:
  static absl::StatusOr<BatchSource> Create(
      const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
      int num_shards, int64_t steps_per_epoch,
      std::function<std::vector<int>()> current_data_shards) {
    PrefetcherOptions po;
    po.batch_size = a.spec().data().batch_size();
    po.seed = a.spec().data().shuffle_seed();
    po.assignment.shards.assign(a.data_shards().begin(), a.data_shards().end());
    if (po.assignment.shards.empty()) po.assignment.shards = {a.rank()};
    po.assignment.num_shards = num_shards;
    po.first_epoch = a.start_step() / steps_per_epoch;
    po.first_batch = a.start_step() % steps_per_epoch;
    po.num_epochs = 0;  // the step budget ends training, not the data
    PS_ASSIGN_OR_RETURN(std::unique_ptr<BatchPrefetcher> prefetcher,
                        BatchPrefetcher::Create(std::move(train), po));
    return BatchSource(std::move(prefetcher), num_shards, po.assignment.shards,
                       std::move(current_data_shards));
  }

  absl::StatusOr<Batch> Next(absl::Duration timeout) {
    absl::StatusOr<Batch> b = prefetcher_->Next(timeout);
    if (!b.ok()) return Annotate(b.status(), "next batch");
    if (current_data_shards_) {
      std::vector<int> now = current_data_shards_();
      if (!now.empty() && now != shards_in_use_ &&
          prefetcher_->Reassign(ShardAssignment{now, num_shards_}, b->epoch + 1)
              .ok()) {
        shards_in_use_ = now;
      }
    }
    return b;
  }

  void Recycle(Batch b) { prefetcher_->Recycle(std::move(b)); }

 private:
  BatchSource(std::unique_ptr<BatchPrefetcher> prefetcher, int num_shards,
              std::vector<int> shards_in_use,
              std::function<std::vector<int>()> current_data_shards)
      : prefetcher_(std::move(prefetcher)),
        num_shards_(num_shards),
        shards_in_use_(std::move(shards_in_use)),
        current_data_shards_(std::move(current_data_shards)) {}

  std::unique_ptr<BatchPrefetcher> prefetcher_;
  int num_shards_;
  std::vector<int> shards_in_use_;
  std::function<std::vector<int>()> current_data_shards_;
};

StepPipelineOptions PipelineOptionsFor(const WorkerAssignment& a,
                                       int64_t total_steps) {
  const ConsistencySpec& c = a.spec().consistency();
  StepPipelineOptions o;
  o.bsp = c.model() == ConsistencySpec::BSP;
  o.overlap = c.model() == ConsistencySpec::ASP && c.overlap_communication();
  o.start_clock = a.start_step();
  o.total_steps = total_steps;
  o.slowdown = SlowdownFor(a.spec(), a.rank());
  return o;
}

EvaluatorOptions EvaluatorOptionsFor(const WorkerAssignment& a,
                                     int64_t steps_per_epoch,
                                     const TrainerOptions& options) {
  const DataSpec& d = a.spec().data();
  EvaluatorOptions o;
  o.eval_every_steps = d.eval_every_steps() > 0
                           ? d.eval_every_steps()
                           : static_cast<int>(steps_per_epoch);
  o.eval_examples = d.eval_examples();
  o.is_evaluator = options.is_evaluator;
  if (!o.is_evaluator) o.is_evaluator = [&a] { return a.evaluator(); };
  return o;
}

}  // namespace

int64_t StepsPerEpoch(int64_t train_examples, int num_data_shards,
                      int batch_size) {
  if (num_data_shards < 1 || batch_size < 1) return 0;
  return train_examples / num_data_shards / batch_size;
}

int64_t TotalSteps(const JobSpec& spec, int64_t train_examples,
                   int num_data_shards) {
  if (spec.data().max_steps() > 0) return spec.data().max_steps();
  return spec.data().epochs() * StepsPerEpoch(train_examples, num_data_shards,
                                              spec.data().batch_size());
}

absl::StatusOr<TrainResult> Train(
    const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, kernels::Backend* backend,
    ParameterAccess* params, MetricSink sink, const std::atomic<bool>* stop,
    const TrainerOptions& options,
    std::function<std::vector<int>()> current_data_shards) {
  const JobSpec& spec = a.spec();
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<TrainableModel> model,
      HasLayers(spec.model())
          ? model::CreateLayerModel(spec.model(), train->example_size(),
                                    backend)
          : CreateMlpModel(spec.model(), train->example_size(), backend));
  const int num_shards = std::max(1, a.num_data_shards());
  PS_ASSIGN_OR_RETURN(const StepBudget budget,
                      BudgetFor(spec, train->num_examples, num_shards));
  const int64_t total_steps = budget.total_steps;
  PS_ASSIGN_OR_RETURN(
      BatchSource batches,
      BatchSource::Create(a, train, num_shards, budget.steps_per_epoch,
                          std::move(current_data_shards)));
  // Declared after the model: destroyed first, ending the calls in flight
  // before the model's buffers go.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<StepPipeline> pipeline,
                      StepPipeline::Create(model.get(), backend, params,
                                           PipelineOptionsFor(a, total_steps)));
  const Clock* const clock = Clock::Real();
  const MetricStamp stamp(clock, budget.steps_per_epoch);
  Evaluator evaluator(test, &stamp, sink,
                      EvaluatorOptionsFor(a, budget.steps_per_epoch, options),
                      a.start_step());
  MetricWindow window(&stamp, clock,
                      {.report_every_steps = options.report_every_steps,
                       .batch_size = spec.data().batch_size()});

  TrainResult result;
  while (pipeline->clock() < total_steps) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(
          absl::StrCat("stopped at step ", pipeline->clock()));
    }
    const absl::Time t0 = clock->Now();
    PS_ASSIGN_OR_RETURN(Batch batch, batches.Next(options.batch_timeout));
    const absl::Time t1 = clock->Now();
    // The evaluator needs all of the weights before the step.
    PS_ASSIGN_OR_RETURN(const bool more,
                        pipeline->Pull(evaluator.Due(pipeline->clock())));
    if (!more) {
      batches.Recycle(std::move(batch));
      break;
    }
    // The evaluator measures the weights every worker computes on.
    if (evaluator.Due(pipeline->clock())) {
      PS_RETURN_IF_ERROR(evaluator.EvaluateDue(model.get(), pipeline->clock()));
    }
    const absl::Time t2 = clock->Now();
    PS_ASSIGN_OR_RETURN(const std::optional<float> loss,
                        pipeline->Compute(batch));
    if (!loss.has_value()) {  // the job's steps ended under this one
      batches.Recycle(std::move(batch));
      break;
    }
    const absl::Time t3 = clock->Now();
    PS_RETURN_IF_ERROR(pipeline->EndStep());
    const absl::Time t4 = clock->Now();
    batches.Recycle(std::move(batch));

    const StepObservations seen = pipeline->TakeObservations();
    window.AddStep(*loss, {.wait = t1 - t0,
                           .pull = t2 - t1 + seen.awaited,
                           .compute = t3 - t2 - seen.awaited,
                           .push = t4 - t3});
    window.AddStaleness(seen.staleness, seen.staleness_ends);
    result.last_loss = *loss;
    if (window.Due(pipeline->clock() + 1, total_steps)) {
      window.Report(pipeline->clock() + 1, sink);
    }
    result.steps++;
    pipeline->NextStep();
    if (options.on_step) options.on_step(pipeline->clock());
  }
  result.final_clock = pipeline->clock();
  result.skipped_steps = pipeline->skipped_steps();
  PS_RETURN_IF_ERROR(pipeline->Drain());
  // Final evaluation on the final weights.
  if (evaluator.IsEvaluator()) {
    PS_RETURN_IF_ERROR(pipeline->PullWeights());
    PS_RETURN_IF_ERROR(evaluator.Evaluate(model.get(), pipeline->clock()));
  }
  result.test_accuracy = evaluator.test_accuracy();
  sink({}, true);
  return result;
}

}  // namespace ps::worker
