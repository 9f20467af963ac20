#ifndef PS_KERNELS_CPU_LAYER_OPS_H_
#define PS_KERNELS_CPU_LAYER_OPS_H_

// Private to the CPU backend: the loops of the layer ops (backend.h) over
// the shared math (conv_math.h, embedding_math.h, loss_math.h,
// interaction_math.h). Arguments are validated by Backend, except the values
// of device-side index arrays, which CheckBagIndices checks.

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/conv_math.h"
#include "kernels/types.h"

namespace ps::kernels::cpu {

void CopyMatrix(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                float* dst, int64_t ld_dst);

void Im2Col(const ConvGeometry& g, const float* images, float* patches);
void Col2Im(const ConvGeometry& g, const float* patches, float* images);

void MaxPool2DForward(const PoolGeometry& g, const float* x, float* y,
                      int32_t* argmax);
void MaxPool2DBackward(const PoolGeometry& g, const int32_t* argmax,
                       const float* dy, float* dx);
void AvgPool2DForward(const PoolGeometry& g, const float* x, float* y);
void AvgPool2DBackward(const PoolGeometry& g, const float* dy, float* dx);

// INVALID_ARGUMENT unless offsets run from 0 to nnz without decreasing and
// every id is in [0, num_rows).
absl::Status CheckBagIndices(const char* op, const int32_t* indices,
                             int64_t nnz, const int32_t* offsets,
                             int64_t num_bags, int64_t num_rows);
void EmbeddingBagForward(EmbeddingBagMode mode, const float* rows, int64_t dim,
                         const int32_t* indices, const int32_t* offsets,
                         int64_t num_bags, const float* weights, float* out,
                         int64_t ld_out);
void EmbeddingBagBackward(EmbeddingBagMode mode, const int32_t* indices,
                          const int32_t* offsets, int64_t num_bags,
                          const float* weights, const float* dout,
                          int64_t ld_dout, int64_t num_rows, int64_t dim,
                          float* drows);

// Mean loss over n elements; the gradient (scaled by 1 / n) if grad != null.
float SigmoidBinaryCrossEntropy(const float* logits, const float* labels,
                                int64_t n, float* grad);
float MeanSquaredError(const float* predictions, const float* targets,
                       int64_t n, float* grad);

void GatherLowerTriangle(const float* gram, int64_t count, int64_t fields,
                         float* out, int64_t ld_out);
void ScatterLowerTriangle(const float* dout, int64_t ld_dout, int64_t count,
                          int64_t fields, float* dgram);
void FmInteraction(const float* v, int64_t batch, int64_t fields, int64_t dim,
                   float* out);
void FmInteractionBackward(const float* v, int64_t batch, int64_t fields,
                           int64_t dim, const float* dout, float* dv);
void RowwiseDot(const float* a, const float* b, int64_t rows, int64_t dim,
                float* out);
void RowwiseDotBackward(const float* a, const float* b, int64_t rows,
                        int64_t dim, const float* dout, float* da, float* db);

}  // namespace ps::kernels::cpu

#endif  // PS_KERNELS_CPU_LAYER_OPS_H_
