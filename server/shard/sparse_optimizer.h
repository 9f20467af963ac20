// The optimizers of a sparse table (proto/config.proto, OptimizerSpec),
// applied to one row at a time: SGD, Adagrad, lazy Adam and FTRL-proximal.
// A row's optimizer state is `num_slots()` vectors of `dim` floats laid out
// after its weights (sparse_row_map.h) and, for Adam, the row's own step
// count. Weight decay (SGD, Adagrad, Adam) is L2 added to the gradient as
// for the dense tensors, and lazy: a row decays on the updates that touch it
// only. The learning rate follows the table's schedule at the job's step.
//
// Immutable after construction; thread-safe (the state it updates belongs to
// the caller, who locks the row).
#ifndef PS_SERVER_SHARD_SPARSE_OPTIMIZER_H_
#define PS_SERVER_SHARD_SPARSE_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"
#include "server/shard/optimizer.h"

namespace ps::server {

class SparseOptimizer {
 public:
  // `spec`: a sparse table's optimizer, normalised (common/spec/config.h).
  // INVALID_ARGUMENT for a kind sparse tables do not take.
  static absl::StatusOr<std::unique_ptr<SparseOptimizer>> Create(
      const OptimizerSpec& spec);

  const OptimizerSpec& spec() const { return spec_; }
  // Slot vectors per row: SGD 0, Adagrad 1 (n), Adam 2 (m, v), FTRL 2 (z, n).
  int num_slots() const { return num_slots_; }

  // The schedule's rate at `step` (as the dense optimizer's).
  float LearningRate(int64_t step) const {
    return schedule_->LearningRate(step);
  }

  // Writes a new row's slots (num_slots() x dim floats): Adagrad's and
  // FTRL's accumulators start at initial_accumulator, the rest at 0.
  void InitSlots(absl::Span<float> slots) const;

  // One update of the row `w` (dim floats) with gradient grad * scale at
  // rate `lr`; `slots` are the row's (num_slots() x dim), `steps` its count
  // of updates (lazy Adam's bias correction), incremented.
  void Apply(float lr, float scale, const float* grad, float* w, float* slots,
             uint32_t* steps, int dim) const;

 private:
  SparseOptimizer(const OptimizerSpec& spec,
                  std::unique_ptr<Optimizer> schedule);

  const OptimizerSpec spec_;
  const int num_slots_;
  // The dense optimizer of the same spec, for its learning-rate schedule.
  const std::unique_ptr<Optimizer> schedule_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SPARSE_OPTIMIZER_H_
