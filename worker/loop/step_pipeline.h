// One worker's step, phase by phase, for dense tensors and sparse rows
// alike: pull the weights of the step (or take those the previous step's
// end brought, or await them part by part while forward runs), take the
// batch's rows (brought by the previous step's end, or pulled), compute
// with each dense gradient pushed as backward produces it, and end the
// step with the row gradients (which also fetches the next step's weights
// and the rows of the batch ahead). Under BSP it joins at the shards' step
// and catches up when the job moved on without this worker. Straggler
// injection slows the compute phase.
//
// Rows ahead: given the batch of step clock() + lookahead(), a step's end
// carries that batch's keys and brings its rows back in its answers (one
// round trip a step instead of a pull of the weights, one of the rows,
// then the pushes and the end). Those rows wait as a pull at their step
// would (BSP: for the step to close), so each model's consistency is kept.
// With overlap (ASP with overlap_communication: OverlapStepEnd) step t + 1
// computes while step t's gradients travel, on the weights and rows that
// step t - 1's end brought: one more of the worker's own steps of
// staleness.
#ifndef PS_WORKER_LOOP_STEP_PIPELINE_H_
#define PS_WORKER_LOOP_STEP_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "worker/client/parameter_access.h"
#include "worker/data/batch.h"
#include "worker/loop/overlap_step_end.h"
#include "worker/loop/parameter_staging.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {

// The row boundaries at which the pipeline cuts a weight the model uses in
// row blocks (`shape` [rows, width]: the weight of a layer model's Dense
// layer fed by the model's inputs): among the parameter servers' chunk
// boundaries (`parts`, element offsets) those that fall between rows,
// thinned out to blocks of at least 384 KB and at most 8 blocks.
std::vector<int64_t> FirstLayerRowSplits(const std::vector<int64_t>& parts,
                                         const std::vector<int64_t>& shape);

// BSP catch-up: the step a worker at `clock` continues at once it holds
// weights of `version` (the weights of step v are version v's). When the
// job moved on without it (a backup worker whose gradients were late, or a
// worker that rejoined) that is `version`, rather than computing gradients
// that would be dropped; otherwise, and under ASP and SSP, `clock`.
int64_t CatchUpClock(bool bsp, int64_t clock, int64_t version);

// Straggler injection for experiments (JobSpec.stragglers): the compute
// phase takes compute_factor times as long, plus extra_delay.
struct Slowdown {
  double compute_factor = 1;
  absl::Duration extra_delay = absl::ZeroDuration();

  bool slowed() const {
    return compute_factor > 1 || extra_delay > absl::ZeroDuration();
  }
  // How long to sleep after a compute phase of `compute`.
  absl::Duration Delay(absl::Duration compute) const {
    return compute * (compute_factor - 1) + extra_delay;
  }
};
// The slowdown `spec` injects into the worker of `rank`: the last
// compute_factor above 1 named for it, the sum of its delays.
Slowdown SlowdownFor(const JobSpec& spec, int rank);

struct StepPipelineOptions {
  bool bsp = false;      // the job's consistency model is BSP
  bool overlap = false;  // ASP with overlap_communication
  int64_t start_clock = 0;
  int64_t total_steps = 0;  // the job's steps end at this clock
  Slowdown slowdown = {};
  const Clock* clock = Clock::Real();  // measures the time awaited
  // Sleeps a slowed compute phase.
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) {
    absl::SleepFor(d);
  };
};

// What the pipeline saw since the last TakeObservations(), for the metrics.
struct StepObservations {
  // Inside Compute(), waiting for weights on their way (counted as pull
  // time, not compute).
  absl::Duration awaited;
  // Staleness summed over the step ends completed, and their count.
  double staleness = 0;
  int64_t staleness_ends = 0;
};

// Drives `model` (not owned) against `params` (not owned); both must
// outlive it. Per step: Pull(), Compute(batch), EndStep(ahead), NextStep().
// Calls client::ParameterAccess::CancelCalls() when destroyed, so no call still
// in flight touches the buffers it frees. Thread-compatible: the training
// thread.
class StepPipeline {
 public:
  // Allocates the overlap buffers and cuts the splittable weights at the
  // parameter servers' chunk boundaries. Without overlap, every push brings
  // back the next step's weights of its chunks into the model.
  static absl::StatusOr<std::unique_ptr<StepPipeline>> Create(
      TrainableModel* model, kernels::Backend* backend,
      client::ParameterAccess* params, StepPipelineOptions options);
  ~StepPipeline();

  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  // The step being run (before Pull: the next to run).
  int64_t clock() const { return clock_; }
  // The job's steps now end at `total_steps` (a data plan that grew or
  // shrank); takes effect from the next step.
  void set_total_steps(int64_t total_steps) { total_steps_ = total_steps; }
  // BSP: steps the job made without this worker (CatchUpClock).
  int64_t skipped_steps() const { return skipped_steps_; }
  // How many steps ahead EndStep takes a batch, whose rows its answers
  // bring: 0 for a model without sparse tables, 1, or 2 with overlap.
  int lookahead() const;

  // Before the first step, under BSP: pulls the weights the shards are at
  // and makes their version (the lowest over the shards of their open
  // step) clock(), below or above start_clock; the first Pull() computes on
  // them. The shards' open step is the job's: a worker joining while they
  // are at step v is one of step v's workers there, so it must end step v,
  // whatever step its assignment named (the coordinator's idea of the
  // job's step, from progress reports, may lead or lag the shards'). Does
  // nothing under ASP and SSP.
  absl::Status Join();

  // Pull phase. Makes the weights of step clock() the model's, or, when
  // the previous step's end is still bringing them, leaves them to arrive
  // part by part in Compute() (a model with sparse tables awaits them all
  // here: the end brings its rows too). With `all_weights` (an evaluation
  // is due) all of them first, and, for a model with sparse tables, every
  // call on its way completes: the model and the access are free for the
  // evaluation until Compute(). May move clock() forward (BSP catch-up).
  // False: the job's steps are done (no step to run).
  absl::StatusOr<bool> Pull(bool all_weights);

  // Compute phase: the batch's rows (those the last end brought for these
  // keys, else pulled), then forward and backward on `batch`, each dense
  // gradient (block) pushed as soon as backward produces it (output layer
  // first) unless overlapped; a slowed worker sleeps, then sends them.
  // Returns the loss, or nullopt when the job's steps ended under this one
  // (BSP catch-up). The model's and the access's errors.
  absl::StatusOr<std::optional<float>> Compute(const data::Batch& batch);

  // Push phase: ends the step, with the row gradients. Unless it is the
  // last step, that also starts fetching the next step's weights (one
  // round trip instead of two) and, given `ahead` (the batch of step
  // clock() + lookahead(); null: none), its rows. A batch ahead the model
  // refuses is not asked for: its own step reports why. After an error the
  // calls in flight are cancelled and the next step pulls everything.
  absl::Status EndStep(const data::Batch* ahead = nullptr);

  void NextStep() { ++clock_; }

  // Returns and clears what was seen since the last call.
  StepObservations TakeObservations();

  // After the last step: waits for the calls still on their way.
  absl::Status Drain();
  // Pulls the weights of clock() into the model (the final evaluation).
  absl::Status PullWeights();

 private:
  StepPipeline(TrainableModel* model, client::ParameterAccess* params,
               StepPipelineOptions options, bool direct);

  // Pulls the weights of clock() into `tensors`; their version.
  absl::StatusOr<int64_t> PullInto(std::vector<absl::Span<float>> tensors);
  // Applies CatchUpClock to version_; false: the job's steps are done.
  bool CatchUp();
  // The previous step's end has arrived (false: the job's steps are done).
  bool Arrived(const client::CallResult& end);
  // All of the incoming weights (false: the job's steps are done).
  absl::StatusOr<bool> AwaitIncoming();
  // The hooks of Compute(), which wait for weights part by part.
  absl::Status BeforeUse(int index, int64_t begin, int64_t end);
  absl::Status BeforeBackward(bool* finished);
  // Pushes elements [begin, end) of parameter `index`'s gradient, unless
  // an earlier push of the step failed (`status`).
  void PushPart(int index, int64_t begin, int64_t end, absl::Status* status);

  // Rows fetched for step `clock` (-1: none) of a batch of `keys`, per
  // table.
  struct Rows {
    int64_t clock = -1;
    std::vector<std::vector<uint64_t>> keys;
    std::vector<std::vector<float>> rows;
  };
  // Sizes `rows` for `keys` of the model's tables.
  void Size(std::vector<std::vector<float>>& rows,
            const std::vector<std::vector<uint64_t>>& keys) const;
  // The rows of `batch` into the model: those that arrived for its keys,
  // or pulled.
  absl::Status LoadRows(const data::Batch& batch);
  // The step's row gradients, and the rows asked of the batch `ahead`.
  absl::Status TakeRows(const data::Batch* ahead, bool last,
                        std::vector<client::SparsePush>* pushes,
                        std::vector<client::SparsePull>* pulls);
  // The end of step `clock` is over: the rows it brought are the next.
  void RowsArrived(int64_t clock);
  // Overlap: waits for the end on its way (its weights the next step's).
  absl::Status DrainOverlap();
  // After an error: nothing fetched is used.
  void Forget();

  TrainableModel* const model_;
  client::ParameterAccess* const params_;
  const StepPipelineOptions options_;
  int64_t total_steps_ = options_.total_steps;  // the job's steps end here
  ParameterStaging staging_;
  std::unique_ptr<OverlapStepEnd> overlap_;  // with options_.overlap
  // Per parameter: its row blocks (empty: whole).
  std::vector<std::vector<int64_t>> row_splits_;

  int64_t clock_;
  int64_t skipped_steps_ = 0;
  int64_t version_ = 0;  // of the weights the step computes on
  // The weights of the next step, arriving part by part while it starts.
  std::optional<client::Handle> incoming_;
  bool arriving_ = false;  // this step's weights are `incoming_`
  // The weights for clock_, when the previous step's end already brought
  // them (overlap).
  bool prefetched_ = false;
  int64_t prefetched_version_ = 0;
  StepObservations seen_;

  // Sparse tables: per step parity the keys of its batch and their
  // gradients (a step's end reads them until it is over, while the next
  // step computes under overlap); rows pulled for a step; rows that arrived
  // for the next step and, after a Drain under overlap, for the one after;
  // rows on their way by the parity of the step whose end brings them. The
  // step whose end is on its way under overlap (-1: none).
  const bool sparse_;
  std::vector<std::vector<uint64_t>> keys_[2];
  std::vector<std::vector<float>> row_grads_[2];
  std::vector<std::vector<float>> pulled_rows_;
  Rows arrived_, later_;
  Rows flight_[2];
  int64_t overlap_end_clock_ = -1;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_STEP_PIPELINE_H_
