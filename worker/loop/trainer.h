// The training loop of one worker for one job: batches from the prefetcher,
// each step run by the step pipeline (worker/loop/step_pipeline.h: weights
// pulled, forward/backward on the worker's device, gradients pushed as they
// are produced, the step ended), the clock advanced; metrics reported in
// windows (worker/loop/metric_window.h) and, on the evaluator, test accuracy
// (worker/loop/evaluator.h).
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
#include "worker/loop/metric_window.h"
#include "worker/loop/plan_batches.h"
#include "worker/loop/train_options.h"

namespace ps::worker {

// Trains `assignment` (command TRAIN): at each clock the batch its data
// plan names (plan_batches.h), until the plan's end. A job starts with
// every worker's plan the same length: epochs x floor(train examples /
// (num_data_shards x batch)) (or data.max_steps) batches of its own data
// shard, so BSP barriers always close; `current_plan`, when set, is read
// once per step and may have grown (or shrunk) since the assignment. Stops
// early (CANCELLED) when `stop` becomes true, checked once per step. Straggler
// injection from the spec slows this worker when its rank is named there.
// A job whose data.format is a text format (CRITEO, LIBSVM, MOVIELENS)
// streams its files instead and ignores `train` and `test` (may be null):
// worker/loop/data_trainer.h.
absl::StatusOr<TrainResult> Train(
    const WorkerAssignment& assignment, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, kernels::Backend* backend,
    client::ParameterAccess* params, MetricSink sink,
    const std::atomic<bool>* stop, const TrainerOptions& options = {},
    std::function<WorkerPlan()> current_plan = nullptr);

// Steps each worker runs for the job (the same on every worker).
int64_t StepsPerEpoch(int64_t train_examples, int num_data_shards,
                      int batch_size);
int64_t TotalSteps(const JobSpec& spec, int64_t train_examples,
                   int num_data_shards);

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_TRAINER_H_
