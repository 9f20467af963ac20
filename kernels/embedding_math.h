#ifndef PS_KERNELS_EMBEDDING_MATH_H_
#define PS_KERNELS_EMBEDDING_MATH_H_

// Embedding bags, written once for both backends. A bag is a run of ids
// (rows of an embedding matrix) given in CSR form: bag b holds the ids
// indices[offsets[b] .. offsets[b + 1]), each with an optional weight. Its
// output is scale * sum_p weight[p] * rows[indices[p]], with scale 1 (sum)
// or 1 / (number of ids) (mean; an empty bag is zero either way).

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/types.h"

namespace ps::kernels {

// Bag b's positions in `indices`, clamped to [0, nnz] so that a kernel never
// reads outside them (the CPU backend rejects such offsets instead).
PS_HOST_DEVICE inline IndexRange BagPositions(const int32_t* offsets,
                                              int64_t bag, int64_t nnz) {
  int64_t begin = offsets[bag];
  int64_t end = offsets[bag + 1];
  begin = begin < 0 ? 0 : (begin > nnz ? nnz : begin);
  end = end < begin ? begin : (end > nnz ? nnz : end);
  return IndexRange{begin, end};
}

PS_HOST_DEVICE inline float BagScale(EmbeddingBagMode mode, int64_t count) {
  return mode == EmbeddingBagMode::kMean && count > 0
             ? 1.0f / static_cast<float>(count)
             : 1.0f;
}

PS_HOST_DEVICE inline float BagWeight(const float* weights, int64_t p) {
  return weights == nullptr ? 1.0f : weights[p];
}

PS_HOST_DEVICE inline bool BagIdValid(int32_t id, int64_t num_rows) {
  return id >= 0 && id < num_rows;
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_EMBEDDING_MATH_H_
