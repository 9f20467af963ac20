// The loss at the end of a layer model (HeadSpec): softmax cross-entropy
// over classes, sigmoid binary cross-entropy over one logit, or the squared
// error of one prediction; its gradient for backward, and what evaluation
// reports for it (worker/model/trainable_model.h ModelEvaluation).
#ifndef PS_WORKER_MODEL_HEAD_H_
#define PS_WORKER_MODEL_HEAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "worker/model/trainable_model.h"

namespace ps::worker::model {

// Owns the labels of the current batch (host and device) and the loss
// buffer. Not thread-safe.
class Head {
 public:
  // `width`: values per example of the head's input (classes, or 1).
  Head(HeadSpec::Loss loss, int64_t width) : loss_(loss), width_(width) {}

  absl::Status Reserve(kernels::Backend& backend, int64_t batch);
  // The batch's labels: classes in [0, width) for softmax (INVALID_ARGUMENT
  // naming the example otherwise), numbers for the other heads (a class
  // reads as its number).
  absl::Status SetLabels(kernels::Backend& backend,
                         absl::Span<const int32_t> labels);
  // Real labels (clicks, ratings); INVALID_ARGUMENT for a softmax head.
  absl::Status SetTargets(kernels::Backend& backend,
                          absl::Span<const float> targets);
  // The mean loss over the batch (kept for LastLoss) and its gradient
  // d(mean loss)/d(output) into `doutput` [batch * width].
  absl::Status Loss(kernels::Backend& backend, int64_t batch,
                    kernels::DeviceSpan<const float> output,
                    kernels::DeviceSpan<float> doutput);
  absl::StatusOr<float> LastLoss(kernels::Backend& backend);
  // Loss and metrics of `output` against the labels set last.
  absl::StatusOr<ModelEvaluation> Evaluate(
      kernels::Backend& backend, int64_t batch,
      kernels::DeviceSpan<const float> output);

 private:
  const HeadSpec::Loss loss_;
  const int64_t width_;
  std::vector<float> host_labels_;  // classes as numbers
  kernels::DeviceBuffer classes_;   // int32, softmax
  kernels::DeviceBuffer targets_;   // fp32, the other heads
  kernels::DeviceBuffer argmax_;
  kernels::DeviceBuffer loss_value_;
};

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_HEAD_H_
