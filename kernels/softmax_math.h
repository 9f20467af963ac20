#ifndef PS_KERNELS_SOFTMAX_MATH_H_
#define PS_KERNELS_SOFTMAX_MATH_H_

// Numerically stable softmax cross-entropy, per element, given the row's
// maximum logit and sum of exp(logit - max). Shared by both backends; the
// reductions that produce max and sum are each backend's own.

#include <cmath>

#include "kernels/host_device.h"

namespace ps::kernels {

// exp(logit - row_max); the argument is <= 0, so it never overflows.
PS_HOST_DEVICE inline float SoftmaxShiftedExp(float logit, float row_max) {
  return expf(logit - row_max);
}

// -log softmax(label_logit) = log(sum_exp) - (label_logit - row_max).
// sum_exp >= 1 (the max term contributes exp(0)), so the log is finite.
PS_HOST_DEVICE inline float SoftmaxXentRowLoss(float label_logit, float row_max,
                                               float sum_exp) {
  return logf(sum_exp) - (label_logit - row_max);
}

// d(scale * loss)/d(logit) = scale * (softmax(logit) - [is_label]), given
// shifted_exp = SoftmaxShiftedExp(logit, row_max) and 1 / sum_exp.
PS_HOST_DEVICE inline float SoftmaxXentGradFromExp(float shifted_exp,
                                                   float inv_sum_exp,
                                                   bool is_label, float scale) {
  return (shifted_exp * inv_sum_exp - (is_label ? 1.0f : 0.0f)) * scale;
}

PS_HOST_DEVICE inline float SoftmaxXentGrad(float logit, float row_max,
                                            float inv_sum_exp, bool is_label,
                                            float scale) {
  return SoftmaxXentGradFromExp(SoftmaxShiftedExp(logit, row_max), inv_sum_exp,
                                is_label, scale);
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_SOFTMAX_MATH_H_
