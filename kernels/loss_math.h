#ifndef PS_KERNELS_LOSS_MATH_H_
#define PS_KERNELS_LOSS_MATH_H_

// Per-element losses of the regression and click heads, written once for
// both backends: sigmoid binary cross-entropy on logits and squared error.
// The mean over elements is each backend's reduction.

#include <cmath>

#include "kernels/host_device.h"

namespace ps::kernels {

// 1 / (1 + exp(-x)) without overflow: exp of a non-positive argument only.
PS_HOST_DEVICE inline float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float z = expf(x);
  return z / (1.0f + z);
}

// -[y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))] for a logit x and a
// label y in [0, 1], as max(x, 0) - x y + log(1 + exp(-|x|)): finite for
// every finite x (no log of 0, no exp overflow).
PS_HOST_DEVICE inline float SigmoidBceLoss(float x, float y) {
  return (x > 0.0f ? x : 0.0f) - x * y + log1pf(expf(-fabsf(x)));
}

// d(scale * loss)/dx = scale * (sigmoid(x) - y).
PS_HOST_DEVICE inline float SigmoidBceGrad(float x, float y, float scale) {
  return (Sigmoid(x) - y) * scale;
}

PS_HOST_DEVICE inline float SquaredError(float prediction, float target) {
  const float d = prediction - target;
  return d * d;
}

// d(scale * (p - t)^2)/dp.
PS_HOST_DEVICE inline float SquaredErrorGrad(float prediction, float target,
                                             float scale) {
  return 2.0f * (prediction - target) * scale;
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_LOSS_MATH_H_
