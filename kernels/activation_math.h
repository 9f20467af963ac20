#ifndef PS_KERNELS_ACTIVATION_MATH_H_
#define PS_KERNELS_ACTIVATION_MATH_H_

// Activation forward and backward, written once for both backends. Backward
// takes the forward *output* y, so models keep only activations.

#include <cmath>

#include "kernels/host_device.h"
#include "kernels/loss_math.h"
#include "kernels/types.h"

namespace ps::kernels {

template <Activation kAct>
PS_HOST_DEVICE inline float ActivationForward(float x) {
  if constexpr (kAct == Activation::kRelu) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (kAct == Activation::kTanh) {
    return tanhf(x);
  } else {
    return Sigmoid(x);
  }
}

// dL/dx given y = f(x) and dL/dy.
template <Activation kAct>
PS_HOST_DEVICE inline float ActivationBackward(float y, float dy) {
  if constexpr (kAct == Activation::kRelu) {
    return y > 0.0f ? dy : 0.0f;
  } else if constexpr (kAct == Activation::kTanh) {
    return dy * (1.0f - y * y);
  } else {
    return dy * y * (1.0f - y);
  }
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_ACTIVATION_MATH_H_
