// The model as the step pipeline (worker/loop/step_pipeline.h) and the
// evaluator (worker/loop/evaluator.h) see it: dense parameter tensors to pull
// weights into and push gradients from, a train step with hooks for overlapping
// the transfers, and evaluation. The worker's model layer has one: the layer
// model (worker/model/layer_model.h), for layer DAGs and for the MLP of a
// job's MlpSpec, which it expands to Dense layers.
//
// Every model trains and evaluates on the data readers' batches
// (worker/data/batch.h), IDX images and text formats alike. A model with
// sparse embedding tables names per step the batch's unique keys per table
// (PrepareSparse), takes their pulled rows (SetSparseRows) before the step,
// and hands out one gradient row per key (GetSparseGradient) after it; the
// step pipeline drives that through the parameter access
// (worker/client/parameter_access.h).
#ifndef PS_WORKER_MODEL_TRAINABLE_MODEL_H_
#define PS_WORKER_MODEL_TRAINABLE_MODEL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/spec/eval_metrics.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"

namespace ps::worker {

// A dense parameter tensor, as the parameter servers place and initialise
// it (common/spec/model.h).
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

// A sparse table a model reads (ModelSpec.sparse_tables, in order: the
// index is the table's id towards the parameter servers).
struct SparseTableInfo {
  std::string name;
  int64_t dim = 0;  // values per row
};

struct ModelEvaluation {
  float loss = 0.0f;    // mean over the examples
  int64_t correct = 0;  // predictions equal to the label
  int64_t examples = 0;
  // What the model's head reports besides (HeadSpec): a sigmoid head its
  // probabilities' AUC and log loss (`correct` counts p >= 0.5 against a
  // label above 0.5), a squared-error head the RMSE (`correct` is 0); the
  // others stay empty (count 0). Merged over batches by the evaluator.
  HeadSpec::Loss head = HeadSpec::SOFTMAX_CROSS_ENTROPY;
  ExactAuc auc;
  LogLoss log_loss;
  Rmse rmse;
};

// Owns its parameter and gradient buffers (device memory of the backend it
// was made with). Not thread-safe: one training thread drives it.
class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  // The dense parameter tensors in the parameter servers' order
  // (common/spec/model.h ExpandModel).
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

  // The sparse tables the model reads, in order; empty for a dense model.
  virtual const std::vector<SparseTableInfo>& sparse_tables() const = 0;

  // A step or an evaluation over a batch of the data readers
  // (worker/data/batch.h: IDX images and text formats alike):
  //   keys = PrepareSparse(batch);            // per table, unique, ascending
  //   SetSparseRows(t, rows of keys[t]);      // for each table, as pulled
  //   TrainStep(batch, hooks) or Evaluate(batch);
  //   GetSparseGradient(t, ...);              // after TrainStep, per table
  // A dense model's PrepareSparse returns no tables and may be skipped.

  // Loads `batch`'s sparse fields for the step or evaluation over it that
  // follows, and returns per table the batch's unique keys, ascending (no
  // tables: empty). INVALID_ARGUMENT for a batch without a field the model
  // reads.
  virtual absl::StatusOr<std::vector<std::vector<uint64_t>>> PrepareSparse(
      const data::Batch& batch) = 0;
  // Table `table`'s rows of PrepareSparse's keys (keys x dim, host fp32), as
  // pulled; before the step.
  virtual absl::Status SetSparseRows(int table,
                                     absl::Span<const float> rows) = 0;
  // One forward and backward pass over `batch`; returns the mean loss, and
  // leaves gradient(i) = d(mean loss)/d(parameter i) and each table's
  // gradient for GetSparseGradient. FAILED_PRECONDITION for a model with
  // sparse inputs when PrepareSparse(batch) did not come first.
  virtual absl::StatusOr<float> TrainStep(const data::Batch& batch,
                                          const ModelStepHooks& hooks) = 0;
  // After TrainStep: d(mean loss)/d(row) for each of PrepareSparse's keys
  // of `table`, summed over the batch's uses of the key.
  virtual absl::Status GetSparseGradient(int table, absl::Span<float> rows) = 0;
  // Forward only over `batch` (PrepareSparse(batch) first for a model with
  // sparse inputs); gradients are left untouched.
  virtual absl::StatusOr<ModelEvaluation> Evaluate(
      const data::Batch& batch) = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_MODEL_TRAINABLE_MODEL_H_
