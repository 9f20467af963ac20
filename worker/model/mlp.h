// A multi-layer perceptron with softmax cross-entropy over the kernels' op
// API: the model a job's MlpSpec describes, behind the TrainableModel seam
// through mlp_model.h. (It used to live in kernels/, which keeps only the op
// API and its backends.)
#ifndef PS_WORKER_MODEL_MLP_H_
#define PS_WORKER_MODEL_MLP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "worker/trainable_model.h"

namespace ps::worker::model {

struct MlpOptions {
  // {input, hidden..., classes}, e.g. {784, 256, 128, 10}; at least two sizes.
  std::vector<int64_t> layer_sizes;
  // Applied after every layer but the last (whose output is the logits).
  kernels::Activation activation = kernels::Activation::kRelu;
};

// A multi-layer perceptron with softmax cross-entropy loss, over the op API
// only: the same code runs on every backend.
//
//   auto mlp = Mlp::Create(backend.get(), {.layer_sizes = {784, 256, 128,
//   10}}); for (int i = 0; i < mlp->num_parameters(); ++i)
//     mlp->SetParameter(i, pulled[i]);                // host fp32
//   absl::StatusOr<float> loss = mlp->TrainStep(images, labels);
//   for (int i = 0; i < mlp->num_parameters(); ++i)
//     mlp->GetGradient(i, grads[i]);                  // host fp32
//   absl::StatusOr<Mlp::Evaluation> eval = mlp->Evaluate(images, labels);
//
// Owns its parameter, gradient and activation buffers (device memory of the
// backend), which it grows to the largest batch seen. The backend is not
// owned and must outlive the Mlp. Not thread-safe.
//
// Errors: INVALID_ARGUMENT for bad sizes, wrong host buffer lengths, labels
// outside [0, classes); the backend's errors otherwise.
class Mlp {
 public:
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(kernels::Backend* backend,
                                                     const MlpOptions& options);

  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;
  ~Mlp();

  // The parameter tensors, in the order the parameter server uses
  // (common/model.h): "fc<i>/weight" [in, out], then "fc<i>/bias" [out], for
  // i = 0, 1, ...
  const std::vector<ParameterInfo>& parameters() const { return info_; }
  int num_parameters() const { return static_cast<int>(info_.size()); }
  // Index of the named parameter, or -1.
  int FindParameter(std::string_view name) const;

  // Weights from the seeded initializers (He uniform for ReLU, Xavier uniform
  // for tanh; parameter i uses seed + i), biases zero. Workers normally pull
  // weights instead; this is for tests and single-process runs.
  absl::Status InitializeParameters(uint64_t seed);

  // Parameter `index` from host fp32 (exactly parameters()[index].size
  // values), or from device memory of the same backend.
  absl::Status SetParameter(int index, absl::Span<const float> host);
  absl::Status SetParameterFromDevice(int index,
                                      kernels::DeviceSpan<const float> src);
  absl::Status GetParameter(int index, absl::Span<float> host);
  // Parameter `index` in device memory (empty span for a bad index), e.g. for
  // a local optimizer step with Backend::Axpy.
  kernels::DeviceSpan<float> parameter(int index);

  // One forward and backward pass over a batch: images [batch, input]
  // row-major, labels [batch]. Returns the mean loss; afterwards gradient(i)
  // holds d(mean loss)/d(parameter i).
  //
  // `on_gradient_ready`, if set, is called with each parameter index as soon
  // as backward has produced that gradient, last layer first (fc<L-1>/weight,
  // fc<L-1>/bias, ..., fc0/bias), so a worker can push one layer while the
  // next is computed. The gradient is complete in stream order: GetGradient()
  // called from the callback returns it. The callback must not call
  // TrainStep or Evaluate.
  using GradientReadyFn = std::function<void(int parameter_index)>;
  absl::StatusOr<float> TrainStep(
      absl::Span<const float> images, absl::Span<const int32_t> labels,
      const GradientReadyFn& on_gradient_ready = nullptr);

  // Hooks for a worker that overlaps its transfers with the step. The first
  // layer's weight (fc0/weight, [input, width], usually most of the model)
  // can be used and differentiated in blocks of rows: forward sums the
  // blocks' products (X[:, rows] W[rows, :]) as the rows become available,
  // and backward produces its gradient block by block, so the first blocks
  // can travel while the next are computed.
  struct StepHooks {
    // Row boundaries of fc0/weight's blocks, ascending, inside (0, input);
    // empty: one block.
    std::vector<int64_t> first_weight_row_splits;
    // Called before forward reads elements [begin, end) of parameter
    // `index` (fc0/weight block by block, every other parameter whole, in
    // the order forward uses them), e.g. to wait for their pull. On the
    // device, writes the hook makes to the parameter (SetParameterRange)
    // come before the reads in stream order. An error ends the step.
    std::function<absl::Status(int index, int64_t begin, int64_t end)>
        before_use;
    // Called between forward and backward (an error ends the step).
    std::function<absl::Status()> before_backward;
    // Called when elements [begin, end) of parameter `index`'s gradient are
    // complete in stream order: fc0/weight block by block (in the order of
    // the splits), every other parameter whole; right after each call for
    // a parameter's last part, on_gradient_ready(index) follows. From then
    // on the step no longer reads parameter `index` (nor its gradient), so
    // the caller may overwrite it with the next step's weights.
    std::function<void(int index, int64_t begin, int64_t end)> on_gradient_part;
    GradientReadyFn on_gradient_ready;
  };
  absl::StatusOr<float> TrainStep(absl::Span<const float> images,
                                  absl::Span<const int32_t> labels,
                                  const StepHooks& hooks);

  // Elements [offset, offset + host.size()) of parameter `index` from host
  // fp32; of its gradient to host fp32.
  absl::Status SetParameterRange(int index, int64_t offset,
                                 absl::Span<const float> host);
  absl::Status GetGradientRange(int index, int64_t offset,
                                absl::Span<float> host);

  // The gradients of the last TrainStep: on the device, or copied to host.
  kernels::DeviceSpan<const float> gradient(int index) const;
  absl::Status GetGradient(int index, absl::Span<float> host);

  // Exchange parameter `index`'s buffer, or its gradient's, with `other`, a
  // buffer of at least its size from this model's backend, without copying:
  // for a caller that fills the next weights while a step computes on the
  // current ones, or still sends a step's gradient while the next step's
  // backward runs (backward writes every gradient element, whatever the
  // buffer held). INVALID_ARGUMENT for a bad index or a buffer too small.
  absl::Status SwapParameterBuffer(int index, kernels::DeviceBuffer& other);
  absl::Status SwapGradientBuffer(int index, kernels::DeviceBuffer& other);

  struct Evaluation {
    float loss = 0.0f;    // mean over the batch
    int64_t correct = 0;  // argmax(logits) == label
    int64_t examples = 0;
  };
  // Forward only; gradients are left untouched.
  absl::StatusOr<Evaluation> Evaluate(absl::Span<const float> images,
                                      absl::Span<const int32_t> labels);

 private:
  Mlp(kernels::Backend* backend, const MlpOptions& options);
  absl::Status Allocate();
  absl::Status EnsureBatchCapacity(int64_t batch);
  // Validates and uploads a batch; returns its size.
  absl::StatusOr<int64_t> LoadBatch(absl::Span<const float> images,
                                    absl::Span<const int32_t> labels);
  // `blocks`: fc0/weight's row blocks (RowBlocks); empty: one block.
  absl::Status Forward(int64_t batch, const StepHooks* hooks = nullptr,
                       const std::vector<int64_t>& blocks = {});
  // [0, splits..., input]: fc0/weight's row blocks (validated).
  absl::StatusOr<std::vector<int64_t>> RowBlocks(
      const std::vector<int64_t>& splits) const;
  absl::Status CheckRange(int index, int64_t offset, size_t size) const;
  absl::Status CheckIndex(int index) const;
  absl::Status SwapBuffer(std::vector<kernels::DeviceBuffer>& buffers,
                          int index, kernels::DeviceBuffer& other,
                          const char* what);
  int num_layers() const { return static_cast<int>(sizes_.size()) - 1; }

  kernels::Backend* const backend_;
  const std::vector<int64_t> sizes_;
  const kernels::Activation activation_;
  std::vector<ParameterInfo> info_;
  std::vector<kernels::DeviceBuffer> params_;
  std::vector<kernels::DeviceBuffer> grads_;
  int64_t capacity_ = 0;  // batch the buffers below are sized for
  std::vector<kernels::DeviceBuffer>
      acts_;                        // [0]: input; [i + 1]: layer i's output
  kernels::DeviceBuffer delta_[2];  // backward ping-pong, [batch, max width]
  kernels::DeviceBuffer labels_;
  kernels::DeviceBuffer argmax_;
  kernels::DeviceBuffer loss_;
};

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_MLP_H_
