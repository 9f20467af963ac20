#include "worker/loop/trainer.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/platform/clock.h"
#include "common/platform/status.h"
#include "worker/data/shard_batches.h"
#include "worker/loop/batches_ahead.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/plan_batches.h"
#include "worker/loop/step_pipeline.h"
#include "worker/loop/training_data.h"
#include "worker/model/layer_model.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {
namespace {

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

bool AwaitOthersDone(const TrainerOptions& options,
                     const std::atomic<bool>* stop) {
  if (!options.others_done) return true;
  // The coordinator's answer comes with a heartbeat: poll at a fraction of
  // its period (this runs once per job, after the last step).
  const absl::Time deadline = absl::Now() + options.final_evaluation_wait;
  while (!options.others_done()) {
    if ((stop != nullptr && stop->load()) || absl::Now() >= deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

EvaluatorOptions EvaluatorOptionsFor(const WorkerAssignment& a,
                                     int64_t steps_per_epoch,
                                     const TrainerOptions& options) {
  const DataSpec& d = a.spec().data();
  EvaluatorOptions o;
  o.eval_every_steps = d.eval_every_steps() > 0
                           ? d.eval_every_steps()
                           : static_cast<int>(steps_per_epoch);
  o.is_evaluator = options.is_evaluator;
  if (!o.is_evaluator) o.is_evaluator = [&a] { return a.evaluator(); };
  return o;
}

absl::StatusOr<TrainResult> Train(
    const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, kernels::Backend* backend,
    client::ParameterAccess* params, MetricSink sink,
    const std::atomic<bool>* stop, const TrainerOptions& options,
    std::function<WorkerPlan()> current_plan) {
  const JobSpec& spec = a.spec();
  const int num_shards = std::max(1, a.num_data_shards());
  PS_ASSIGN_OR_RETURN(
      const TrainingData data,
      OpenTrainingData(a, std::move(train), std::move(test), num_shards));
  // Layer models and the MLP shorthand alike (expanded to Dense layers).
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<TrainableModel> model,
      model::CreateLayerModel(spec.model(), data.example_size, backend));
  if (options.on_data_shape) {
    options.on_data_shape(data.shape.total_steps, data.shape.steps_per_epoch);
  }
  // Read by `read`'s thread only.
  data::ShardBatches batches(data.open_shard, num_shards,
                             spec.data().batch_size());
  // The plan, read again before every step: it grows when a leaver's
  // batches are moved here (leftover_data TRAIN), or shrinks when a
  // rejoining worker takes its data shard back.
  LivePlan plan(a, std::move(current_plan), data.shape);
  BatchesAhead read(&batches, &plan);
  int64_t total_steps = plan.End();
  // Declared after the model: destroyed first, ending the calls in flight
  // before the model's buffers go.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<StepPipeline> pipeline,
                      StepPipeline::Create(model.get(), backend, params,
                                           PipelineOptionsFor(a, total_steps)));
  // BSP: the clock is the step the shards are at, whatever start_step said.
  PS_RETURN_IF_ERROR(pipeline->Join());
  const Clock* const clock = Clock::Real();
  const MetricStamp stamp(clock, data.shape.steps_per_epoch);
  Evaluator evaluator(
      TestDataScorer(data.open_test, params, spec.data().eval_examples()),
      &stamp, sink, EvaluatorOptionsFor(a, data.shape.steps_per_epoch, options),
      pipeline->clock());
  MetricWindow window(&stamp, clock,
                      {.report_every_steps = options.report_every_steps,
                       .batch_size = spec.data().batch_size(),
                       .extra = options.report_extra});

  TrainResult result;
  size_t samples_logged = 0;
  while (pipeline->clock() < (total_steps = plan.End())) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(
          absl::StrCat("stopped at step ", pipeline->clock()));
    }
    pipeline->set_total_steps(total_steps);
    const absl::Time t0 = clock->Now();
    // This step's batch and those ahead that this worker trains (usually
    // read while the last step's end was on its way). One ahead that fails
    // to read is not asked for, and fails at its own step.
    const auto batches_ahead = [&]() -> const data::Batch* {
      const data::Batch* ahead = nullptr;
      for (int64_t s = pipeline->clock() + 1;
           s < total_steps && s <= pipeline->clock() + pipeline->lookahead();
           ++s) {
        absl::StatusOr<const data::Batch*> b = read.Get(s);
        ahead = b.ok() ? *b : nullptr;
      }
      return pipeline->lookahead() > 0 &&
                     pipeline->clock() + pipeline->lookahead() < total_steps
                 ? ahead
                 : nullptr;
    };
    PS_ASSIGN_OR_RETURN(const data::Batch* batch, read.Get(pipeline->clock()));
    const data::Batch* ahead = batches_ahead();
    // The next batch is read while this step runs.
    read.ReadAhead(pipeline->clock() + pipeline->lookahead() + 1);
    if (data.text) {
      const std::vector<std::string> samples = read.bad_line_samples();
      for (; samples_logged < samples.size(); ++samples_logged) {
        std::fprintf(stderr, "worker: bad line %s\n",
                     samples[samples_logged].c_str());
      }
    }
    const absl::Time t1 = clock->Now();
    // The evaluator needs all of the weights before the step.
    const int64_t planned = pipeline->clock();
    PS_ASSIGN_OR_RETURN(const bool more,
                        pipeline->Pull(evaluator.Due(pipeline->clock())));
    if (!more) break;
    if (pipeline->clock() != planned) {
      // BSP catch-up: the step the job is at, on its own batch.
      PS_ASSIGN_OR_RETURN(batch, read.Get(pipeline->clock()));
      ahead = batches_ahead();
    }
    // The evaluator measures the weights every worker computes on.
    if (evaluator.Due(pipeline->clock())) {
      PS_RETURN_IF_ERROR(evaluator.EvaluateDue(model.get(), pipeline->clock()));
    }
    const absl::Time t2 = clock->Now();
    PS_ASSIGN_OR_RETURN(const std::optional<float> loss,
                        pipeline->Compute(*batch));
    if (!loss.has_value()) break;  // the job's steps ended under this one
    const absl::Time t3 = clock->Now();
    PS_RETURN_IF_ERROR(pipeline->EndStep(ahead));
    const absl::Time t4 = clock->Now();

    const StepObservations seen = pipeline->TakeObservations();
    window.AddStep(*loss, {.wait = t1 - t0,
                           .pull = t2 - t1 + seen.awaited,
                           .compute = t3 - t2 - seen.awaited,
                           .push = t4 - t3});
    window.AddStaleness(seen.staleness, seen.staleness_ends);
    result.last_loss = *loss;
    const int64_t done = pipeline->clock() + 1;
    if (window.Due(done, total_steps)) {
      window.Report(done, sink);
      if (data.text) {
        const int64_t bad = data.counted_bad_lines >= 0 ? data.counted_bad_lines
                                                        : read.bad_lines();
        sink({stamp.Point("bad_lines", static_cast<double>(bad), done)}, false);
      }
    }
    result.steps++;
    pipeline->NextStep();
    read.DropBefore(pipeline->clock());
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
