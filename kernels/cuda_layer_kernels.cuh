#ifndef PS_KERNELS_CUDA_LAYER_KERNELS_CUH_
#define PS_KERNELS_CUDA_LAYER_KERNELS_CUH_

// The CUDA kernels of the layer ops (backend.h) and their launch helpers,
// compiled twice like kernels/cuda_kernels.cuh (whose rules and helpers they
// use): by nvcc into cuda_backend.cu, and by g++ under the launch emulation
// in tests. The includer also provides atomicAdd(float*, float).
//
// Every kernel computes its elements with the shared math (conv_math.h,
// embedding_math.h, loss_math.h, interaction_math.h) in the same order as
// the CPU backend's loops, except where noted: the embedding bag's backward
// pass, which adds with atomics, and the FM and row-wise dot reductions,
// which add in a tree.

#include <cstdint>

#include "kernels/conv_math.h"
#include "kernels/cuda_kernels.cuh"
#include "kernels/embedding_math.h"
#include "kernels/interaction_math.h"
#include "kernels/loss_math.h"
#include "kernels/types.h"

namespace ps::kernels::cuda {

inline constexpr int kRowDotRowsPerBlock = 8;
inline constexpr int kRowDotLanes = 32;

// ---------------------------------------------------------------------------
// Kernels.

__global__ void CopyMatrixKernel(const float* src, int64_t ld_src, int64_t rows,
                                 int64_t cols, float* dst, int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const int64_t r = i / cols;
    const int64_t c = i % cols;
    dst[r * ld_dst + c] = src[r * ld_src + c];
  }
}

// One thread per patch-matrix element.
__global__ void Im2ColKernel(ConvGeometry g, const float* images,
                             float* patches) {
  const int64_t columns = g.patch_size();
  const int64_t n = g.batch * g.out_pixels() * columns;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const int64_t src = Im2ColSourceIndex(g, i / columns, i % columns);
    patches[i] = src >= 0 ? images[src] : 0.0f;
  }
}

// One thread per image element: gathers the patch entries that read it (no
// atomics; the CPU's order).
__global__ void Col2ImKernel(ConvGeometry g, const float* patches,
                             float* images) {
  const int64_t n = g.batch * g.image_size();
  const int64_t columns = g.patch_size();
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const int64_t c = i % g.in_c;
    const int64_t pixel = i / g.in_c;
    const int64_t iw = pixel % g.in_w;
    const int64_t ih = (pixel / g.in_w) % g.in_h;
    const int64_t image = pixel / (g.in_w * g.in_h);
    float sum = 0.0f;
    ForEachPatchEntryReading(g, image, ih, iw,
                             [&](int64_t patch_row, int64_t column) {
                               sum += patches[patch_row * columns + column + c];
                             });
    images[i] = sum;
  }
}

// Output (n, oh, ow, c) of a pooling from its flat NHWC index.
struct PoolOutput {
  int64_t n, oh, ow, c;
};
__device__ inline PoolOutput PoolOutputAt(const PoolGeometry& g, int64_t i) {
  const int64_t c = i % g.channels;
  const int64_t pixel = i / g.channels;
  const int64_t ow = pixel % g.out_w();
  const int64_t oh = (pixel / g.out_w()) % g.out_h();
  return PoolOutput{pixel / (g.out_w() * g.out_h()), oh, ow, c};
}
__device__ inline PoolOutput PoolInputAt(const PoolGeometry& g, int64_t i) {
  const int64_t c = i % g.channels;
  const int64_t pixel = i / g.channels;
  const int64_t w = pixel % g.in_w;
  const int64_t h = (pixel / g.in_w) % g.in_h;
  return PoolOutput{pixel / (g.in_w * g.in_h), h, w, c};
}

__global__ void MaxPoolForwardKernel(PoolGeometry g, const float* x, float* y,
                                     int32_t* argmax) {
  const int64_t n = g.out_size();
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const PoolOutput o = PoolOutputAt(g, i);
    const MaxPoolResult r = MaxPoolElement(g, x, o.n, o.oh, o.ow, o.c);
    y[i] = r.value;
    argmax[i] = r.index;
  }
}

__global__ void MaxPoolBackwardKernel(PoolGeometry g, const int32_t* argmax,
                                      const float* dy, float* dx) {
  const int64_t n = g.batch * g.image_size();
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const PoolOutput p = PoolInputAt(g, i);
    dx[i] = MaxPoolGradElement(g, argmax, dy, p.n, p.oh, p.ow, p.c);
  }
}

__global__ void AvgPoolForwardKernel(PoolGeometry g, const float* x, float* y) {
  const int64_t n = g.out_size();
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const PoolOutput o = PoolOutputAt(g, i);
    y[i] = AvgPoolElement(g, x, o.n, o.oh, o.ow, o.c);
  }
}

__global__ void AvgPoolBackwardKernel(PoolGeometry g, const float* dy,
                                      float* dx) {
  const int64_t n = g.batch * g.image_size();
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const PoolOutput p = PoolInputAt(g, i);
    dx[i] = AvgPoolGradElement(g, dy, p.n, p.oh, p.ow, p.c);
  }
}

// One thread per (bag, dimension): consecutive threads read consecutive
// floats of a row. An out-of-range id makes the bag NaN.
__global__ void EmbeddingBagForwardKernel(
    EmbeddingBagMode mode, const float* rows, int64_t num_rows, int64_t dim,
    const int32_t* indices, int64_t nnz, const int32_t* offsets,
    int64_t num_bags, const float* weights, float* out, int64_t ld_out) {
  const int64_t n = num_bags * dim;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const int64_t bag = i / dim;
    const int64_t d = i % dim;
    const IndexRange positions = BagPositions(offsets, bag, nnz);
    float sum = 0.0f;
    for (int64_t p = positions.begin; p < positions.end; ++p) {
      const int32_t id = indices[p];
      if (!BagIdValid(id, num_rows)) {
        sum = NAN;
        continue;
      }
      sum += BagWeight(weights, p) * rows[int64_t{id} * dim + d];
    }
    out[bag * ld_out + d] =
        sum * BagScale(mode, positions.end - positions.begin);
  }
}

// Scatter-add with float atomics, one per (position, dimension), into rows
// zeroed beforehand. Why atomics rather than sorted segments: the batch's
// ids are already unique rows (the parameter client deduplicates keys), so
// collisions are only the repeats of a row within the batch; atomics need no
// sort, no scratch and one pass over the ids, where a device sort (CUB) would
// cost more than the scatter at these sizes and could not run under the
// host emulation. The price: a row used more than once sums in a varying
// order (last-bit differences between runs). Out-of-range ids are skipped.
__global__ void EmbeddingBagBackwardKernel(
    EmbeddingBagMode mode, const int32_t* indices, int64_t nnz,
    const int32_t* offsets, int64_t num_bags, const float* weights,
    const float* dout, int64_t ld_dout, int64_t num_rows, int64_t dim,
    float* drows) {
  const int64_t n = num_bags * dim;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const int64_t bag = i / dim;
    const int64_t d = i % dim;
    const IndexRange positions = BagPositions(offsets, bag, nnz);
    const float scale = BagScale(mode, positions.end - positions.begin);
    const float grad = dout[bag * ld_dout + d];
    for (int64_t p = positions.begin; p < positions.end; ++p) {
      const int32_t id = indices[p];
      if (!BagIdValid(id, num_rows)) continue;
      const float g = scale * BagWeight(weights, p);
      atomicAdd(&drows[int64_t{id} * dim + d], g * grad);
    }
  }
}

// Per-element losses into `element_loss` (MeanKernel averages them) and the
// gradient where requested. The gradient may alias the input: each element
// is read before it is written.
__global__ void SigmoidBceKernel(const float* logits, const float* labels,
                                 int64_t n, float scale, float* element_loss,
                                 float* grad) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const float x = logits[i];
    element_loss[i] = SigmoidBceLoss(x, labels[i]);
    if (grad != nullptr) grad[i] = SigmoidBceGrad(x, labels[i], scale);
  }
}

__global__ void SquaredErrorKernel(const float* predictions,
                                   const float* targets, int64_t n, float scale,
                                   float* element_loss, float* grad) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const float p = predictions[i];
    element_loss[i] = SquaredError(p, targets[i]);
    if (grad != nullptr) grad[i] = SquaredErrorGrad(p, targets[i], scale);
  }
}

// One thread per element of the [count, fields, fields] gram batch; those
// below the diagonal write their pair.
__global__ void GatherLowerTriangleKernel(const float* gram, int64_t count,
                                          int64_t fields, float* out,
                                          int64_t ld_out) {
  const int64_t n = count * fields * fields;
  for (int64_t e = GlobalThreadIndex(); e < n; e += GridStride()) {
    const int64_t j = e % fields;
    const int64_t i = (e / fields) % fields;
    if (i > j) {
      out[(e / (fields * fields)) * ld_out + LowerTrianglePair(i, j)] = gram[e];
    }
  }
}

__global__ void ScatterLowerTriangleKernel(const float* dout, int64_t ld_dout,
                                           int64_t count, int64_t fields,
                                           float* dgram) {
  const int64_t n = count * fields * fields;
  for (int64_t e = GlobalThreadIndex(); e < n; e += GridStride()) {
    const int64_t j = e % fields;
    const int64_t i = (e / fields) % fields;
    const float* row = dout + (e / (fields * fields)) * ld_dout;
    dgram[e] = i > j   ? row[LowerTrianglePair(i, j)]
               : i < j ? row[LowerTrianglePair(j, i)]
                       : 0.0f;
  }
}

// One block per example; blockDim.x is a power of two <= 256. Each thread
// takes dimensions d, d + blockDim.x, ... (sums over fields in field order,
// like the CPU), then the block adds the per-dimension terms in a tree.
__global__ void FmInteractionKernel(const float* v, int64_t fields, int64_t dim,
                                    float* out) {
  __shared__ float reduce[256];
  const int tid = threadIdx.x;
  const float* row = v + static_cast<int64_t>(blockIdx.x) * fields * dim;
  float partial = 0.0f;
  for (int64_t d = tid; d < dim; d += blockDim.x) {
    float sum = 0.0f;
    float sum_sq = 0.0f;
    for (int64_t f = 0; f < fields; ++f) {
      const float x = row[f * dim + d];
      sum += x;
      sum_sq += x * x;
    }
    partial += FmTerm(sum, sum_sq);
  }
  reduce[tid] = partial;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) reduce[tid] += reduce[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = reduce[0];
}

// One thread per (example, dimension).
__global__ void FmInteractionBackwardKernel(const float* v, int64_t batch,
                                            int64_t fields, int64_t dim,
                                            const float* dout, float* dv) {
  const int64_t n = batch * dim;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const int64_t b = i / dim;
    const int64_t d = i % dim;
    const float* row = v + b * fields * dim;
    float sum = 0.0f;
    for (int64_t f = 0; f < fields; ++f) sum += row[f * dim + d];
    for (int64_t f = 0; f < fields; ++f) {
      dv[b * fields * dim + f * dim + d] =
          FmGrad(dout[b], sum, row[f * dim + d]);
    }
  }
}

// Block (32 lanes, 8 rows): each row's lanes take every 32nd dimension, then
// add their partial sums in a tree.
__global__ void RowwiseDotKernel(const float* a, const float* b, int64_t rows,
                                 int64_t dim, float* out) {
  __shared__ float reduce[kRowDotRowsPerBlock][kRowDotLanes];
  const int lane = threadIdx.x;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowDotRowsPerBlock + threadIdx.y;
  float partial = 0.0f;
  if (row < rows) {
    for (int64_t d = lane; d < dim; d += kRowDotLanes) {
      partial += a[row * dim + d] * b[row * dim + d];
    }
  }
  reduce[threadIdx.y][lane] = partial;
  __syncthreads();
  for (int stride = kRowDotLanes / 2; stride > 0; stride /= 2) {
    if (lane < stride) {
      reduce[threadIdx.y][lane] += reduce[threadIdx.y][lane + stride];
    }
    __syncthreads();
  }
  if (lane == 0 && row < rows) out[row] = reduce[threadIdx.y][0];
}

__global__ void RowwiseDotBackwardKernel(const float* a, const float* b,
                                         int64_t rows, int64_t dim,
                                         const float* dout, float* da,
                                         float* db) {
  const int64_t n = rows * dim;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    const float av = a[i];
    const float bv = b[i];
    const float g = dout[i / dim];
    da[i] = g * bv;
    db[i] = g * av;
  }
}

// ---------------------------------------------------------------------------
// Launch helpers.

inline void LaunchCopyMatrix(cudaStream_t stream, const float* src,
                             int64_t ld_src, int64_t rows, int64_t cols,
                             float* dst, int64_t ld_dst) {
  PS_LAUNCH(CopyMatrixKernel, ElementwiseGrid(rows * cols),
            dim3(kElementwiseThreads), stream, src, ld_src, rows, cols, dst,
            ld_dst);
}

inline void LaunchIm2Col(cudaStream_t stream, const ConvGeometry& g,
                         const float* images, float* patches) {
  PS_LAUNCH(Im2ColKernel,
            ElementwiseGrid(g.batch * g.out_pixels() * g.patch_size()),
            dim3(kElementwiseThreads), stream, g, images, patches);
}

inline void LaunchCol2Im(cudaStream_t stream, const ConvGeometry& g,
                         const float* patches, float* images) {
  PS_LAUNCH(Col2ImKernel, ElementwiseGrid(g.batch * g.image_size()),
            dim3(kElementwiseThreads), stream, g, patches, images);
}

inline void LaunchMaxPoolForward(cudaStream_t stream, const PoolGeometry& g,
                                 const float* x, float* y, int32_t* argmax) {
  PS_LAUNCH(MaxPoolForwardKernel, ElementwiseGrid(g.out_size()),
            dim3(kElementwiseThreads), stream, g, x, y, argmax);
}

inline void LaunchMaxPoolBackward(cudaStream_t stream, const PoolGeometry& g,
                                  const int32_t* argmax, const float* dy,
                                  float* dx) {
  PS_LAUNCH(MaxPoolBackwardKernel, ElementwiseGrid(g.batch * g.image_size()),
            dim3(kElementwiseThreads), stream, g, argmax, dy, dx);
}

inline void LaunchAvgPoolForward(cudaStream_t stream, const PoolGeometry& g,
                                 const float* x, float* y) {
  PS_LAUNCH(AvgPoolForwardKernel, ElementwiseGrid(g.out_size()),
            dim3(kElementwiseThreads), stream, g, x, y);
}

inline void LaunchAvgPoolBackward(cudaStream_t stream, const PoolGeometry& g,
                                  const float* dy, float* dx) {
  PS_LAUNCH(AvgPoolBackwardKernel, ElementwiseGrid(g.batch * g.image_size()),
            dim3(kElementwiseThreads), stream, g, dy, dx);
}

inline void LaunchEmbeddingBagForward(cudaStream_t stream,
                                      EmbeddingBagMode mode, const float* rows,
                                      int64_t num_rows, int64_t dim,
                                      const int32_t* indices, int64_t nnz,
                                      const int32_t* offsets, int64_t num_bags,
                                      const float* weights, float* out,
                                      int64_t ld_out) {
  PS_LAUNCH(EmbeddingBagForwardKernel, ElementwiseGrid(num_bags * dim),
            dim3(kElementwiseThreads), stream, mode, rows, num_rows, dim,
            indices, nnz, offsets, num_bags, weights, out, ld_out);
}

// Zeroes drows, then scatters (two launches on the stream).
inline void LaunchEmbeddingBagBackward(cudaStream_t stream,
                                       EmbeddingBagMode mode,
                                       const int32_t* indices, int64_t nnz,
                                       const int32_t* offsets, int64_t num_bags,
                                       const float* weights, const float* dout,
                                       int64_t ld_dout, int64_t num_rows,
                                       int64_t dim, float* drows) {
  LaunchFill(stream, 0.0f, num_rows * dim, drows);
  if (num_bags == 0) return;
  PS_LAUNCH(EmbeddingBagBackwardKernel, ElementwiseGrid(num_bags * dim),
            dim3(kElementwiseThreads), stream, mode, indices, nnz, offsets,
            num_bags, weights, dout, ld_dout, num_rows, dim, drows);
}

// element_loss: scratch of n floats.
inline void LaunchSigmoidBinaryCrossEntropy(cudaStream_t stream,
                                            const float* logits,
                                            const float* labels, int64_t n,
                                            float* element_loss, float* loss,
                                            float* dlogits) {
  PS_LAUNCH(SigmoidBceKernel, ElementwiseGrid(n), dim3(kElementwiseThreads),
            stream, logits, labels, n, 1.0f / static_cast<float>(n),
            element_loss, dlogits);
  PS_LAUNCH(MeanKernel, dim3(1), dim3(kMeanThreads), stream,
            static_cast<const float*>(element_loss), n, loss);
}

inline void LaunchMeanSquaredError(cudaStream_t stream,
                                   const float* predictions,
                                   const float* targets, int64_t n,
                                   float* element_loss, float* loss,
                                   float* dpredictions) {
  PS_LAUNCH(SquaredErrorKernel, ElementwiseGrid(n), dim3(kElementwiseThreads),
            stream, predictions, targets, n, 1.0f / static_cast<float>(n),
            element_loss, dpredictions);
  PS_LAUNCH(MeanKernel, dim3(1), dim3(kMeanThreads), stream,
            static_cast<const float*>(element_loss), n, loss);
}

inline void LaunchGatherLowerTriangle(cudaStream_t stream, const float* gram,
                                      int64_t count, int64_t fields, float* out,
                                      int64_t ld_out) {
  PS_LAUNCH(GatherLowerTriangleKernel, ElementwiseGrid(count * fields * fields),
            dim3(kElementwiseThreads), stream, gram, count, fields, out,
            ld_out);
}

inline void LaunchScatterLowerTriangle(cudaStream_t stream, const float* dout,
                                       int64_t ld_dout, int64_t count,
                                       int64_t fields, float* dgram) {
  PS_LAUNCH(ScatterLowerTriangleKernel,
            ElementwiseGrid(count * fields * fields), dim3(kElementwiseThreads),
            stream, dout, ld_dout, count, fields, dgram);
}

inline void LaunchFmInteraction(cudaStream_t stream, const float* v,
                                int64_t batch, int64_t fields, int64_t dim,
                                float* out) {
  PS_LAUNCH(FmInteractionKernel, dim3(static_cast<unsigned>(batch)),
            dim3(RowReductionThreads(dim)), stream, v, fields, dim, out);
}

inline void LaunchFmInteractionBackward(cudaStream_t stream, const float* v,
                                        int64_t batch, int64_t fields,
                                        int64_t dim, const float* dout,
                                        float* dv) {
  PS_LAUNCH(FmInteractionBackwardKernel, ElementwiseGrid(batch * dim),
            dim3(kElementwiseThreads), stream, v, batch, fields, dim, dout, dv);
}

inline void LaunchRowwiseDot(cudaStream_t stream, const float* a,
                             const float* b, int64_t rows, int64_t dim,
                             float* out) {
  const int64_t blocks = (rows + kRowDotRowsPerBlock - 1) / kRowDotRowsPerBlock;
  PS_LAUNCH(RowwiseDotKernel, dim3(static_cast<unsigned>(blocks)),
            dim3(kRowDotLanes, kRowDotRowsPerBlock), stream, a, b, rows, dim,
            out);
}

inline void LaunchRowwiseDotBackward(cudaStream_t stream, const float* a,
                                     const float* b, int64_t rows, int64_t dim,
                                     const float* dout, float* da, float* db) {
  PS_LAUNCH(RowwiseDotBackwardKernel, ElementwiseGrid(rows * dim),
            dim3(kElementwiseThreads), stream, a, b, rows, dim, dout, da, db);
}

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_LAYER_KERNELS_CUH_
