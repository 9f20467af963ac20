#ifndef PS_KERNELS_REDUCTION_MATH_H_
#define PS_KERNELS_REDUCTION_MATH_H_

// Combine rules of the reductions, shared by both backends so that ties and
// NaNs resolve the same way whatever the reduction order.

#include <cstdint>

#include "kernels/host_device.h"

namespace ps::kernels {

// Argmax: a candidate (value, index) beats the current best if it is larger,
// or equal with a smaller index. NaN never wins. Start from
// (-infinity, kArgmaxNone); a row that stays at kArgmaxNone (all NaN) gives 0.
inline constexpr int32_t kArgmaxNone = 0x7fffffff;

PS_HOST_DEVICE inline bool ArgmaxBetter(float value, int32_t index,
                                        float best_value, int32_t best_index) {
  return value > best_value || (value == best_value && index < best_index);
}

PS_HOST_DEVICE inline float MaxIgnoringNan(float a, float b) {
  return b > a ? b : a;
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_REDUCTION_MATH_H_
