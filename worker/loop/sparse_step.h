// Training steps of a model with sparse tables over batches of the data
// readers (worker/data/batch.h), through a client::ParameterAccess: the dense
// weights and the batch's rows (one per unique key and table) are pulled,
// forward and backward run, the dense gradients and one gradient row per
// unique key are pushed, and the step ends.
//
// SparseStepper overlaps what the dependency order allows. Given the next
// step's batch, a step's pushes carry that batch's keys and bring its rows
// back in their answers (StepArgs::next_rows), and the end of the step
// brings the next step's dense weights (next_weights): one round
// trip per shard a step instead of a pull of the weights, one of each
// table's rows, then the pushes and the end. Those rows wait as a pull at
// clock + 1 would (BSP: for the step to close), so each model's
// consistency is kept. While they are on their way a caller's function
// runs (the data trainer reads a later batch there).
//
// With `overlap` (ASP with overlap_communication, as the dense pipeline's
// OverlapStepEnd): step t + 1 computes while step t's gradients travel, on
// the weights and rows that step t - 1's end brought (its pushes asked for
// the rows of the batch two steps on): one more of the worker's own steps
// of staleness, and no wait for a round trip between steps.
#ifndef PS_WORKER_LOOP_SPARSE_STEP_H_
#define PS_WORKER_LOOP_SPARSE_STEP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "worker/client/parameter_access.h"
#include "worker/data/batch.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {

struct SparseStepResult {
  float loss = 0.0f;
  // Staleness summed over the step ends completed in this call (as Finish
  // returns it), and their count: 1 a step; with overlap, 0 for the first
  // step (its end is still on its way) and 2 for the last.
  int64_t staleness = 0;
  int64_t staleness_ends = 0;
  int64_t unique_keys = 0;  // over the tables
  // The version of the weights fetched for the next step; -1 when none
  // were (the last step; with overlap). Under BSP a version past clock + 1
  // means the job moved on without this worker (SkipTo).
  int64_t next_version = -1;
  // Where the step's time went: waiting for weights and rows not already
  // prefetched; forward, backward and handing out the gradients; waiting
  // for the pushes, the end of the step and what they bring back (less
  // the time `in_flight` took, which is `in_flight`'s own).
  absl::Duration pull;
  absl::Duration compute;
  absl::Duration push;
  absl::Duration in_flight;
};

struct SparseStepperOptions {
  // ASP with overlap_communication (ConsistencySpec).
  bool overlap = false;
  const Clock* clock = Clock::Real();
};

// Drives one model's steps through one access (both not owned; they must
// outlive it). Not thread-safe: the training thread drives it. Destroying
// it with a step end on its way cancels the access's calls.
class SparseStepper {
 public:
  SparseStepper(TrainableModel& model, client::ParameterAccess& access,
                SparseStepperOptions options = {});
  ~SparseStepper();
  SparseStepper(const SparseStepper&) = delete;
  SparseStepper& operator=(const SparseStepper&) = delete;

  // How many batches past a step's own it reads (`ahead` below): 1, or 2
  // with overlap.
  int lookahead() const { return overlap_ ? 2 : 1; }

  // Step `clock` on `batch`. `ahead`: the batches of steps clock + 1, ...,
  // clock + lookahead(), as far as they are known (a shorter list near the
  // end; empty for the last step, whose end Step waits for): the rows of
  // the last one and the dense weights of the next step are fetched with
  // this step's end. A later step on a batch of other keys (the plan moved)
  // pulls its rows itself, and a clock other than the one fetched for pulls
  // everything. `in_flight` (may be empty) runs while the step's calls are
  // on their way. The model is free between steps (an evaluation may use
  // it; the access too after Drain()). The access's errors unchanged; after
  // an error the calls in flight are cancelled and the next step pulls
  // everything.
  absl::StatusOr<SparseStepResult> Step(
      int64_t clock, const data::Batch& batch,
      const std::vector<const data::Batch*>& ahead,
      const std::function<void()>& in_flight = {});

  // Waits for a step end still on its way (overlap). Its staleness counts
  // in the next step's result. The access's errors (the calls cancelled).
  absl::Status Drain();

  // BSP, before the first step: pulls the weights of the step the shards
  // are at (their lowest open step, PullArgs::current) and returns it: the
  // worker's first step, on those weights, whatever step its assignment
  // named (the shards count a joining worker among their open step's
  // workers, so it must end that step). `clock`: the assignment's step.
  absl::StatusOr<int64_t> Join(int64_t clock);
  // BSP catch-up: the weights fetched for the next step are of a later
  // version (the job moved on without this worker: a backup whose
  // gradients came late); the next step is `clock`, that version, on them.
  void SkipTo(int64_t clock);

 private:
  // Weights and rows pulled for step `clock`, in `weights_` and `rows_`.
  absl::Status PullFor(int64_t clock, bool weights, bool rows);
  // The end on its way completed: its weights and rows become the next
  // ones, its staleness is added to the next result.
  absl::Status AwaitPending();
  // Sends this step's gradients and ends the step, asking for the rows of
  // `ahead_keys` (nullptr: none) and, when asked for anything, the next
  // weights. Without overlap it waits for all of it.
  absl::Status SendEnd(int64_t clock, int64_t base_version, bool last,
                       const std::vector<std::vector<uint64_t>>* ahead_keys,
                       const std::function<void()>& in_flight,
                       absl::Duration* in_flight_time);
  // After an error: nothing fetched is used.
  void Forget();
  // Rows (per table) sized for `keys` of the model's tables.
  void Size(std::vector<std::vector<float>>& rows,
            const std::vector<std::vector<uint64_t>>& keys) const;

  TrainableModel& model_;
  client::ParameterAccess& access_;
  const Clock* const clock_;
  const bool overlap_;

  // Dense weights (pulled or arrived), their version, and the clock they
  // are for (-1: none; with overlap, any later clock computes on them); the
  // weights on their way (overlap); the dense gradients, pushed from their
  // own buffers.
  std::vector<std::vector<float>> weights_;
  std::vector<std::vector<float>> incoming_weights_;
  std::vector<std::vector<float>> grads_;
  int64_t version_ = 0;
  int64_t weights_clock_ = -1;
  // Rows fetched for step `clock` (-1: none) of a batch of `keys`, per
  // table.
  struct Fetched {
    int64_t clock = -1;
    std::vector<std::vector<uint64_t>> keys;
    std::vector<std::vector<float>> rows;
  };
  // The step's keys and rows per table and the rows' gradients; the keys
  // of the step whose pushes are on their way (overlap); rows that have
  // arrived for the next step and, after a Drain (overlap), for the one
  // after; rows on their way.
  std::vector<std::vector<uint64_t>> keys_;
  std::vector<std::vector<float>> rows_;
  std::vector<std::vector<float>> row_grads_;
  std::vector<std::vector<uint64_t>> pushed_keys_;
  Fetched arrived_, later_, flight_;
  // The step end on its way (overlap), and the staleness of ends completed
  // outside a step's result (Drain).
  std::optional<client::Handle> pending_;
  int64_t carried_staleness_ = 0;
  int64_t next_version_ = -1;  // for the result (SparseStepResult)
  int64_t carried_ends_ = 0;
};

// One step with nothing prefetched and nothing fetched for later: a
// SparseStepper's Step(clock, batch, {}).
absl::StatusOr<SparseStepResult> RunSparseStep(TrainableModel& model,
                                               client::ParameterAccess& access,
                                               int64_t clock,
                                               const data::Batch& batch);

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_SPARSE_STEP_H_
