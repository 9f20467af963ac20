#include "worker/loop/train_options.h"

#include "absl/time/clock.h"

namespace ps::worker {

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

}  // namespace ps::worker
