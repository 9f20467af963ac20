#ifndef PS_KERNELS_INTERACTION_MATH_H_
#define PS_KERNELS_INTERACTION_MATH_H_

// Feature interactions, written once for both backends: the pair order of
// DLRM's dot interaction and the factorization machine's second-order term.

#include <cstdint>

#include "kernels/host_device.h"

namespace ps::kernels {

// The strictly lower triangle (i > j) of a [fields, fields] matrix, row by
// row: pair (i, j) is column i * (i - 1) / 2 + j of the output (DLRM's order,
// torch.tril_indices(offset=-1)).
PS_HOST_DEVICE inline int64_t LowerTrianglePair(int64_t i, int64_t j) {
  return i * (i - 1) / 2 + j;
}

PS_HOST_DEVICE inline int64_t LowerTriangleSize(int64_t fields) {
  return fields * (fields - 1) / 2;
}

// FM second order, per embedding dimension d, from s = sum_f v[f, d] and
// q = sum_f v[f, d]^2: sum_{f < g} v[f, d] v[g, d] = (s^2 - q) / 2.
PS_HOST_DEVICE inline float FmTerm(float sum, float sum_sq) {
  return 0.5f * (sum * sum - sum_sq);
}

// d(dout * FmTerm)/dv[f, d] = dout * (s - v[f, d]).
PS_HOST_DEVICE inline float FmGrad(float dout, float sum, float v) {
  return dout * (sum - v);
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_INTERACTION_MATH_H_
