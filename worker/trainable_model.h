// The model as the step pipeline (worker/step_pipeline.h) and the evaluator
// (worker/evaluator.h) see it: dense parameter tensors to pull weights into
// and push gradients from, a train step with hooks for overlapping the
// transfers, and evaluation. kernels::Mlp is one (worker/mlp_model.h); the
// layer-DAG models of the worker's model layer are meant to be others.
//
// Where sparse embedding tables would plug in: a model with tables would
// also name, per step, the batch's unique keys per table, take the pulled
// rows before forward reads them (as before_use does for dense tensors), and
// hand out a gradient row per key after backward (as on_gradient_part does);
// the pipeline would pull and push them beside the dense tensors.
#ifndef PS_WORKER_TRAINABLE_MODEL_H_
#define PS_WORKER_TRAINABLE_MODEL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "worker/batch_prefetcher.h"
#include "worker/dataset.h"

namespace ps::worker {

// A dense parameter tensor, as the parameter servers place and initialise
// it (common/model.h).
struct ParameterInfo {
  std::string name;  // e.g. "fc0/weight"
  std::vector<int64_t> shape;
  int64_t size = 0;  // elements
};

// Hooks a step calls so that a worker can overlap its transfers with it.
struct ModelStepHooks {
  // row_splits[i]: row boundaries (ascending, inside (0, rows)) at which
  // parameter i is used and differentiated in blocks, for the parameters
  // SplitsRows() names; missing or empty: one block.
  std::vector<std::vector<int64_t>> row_splits;
  // Called before forward reads elements [begin, end) of parameter `index`
  // (block by block where split, every other parameter whole, in the order
  // forward uses them), e.g. to wait for their pull. Writes the hook makes
  // to the parameter (SetParameterRange) come before the reads. An error
  // ends the step.
  std::function<absl::Status(int index, int64_t begin, int64_t end)> before_use;
  // Called between forward and backward (an error ends the step).
  std::function<absl::Status()> before_backward;
  // Called when elements [begin, end) of parameter `index`'s gradient are
  // complete (block by block where split, in the order of the splits, every
  // other parameter whole). From then on the step no longer reads parameter
  // `index` nor its gradient, so the caller may send the gradient and
  // overwrite the parameter with the next step's weights.
  std::function<void(int index, int64_t begin, int64_t end)> on_gradient_part;
};

struct ModelEvaluation {
  float loss = 0.0f;    // mean over the examples
  int64_t correct = 0;  // predictions equal to the label
  int64_t examples = 0;
};

// Owns its parameter and gradient buffers (device memory of the backend it
// was made with). Not thread-safe: one training thread drives it.
class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  // The dense parameter tensors in the parameter servers' order
  // (common/model.h ExpandModel).
  virtual const std::vector<ParameterInfo>& parameters() const = 0;
  int num_parameters() const { return static_cast<int>(parameters().size()); }
  // Whether parameter `index` can be used in row blocks
  // (ModelStepHooks::row_splits).
  virtual bool SplitsRows(int index) const = 0;

  // Parameter `index` and its gradient in device memory (empty for a bad
  // index).
  virtual kernels::DeviceSpan<float> parameter(int index) = 0;
  virtual kernels::DeviceSpan<const float> gradient(int index) const = 0;
  // Elements [offset, offset + host.size()) of parameter `index` from host
  // fp32; of its gradient to host fp32. INVALID_ARGUMENT outside it.
  virtual absl::Status SetParameterRange(int index, int64_t offset,
                                         absl::Span<const float> host) = 0;
  virtual absl::Status GetGradientRange(int index, int64_t offset,
                                        absl::Span<float> host) = 0;
  // Exchange parameter `index`'s buffer, or its gradient's, with `other` (a
  // buffer of at least its size from the same backend) without copying.
  virtual absl::Status SwapParameterBuffer(int index,
                                           kernels::DeviceBuffer& other) = 0;
  virtual absl::Status SwapGradientBuffer(int index,
                                          kernels::DeviceBuffer& other) = 0;

  // One forward and backward pass over `batch`; returns the mean loss, and
  // leaves gradient(i) = d(mean loss)/d(parameter i).
  virtual absl::StatusOr<float> TrainStep(const Batch& batch,
                                          const ModelStepHooks& hooks) = 0;
  // Forward only over examples [begin, begin + count) of `data`; gradients
  // are left untouched.
  virtual absl::StatusOr<ModelEvaluation> Evaluate(const Dataset& data,
                                                   int64_t begin,
                                                   int64_t count) = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_TRAINABLE_MODEL_H_
