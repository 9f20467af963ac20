// What both training loops (trainer.h for IDX data, data_trainer.h for
// text data) take and give: the daemon's options and hooks, the result,
// and the helpers they share for the evaluator's role and cadence.
#ifndef PS_WORKER_LOOP_TRAIN_OPTIONS_H_
#define PS_WORKER_LOOP_TRAIN_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/time/time.h"
#include "proto/coordinator_service.pb.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/metric_window.h"

namespace ps::worker {

struct TrainerOptions {
  // How often (in steps) to send train_loss, examples_per_sec and the step
  // time split.
  int report_every_steps = 20;
  absl::Duration batch_timeout = absl::Seconds(30);
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

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_TRAIN_OPTIONS_H_
