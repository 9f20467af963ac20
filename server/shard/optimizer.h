// Server-side optimizers: SGD, momentum (optionally Nesterov) and Adam with
// L2 weight decay, and the learning-rate schedule (linear warmup, then
// constant, step or cosine). Applied per chunk by the shard store.
#ifndef PS_SERVER_SHARD_OPTIMIZER_H_
#define PS_SERVER_SHARD_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"

namespace ps::server {

// Per-chunk optimizer state: momentum / Adam moments and the number of
// updates applied (Adam's bias correction). Owned by the caller.
struct OptimizerSlots {
  std::vector<float> slot1;  // momentum velocity, or Adam's first moment
  std::vector<float> slot2;  // Adam's second moment
  int64_t steps = 0;
};

// Immutable after Create; thread-safe (state lives in OptimizerSlots, which
// the caller guards).
class Optimizer {
 public:
  // INVALID_ARGUMENT on a non-positive learning rate, momentum outside
  // [0, 1), Adam betas outside [0, 1), negative weight decay or a schedule
  // whose parameters cannot work (step_size <= 0 for STEP, ...).
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerSpec& spec);

  virtual ~Optimizer() = default;

  // The learning rate at global step `step` (0-based): a linear ramp to the
  // base rate over warmup_steps ((step + 1) / warmup), then the schedule.
  virtual float LearningRate(int64_t step) const = 0;

  // Sizes `slots` for a chunk of `num_elements` (zeros).
  virtual void InitSlots(int64_t num_elements, OptimizerSlots* slots) const = 0;

  // One update of `weights` with gradient `grad * grad_scale` (BSP passes
  // grad_scale = 1/N for the sum of N gradients) at learning rate `lr`.
  // Sizes must agree (the shard store checked them; a mismatch is a bug).
  virtual void Apply(float lr, float grad_scale, absl::Span<const float> grad,
                     absl::Span<float> weights, OptimizerSlots* slots) const {
    ApplyTo(lr, grad_scale, grad, weights, weights, slots);
  }

  // The same update written out of place: out = update(in). `out` may be
  // `in`. (The shard store writes a fresh buffer so that pulls can keep
  // reading the published one without a copy.)
  virtual void ApplyTo(float lr, float grad_scale, absl::Span<const float> grad,
                       absl::Span<const float> in, absl::Span<float> out,
                       OptimizerSlots* slots) const = 0;

  // Whether ApplyCheckedTo works for this optimizer: an update that changes
  // nothing but `out` (SGD, with or without weight decay). Momentum and Adam
  // update their slots in place, so a gradient found non-finite halfway
  // through would leave them changed.
  virtual bool CanApplyChecked() const = 0;

  // The update of ApplyTo, with the gradient read straight from raw
  // little-endian fp32 bytes split over `segments` anywhere, even inside a
  // float (in.size() * 4 bytes in all), and checked for NaN/Inf in the same
  // pass: false if an element is not finite (the update is written all the
  // same; a caller that rejects such gradients discards `out` and restores
  // `slots`). Saves a shard the separate check pass and the gather of a
  // payload split over receive buffers. Only where CanApplyChecked().
  virtual bool ApplyCheckedTo(float lr, float grad_scale,
                              absl::Span<const absl::string_view> segments,
                              absl::Span<const float> in, absl::Span<float> out,
                              OptimizerSlots* slots) const = 0;

  virtual const OptimizerSpec& spec() const = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_OPTIMIZER_H_
