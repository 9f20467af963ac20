#ifndef PS_KERNELS_ELEMENTWISE_MATH_H_
#define PS_KERNELS_ELEMENTWISE_MATH_H_

// Small element-wise formulas shared by both backends.

#include "kernels/host_device.h"

namespace ps::kernels {

PS_HOST_DEVICE inline float AxpyElement(float alpha, float x, float y) {
  return alpha * x + y;
}

PS_HOST_DEVICE inline float BiasAddElement(float y, float bias) {
  return y + bias;
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_ELEMENTWISE_MATH_H_
