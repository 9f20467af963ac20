// Training steps of a model with sparse tables over batches of the data
// readers (worker/data/batch.h), through a ParameterAccess: the dense
// weights and the batch's rows (one per unique key and table) are pulled,
// forward and backward run, the dense gradients and one gradient row per
// unique key are pushed, and the step ends.
//
// SparseStepper overlaps what the dependency order allows. Given the next
// step's batch, a step's pushes carry that batch's keys and bring its rows
// back in their answers (SparseRowAccess::PushRowsAndPull), and the end of
// the step brings the next step's dense weights (FinishAndPull): one round
// trip per shard a step instead of a pull of the weights, one of each
// table's rows, then the pushes and the end. Those rows wait as a pull at
// clock + 1 would (BSP: for the step to close), so each model's
// consistency is kept. While they are on their way a caller's function
// runs (the data trainer reads the batch after next there). Every call has
// ended when Step returns.
#ifndef PS_WORKER_SPARSE_STEP_H_
#define PS_WORKER_SPARSE_STEP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/data/batch.h"
#include "worker/parameter_access.h"
#include "worker/trainable_model.h"

namespace ps::worker {

struct SparseStepResult {
  float loss = 0.0f;
  int64_t staleness = 0;    // as Finish returns it
  int64_t unique_keys = 0;  // over the tables
  // Where the step's time went: waiting for weights and rows not already
  // prefetched; forward, backward and handing out the gradients; waiting
  // for the pushes, the end of the step and what they bring back (less
  // the time `in_flight` took, which is `in_flight`'s own).
  absl::Duration pull;
  absl::Duration compute;
  absl::Duration push;
  absl::Duration in_flight;
};

// Drives one model's steps through one access (both not owned; they must
// outlive it). Not thread-safe: the training thread drives it.
class SparseStepper {
 public:
  SparseStepper(TrainableModel& model, ParameterAccess& access,
                const Clock* clock = Clock::Real());

  // Step `clock` on `batch`. `next`: the batch step clock + 1 will train,
  // when known (nullptr for the last step): its rows and the dense weights
  // of clock + 1 are fetched with this step's end. A later Step(clock + 1)
  // on a batch of other keys (the plan moved) pulls its rows itself, and
  // any other clock pulls everything. `in_flight` (may be empty) runs
  // while the step's calls are on their way. The model is free between
  // steps (an evaluation may use it). The access's errors unchanged; after
  // an error the next step pulls everything.
  absl::StatusOr<SparseStepResult> Step(
      int64_t clock, const data::Batch& batch, const data::Batch* next,
      const std::function<void()>& in_flight = {});

 private:
  // Weights and rows pulled for step `clock`, in `weights_` and `rows_`.
  absl::Status PullFor(int64_t clock, bool weights, bool rows);
  // Pushes this step's gradients (rows_grads_) and ends the step, fetching
  // clock + 1's weights and `next_keys`' rows when `next_keys` is given.
  absl::StatusOr<int64_t> PushAndEnd(
      int64_t clock, const std::vector<std::vector<uint64_t>>* next_keys,
      const std::function<void()>& in_flight, absl::Duration* in_flight_time);

  TrainableModel& model_;
  ParameterAccess& access_;
  const Clock* const clock_;

  // Dense weights (pulled), their version, and the clock they are for (-1:
  // none); the dense gradients, pushed from their own buffers while the
  // next weights arrive.
  std::vector<std::vector<float>> weights_;
  std::vector<std::vector<float>> grads_;
  int64_t version_ = 0;
  int64_t weights_clock_ = -1;
  // The step's keys and rows per table, the rows' gradients, and the next
  // step's keys and rows (asked back with this step's pushes) and their
  // clock (-1: none).
  std::vector<std::vector<uint64_t>> keys_;
  std::vector<std::vector<float>> rows_;
  std::vector<std::vector<float>> row_grads_;
  std::vector<std::vector<uint64_t>> next_keys_;
  std::vector<std::vector<float>> next_rows_;
  int64_t next_rows_clock_ = -1;
};

// One step with nothing prefetched and nothing fetched for later: a
// SparseStepper's Step(clock, batch, nullptr).
absl::StatusOr<SparseStepResult> RunSparseStep(TrainableModel& model,
                                               ParameterAccess& access,
                                               int64_t clock,
                                               const data::Batch& batch);

}  // namespace ps::worker

#endif  // PS_WORKER_SPARSE_STEP_H_
