// The training loop for data streamed from text files (DataSpec.format
// CRITEO, LIBSVM or MOVIELENS; worker/data/): each step reads the batch of
// its address (data shard, epoch, batch index: worker/data/shard_batches.h)
// and runs one sparse step (worker/loop/sparse_step.h: the dense weights and
// the batch's unique rows pulled, forward and backward, the gradients pushed,
// the step ended; the next batch's rows and weights come back with the
// step's end, and the batch after it is read while they are on their
// way) under the job's consistency model; the evaluator scores
// the model on the test files with the metrics its head implies. Under
// BSP a worker joins at the shards' open step and catches up when the job
// moved on without it (a backup worker), as the IDX pipeline does
// (SparseStepper::Join, SkipTo).
//
// Steps: the worker's data plan (WorkerAssignment.plan, worker/
// plan_batches.h), batch by batch as the IDX path follows it: at clock c
// the batch PlanBatchAt names, batch b of a data shard being batch
// b % steps_per_epoch of epoch b / steps_per_epoch of that shard. A data
// shard has epochs x steps_per_epoch batches, steps_per_epoch = floor(the
// smallest data shard's examples / batch_size), the examples counted in
// one streaming pass over the training files at the job's start (or taken
// from the assignment when the coordinator has the count from a worker);
// or data.max_steps batches, without that pass. The shape is reported
// through TrainerOptions.on_data_shape before the first step, so the
// coordinator can cut and move plans (server/coordinator/leftover_data.h).
#ifndef PS_WORKER_LOOP_DATA_TRAINER_H_
#define PS_WORKER_LOOP_DATA_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "proto/coordinator_service.pb.h"
#include "worker/client/parameter_access.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/plan_batches.h"
#include "worker/loop/train_options.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {

// Train() for a text format. Errors as Train's, and INVALID_ARGUMENT from
// the readers once bad lines pass the spec's limit (naming the first bad
// lines by file:line), reported by the daemon as the worker's failure.
absl::StatusOr<TrainResult> TrainOnStreamedData(
    const WorkerAssignment& assignment, kernels::Backend* backend,
    client::ParameterAccess* params, MetricSink sink,
    const std::atomic<bool>* stop, const TrainerOptions& options,
    std::function<WorkerPlan()> current_plan);

// `model` on the first `max_examples` (0: all) examples of d.test_files in
// file order, in batches of 1000, on the weights of step `clock`: the dense
// ones and each batch's rows pulled from `params`. The readers', the
// model's and the pulls' errors; FAILED_PRECONDITION for no test example.
absl::StatusOr<TestScore> ScoreOnTestFiles(TrainableModel& model,
                                           client::ParameterAccess& params,
                                           const DataSpec& d, int64_t clock,
                                           int64_t max_examples);

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_DATA_TRAINER_H_
