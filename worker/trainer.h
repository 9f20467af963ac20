// The training loop of one worker for one job: batches from the prefetcher,
// weights pulled from the parameter servers, forward/backward on the
// worker's device through kernels/, gradients pushed tensor by tensor, the
// clock advanced; metrics and (on the evaluator) test accuracy reported.
#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "proto/coordinator_service.pb.h"
#include "worker/dataset.h"

namespace ps::worker {

// What the training loop needs from the parameter servers. The real one
// (worker/ps_access.h) talks gRPC to the shards; tests use a local one.
class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;

  // Fills `tensors` (one host buffer per model tensor, in model order) with
  // the weights a worker at `clock` may compute on, waiting as the job's
  // consistency model says. Returns the weights' version (the lowest over
  // the shards).
  virtual absl::StatusOr<int64_t> Pull(
      int64_t clock, std::vector<absl::Span<float>> tensors) = 0;

  // Starts pushing tensor `index`'s gradient for step `clock`; may return
  // before it is sent. `grad` must stay valid until Finish().
  virtual absl::Status Push(int64_t clock, int64_t base_version, int index,
                            absl::Span<const float> grad) = 0;

  // Completes step `clock`: every push sent and acknowledged, the shards told
  // the step is over. Returns the staleness the pushes saw (versions applied
  // by others between this worker's pull and its push; 0 under BSP).
  virtual absl::StatusOr<int64_t> Finish(int64_t clock) = 0;

  // Where tensor `index`'s gradient may be cut for PushPart: element offsets
  // inside it, ascending (the parameter servers' chunk boundaries). Empty:
  // only whole tensors (the default).
  virtual std::vector<int64_t> PartBoundaries(int index) const {
    (void)index;
    return {};
  }
  // Push of part of a gradient: elements [offset, offset + grad.size()) of
  // tensor `index`, starting and ending at PartBoundaries (or at the
  // tensor's start and end). As Push otherwise.
  virtual absl::Status PushPart(int64_t clock, int64_t base_version, int index,
                                int64_t offset, absl::Span<const float> grad);

  // Every push from now on may also ask back the next step's weights of
  // its chunks into `tensors` (the buffers later passed to
  // StartFinishAndPull), which then arrive while the step still runs
  // (PsAccess: in every consistency model). Only for a caller that no longer
  // reads a tensor once it pushed its gradient (kernels::Mlp::StepHooks).
  // Ignored by default.
  virtual void PullWithPushes(std::vector<absl::Span<float>> tensors) {
    (void)tensors;
  }

  // Finish(clock), then Pull(clock + 1, tensors): ends the step and fetches
  // the weights of the next one. The real implementation does both in one
  // round trip per shard (the shards answer the end of step with the new
  // weights); this default runs the two calls one after the other.
  struct StepEnd {
    int64_t staleness = 0;  // as Finish returns it
    int64_t version = 0;    // as Pull(clock + 1) returns it
  };
  virtual absl::StatusOr<StepEnd> FinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors);

  // FinishAndPull in two halves, so that the next step can start on the
  // weights that have arrived: StartFinishAndPull ends step `clock` and
  // starts pulling clock + 1's weights into `tensors`; the returned object's
  // AwaitWeights(index, begin, end) waits until elements [begin, end) of
  // tensor `index` are there, and Wait() for all of it, returning what
  // FinishAndPull returns (an error of either, once it is known). The
  // object must be waited on (or CancelCalls() called) before `tensors`
  // is freed. The default does everything in StartFinishAndPull.
  class StepEndInProgress {
   public:
    virtual ~StepEndInProgress() = default;
    virtual absl::Status AwaitWeights(int index, int64_t begin,
                                      int64_t end) = 0;
    virtual absl::StatusOr<StepEnd> Wait() = 0;
  };
  virtual std::unique_ptr<StepEndInProgress> StartFinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors);

  // For ASP with overlap_communication: starts ending step `clock` with the
  // whole gradient of every tensor (`grads`, model order, computed on
  // weights of `base_version`) and pulling the weights for clock + 1 into
  // `tensors`, and returns at once; the returned function waits for both
  // (as FinishAndPull returns). `grads` and `tensors` must stay valid until
  // that wait returns or CancelCalls() has. The default does it all before
  // returning.
  using PendingStepEnd = std::function<absl::StatusOr<StepEnd>()>;
  virtual PendingStepEnd StartStepEnd(
      int64_t clock, int64_t base_version,
      std::vector<absl::Span<const float>> grads,
      std::vector<absl::Span<float>> tensors);

  // Ends every call still in flight and returns once none is left: after it
  // nothing reads or writes the buffers given to Push, Pull or
  // FinishAndPull. The training loop calls it on its way out (a stop or an
  // error leaves calls running) before it frees them.
  virtual void CancelCalls() {}
};

// Where metric points go (the coordinator, in the daemon).
using MetricSink =
    std::function<void(std::vector<MetricPoint> points, bool done)>;

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
};

struct TrainResult {
  int64_t steps = 0;          // steps this worker ran
  int64_t skipped_steps = 0;  // BSP: steps the job made without this worker
  int64_t final_clock = 0;
  double last_loss = 0;
  double test_accuracy = -1;  // last evaluation (evaluator only)
};

// Trains `assignment` (command TRAIN). Each worker runs the same number of
// steps: epochs x floor(train examples / (num_data_shards x batch)) (or
// data.max_steps), drawing batches from its data shards, so BSP barriers
// always close. Stops early (CANCELLED) when `stop` becomes true, checked
// once per step. Straggler injection from the spec slows this worker when
// its rank is named there.
absl::StatusOr<TrainResult> Train(
    const WorkerAssignment& assignment, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, kernels::Backend* backend,
    ParameterAccess* params, MetricSink sink, const std::atomic<bool>* stop,
    const TrainerOptions& options = {},
    std::function<std::vector<int>()> current_data_shards = nullptr);

// The row boundaries at which the trainer cuts the first layer's weight
// (`shape` [rows, width]) into blocks: among the parameter servers' chunk
// boundaries (`parts`, element offsets) those that fall between rows, thinned
// out to blocks of at least 384 KB and at most 8 blocks.
std::vector<int64_t> FirstLayerRowSplits(const std::vector<int64_t>& parts,
                                         const std::vector<int64_t>& shape);

// Steps each worker runs for the job (the same on every worker).
int64_t StepsPerEpoch(int64_t train_examples, int num_data_shards,
                      int batch_size);
int64_t TotalSteps(const JobSpec& spec, int64_t train_examples,
                   int num_data_shards);

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINER_H_
