// The training loop of one worker for one job, for every data format and
// model: at each clock the batch its data plan names (worker/loop/
// training_data.h, plan_batches.h), read ahead while the last step's end is
// on its way; each step run by the step pipeline (worker/loop/
// step_pipeline.h: weights and the batch's rows pulled or brought by the
// last step's end, forward/backward on the worker's device, gradients
// pushed as they are produced, the step ended), the clock advanced; metrics
// reported in windows (worker/loop/metric_window.h) and, on the evaluator,
// the test score (worker/loop/evaluator.h).
#ifndef PS_WORKER_LOOP_TRAINER_H_
#define PS_WORKER_LOOP_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/backend.h"
#include "proto/coordinator_service.pb.h"
#include "worker/client/parameter_access.h"
#include "worker/data/dataset.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/metric_window.h"
#include "worker/loop/plan_batches.h"

namespace ps::worker {

struct TrainerOptions {
  // How often (in steps) to send train_loss, examples_per_sec and the step
  // time split.
  int report_every_steps = 20;
  // Called after every step with the new clock (the daemon's heartbeats
  // carry it, which barrier-timeout and straggler detection rely on).
  std::function<void(int64_t clock)> on_step;
  // Whether this worker evaluates now; the role moves when the coordinator
  // evicts the evaluator. Unset: the assignment's evaluator flag.
  std::function<bool()> is_evaluator;
  // Called once the job's data shape is known, before the first step: its
  // steps per data shard (data.max_steps, else epochs x steps_per_epoch)
  // and per epoch, as this worker derived them from its data (IDX: the
  // dataset's size; text data: the counting pass). The daemon's heartbeats
  // carry them to the coordinator, which cuts data plans by them.
  std::function<void(int64_t shard_steps, int64_t steps_per_epoch)>
      on_data_shape;
  // Whether every other worker of the job has finished its share
  // (WorkerAssignment.others_done, kept up to date). The evaluator's last
  // evaluation waits up to final_evaluation_wait for it, and is marked as
  // the job's final model only then (the coordinator asks again
  // otherwise). Unset: this worker's steps are the job's (final at once).
  std::function<bool()> others_done;
  absl::Duration final_evaluation_wait = absl::Seconds(5);
  // Points sent with every training report (MetricWindowOptions::extra).
  ExtraPoints report_extra;
};

struct TrainResult {
  int64_t steps = 0;          // steps this worker ran
  int64_t skipped_steps = 0;  // BSP: steps the job made without this worker
  int64_t final_clock = 0;
  double last_loss = 0;
  double test_accuracy = -1;  // last evaluation (evaluator only)
};

// Whether the evaluation the evaluator takes after its last step is of the
// job's final model: options.others_done (unset: true), awaited for up to
// options.final_evaluation_wait or until `stop`.
bool AwaitOthersDone(const TrainerOptions& options,
                     const std::atomic<bool>* stop);

// The evaluation cadence of `a` (data.eval_every_steps, else once an
// epoch of `steps_per_epoch`) and the role as options.is_evaluator tells
// it (unset: the assignment's flag; `a` must outlive the result).
EvaluatorOptions EvaluatorOptionsFor(const WorkerAssignment& a,
                                     int64_t steps_per_epoch,
                                     const TrainerOptions& options);

// Trains `assignment` (command TRAIN): at each clock the batch its data
// plan names (plan_batches.h), until the plan's end. A job starts with
// every worker's plan the same length: epochs x floor(train examples /
// (num_data_shards x batch)) (or data.max_steps) batches of its own data
// shard, so BSP barriers always close; `current_plan`, when set, is read
// once per step and may have grown (or shrunk) since the assignment. Stops
// early (CANCELLED) when `stop` becomes true, checked once per step. Straggler
// injection from the spec slows this worker when its rank is named there.
// IDX jobs train on `train` and score on `test` (may be null); a job whose
// data.format is a text format (CRITEO, LIBSVM, MOVIELENS) streams its
// files and ignores both (may be null). Text data: bad lines are logged
// with file:line as they are met and reported as the metric bad_lines;
// past the spec's limit the readers' INVALID_ARGUMENT ends Train.
absl::StatusOr<TrainResult> Train(
    const WorkerAssignment& assignment, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, kernels::Backend* backend,
    client::ParameterAccess* params, MetricSink sink,
    const std::atomic<bool>* stop, const TrainerOptions& options = {},
    std::function<WorkerPlan()> current_plan = nullptr);

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_TRAINER_H_
