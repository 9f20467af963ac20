#include "worker/loop/trainer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/clock.h"
#include "common/platform/status.h"
#include "worker/data/batch_prefetcher.h"
#include "worker/loop/data_trainer.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/plan_batches.h"
#include "worker/loop/step_pipeline.h"
#include "worker/model/layer_model.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {
namespace {

absl::StatusOr<DataShape> BudgetFor(const JobSpec& spec, int64_t train_examples,
                                    int num_shards) {
  const int batch = spec.data().batch_size();
  DataShape b;
  b.steps_per_epoch = StepsPerEpoch(train_examples, num_shards, batch);
  b.total_steps = TotalSteps(spec, train_examples, num_shards);
  if (b.steps_per_epoch < 1 || b.total_steps < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no full batch of ", batch, " per data shard: ", train_examples,
        " examples over ", num_shards, " shards"));
  }
  return b;
}

// This worker's batches: at each clock the one its data plan names
// (plan_batches.h), prefetched from that batch's data shard on. The plan
// may grow or shrink while it trains (`current_plan`: a survivor of an
// eviction takes on the leaver's batches); a batch the prefetcher did not
// have next, at a run's start or an epoch's end, starts it again there.
class BatchSource {
 public:
  BatchSource(const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
              int num_shards, DataShape budget,
              std::function<WorkerPlan()> current_plan)
      : train_(std::move(train)),
        num_shards_(num_shards),
        plan_(a, std::move(current_plan), budget) {
    options_.batch_size = a.spec().data().batch_size();
    options_.seed = a.spec().data().shuffle_seed();
    options_.assignment.num_shards = num_shards;
    options_.num_epochs = 0;  // the plan ends training, not the data
  }

  // The clock after the plan's last batch, as the plan is now.
  int64_t End() { return plan_.End(); }

  // The batch of `clock` (LivePlan::BatchAt).
  absl::StatusOr<Batch> Next(int64_t clock, absl::Duration timeout) {
    PS_ASSIGN_OR_RETURN(const PlannedBatch want, plan_.BatchAt(clock));
    for (int attempt = 0;; ++attempt) {
      if (prefetcher_ == nullptr || shard_ != want.data_shard) {
        PS_RETURN_IF_ERROR(StartAt(want));
      }
      absl::StatusOr<Batch> b = prefetcher_->Next(timeout);
      if (!b.ok()) return Annotate(b.status(), "next batch");
      if (b->epoch == want.epoch && b->index == want.index) return b;
      // Not the planned one (an epoch with a batch beyond steps_per_epoch,
      // or a jump in the plan): start again at the planned batch.
      prefetcher_->Recycle(*std::move(b));
      if (attempt > 0) {
        return absl::InternalError(absl::StrCat(
            "the prefetcher did not deliver batch ", want.index, " of epoch ",
            want.epoch, " of data shard ", want.data_shard));
      }
      prefetcher_.reset();
    }
  }

  void Recycle(Batch b) {
    if (prefetcher_ != nullptr) prefetcher_->Recycle(std::move(b));
  }

 private:
  absl::Status StartAt(const PlannedBatch& want) {
    prefetcher_.reset();
    PrefetcherOptions po = options_;
    po.assignment.shards = {want.data_shard};
    po.first_epoch = want.epoch;
    po.first_batch = want.index;
    PS_ASSIGN_OR_RETURN(prefetcher_, BatchPrefetcher::Create(train_, po));
    shard_ = want.data_shard;
    return absl::OkStatus();
  }

  std::shared_ptr<const Dataset> train_;
  int num_shards_;
  PrefetcherOptions options_;
  LivePlan plan_;
  std::unique_ptr<BatchPrefetcher> prefetcher_;
  int shard_ = -1;
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
    client::ParameterAccess* params, MetricSink sink,
    const std::atomic<bool>* stop, const TrainerOptions& options,
    std::function<WorkerPlan()> current_plan) {
  const JobSpec& spec = a.spec();
  if (spec.data().format() != DataSpec::IDX) {
    return TrainOnStreamedData(a, backend, params, std::move(sink), stop,
                               options, std::move(current_plan));
  }
  // Layer models and the MLP shorthand alike (expanded to Dense layers).
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<TrainableModel> model,
      model::CreateLayerModel(spec.model(), train->example_size(), backend));
  const int num_shards = std::max(1, a.num_data_shards());
  PS_ASSIGN_OR_RETURN(const DataShape budget,
                      BudgetFor(spec, train->num_examples, num_shards));
  if (options.on_data_shape) {
    options.on_data_shape(budget.total_steps, budget.steps_per_epoch);
  }
  BatchSource batches(a, train, num_shards, budget, std::move(current_plan));
  int64_t total_steps = batches.End();
  // Declared after the model: destroyed first, ending the calls in flight
  // before the model's buffers go.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<StepPipeline> pipeline,
                      StepPipeline::Create(model.get(), backend, params,
                                           PipelineOptionsFor(a, total_steps)));
  // BSP: the clock is the step the shards are at, whatever start_step said.
  PS_RETURN_IF_ERROR(pipeline->Join());
  const Clock* const clock = Clock::Real();
  const MetricStamp stamp(clock, budget.steps_per_epoch);
  Evaluator evaluator(IdxTestScorer(test, spec.data().eval_examples()), &stamp,
                      sink,
                      EvaluatorOptionsFor(a, budget.steps_per_epoch, options),
                      pipeline->clock());
  MetricWindow window(&stamp, clock,
                      {.report_every_steps = options.report_every_steps,
                       .batch_size = spec.data().batch_size(),
                       .extra = options.report_extra});

  TrainResult result;
  while (pipeline->clock() < (total_steps = batches.End())) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(
          absl::StrCat("stopped at step ", pipeline->clock()));
    }
    pipeline->set_total_steps(total_steps);
    const absl::Time t0 = clock->Now();
    PS_ASSIGN_OR_RETURN(Batch batch,
                        batches.Next(pipeline->clock(), options.batch_timeout));
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
  // The clock the steps ended at, steps the job made without this worker
  // included (a BSP backup or a late joiner catches up without a step of
  // its own): the coordinator takes a worker as done only once its clock
  // reaches its data plan's end.
  if (options.on_step && result.final_clock > 0) {
    options.on_step(result.final_clock);
  }
  PS_RETURN_IF_ERROR(pipeline->Drain());
  // Final evaluation on the final weights, once every worker's are in.
  if (evaluator.scores()) {
    const bool final_model = AwaitOthersDone(options, stop);
    PS_RETURN_IF_ERROR(pipeline->PullWeights());
    PS_RETURN_IF_ERROR(
        evaluator.Evaluate(model.get(), pipeline->clock(), final_model));
  }
  result.test_accuracy = evaluator.test_accuracy();
  sink({}, true);
  return result;
}

}  // namespace ps::worker
