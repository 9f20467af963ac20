#ifndef PS_KERNELS_CUDA_KERNELS_CUH_
#define PS_KERNELS_CUDA_KERNELS_CUH_

// The CUDA backend's own kernels and their launch helpers (grid and block
// choices). Compiled twice from this one file:
//   - by nvcc into cuda_backend.cu, where PS_LAUNCH is a <<<>>> launch;
//   - by g++ as host code in tests (cuda_emulation.h), where PS_LAUNCH runs
//     every block's threads as fibers with __syncthreads honoured, so the
//     indexing, bounds and shared-memory reductions below run in CI without a
//     GPU.
// The includer defines PS_LAUNCH(kernel, grid, block, stream, args...) and
// provides dim3, cudaStream_t, threadIdx/blockIdx/blockDim/gridDim,
// __syncthreads and __shared__.
//
// Division of work (style point 15): Backend (backend.cc) checks shapes and
// returns INVALID_ARGUMENT, the Launch* helpers below choose grid and block
// and launch on the given stream, the backend turns the launch error into a
// Status.
//
// Rules for kernels here: every thread of a block reaches every
// __syncthreads() (no early return before one), block sizes of reductions are
// powers of two, indices are int64.

#include <algorithm>
#include <cstdint>

#include "kernels/activation_math.h"
#include "kernels/cast_math.h"
#include "kernels/elementwise_math.h"
#include "kernels/random_math.h"
#include "kernels/reduction_math.h"
#include "kernels/softmax_math.h"
#include "kernels/types.h"

#ifndef PS_LAUNCH
#error "define PS_LAUNCH before including kernels/cuda_kernels.cuh"
#endif

namespace ps::kernels::cuda {

inline constexpr int kElementwiseThreads = 256;
// Grid-stride loops cap the grid; beyond this, each thread loops.
inline constexpr int64_t kMaxElementwiseBlocks = 4096;
inline constexpr int kBiasGradColumns = 32;
inline constexpr int kBiasGradRows = 8;
inline constexpr int kMeanThreads = 256;

__device__ inline int64_t GlobalThreadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// ---------------------------------------------------------------------------
// Kernels.

template <Activation kAct>
__global__ void ActivationForwardKernel(const float* x, int64_t n, float* y) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    y[i] = ActivationForward<kAct>(x[i]);
  }
}

template <Activation kAct>
__global__ void ActivationBackwardKernel(const float* y, const float* dy,
                                         int64_t n, float* dx) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    dx[i] = ActivationBackward<kAct>(y[i], dy[i]);
  }
}

__global__ void BiasAddKernel(const float* bias, int64_t rows, int64_t cols,
                              float* y) {
  const int64_t n = rows * cols;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    y[i] = BiasAddElement(y[i], bias[i % cols]);
  }
}

// Block (32, 8) owns 32 columns: each of its 8 row-lanes sums every 8th row,
// then one lane adds the 8 partial sums in a fixed order (deterministic).
__global__ void BiasGradKernel(const float* dy, int64_t rows, int64_t cols,
                               float* dbias) {
  __shared__ float partial[kBiasGradRows][kBiasGradColumns + 1];
  const int64_t col =
      static_cast<int64_t>(blockIdx.x) * kBiasGradColumns + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kBiasGradRows) {
      sum += dy[r * cols + col];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int i = 0; i < kBiasGradRows; ++i) total += partial[i][threadIdx.x];
    dbias[col] = total;
  }
}

// One block per row; blockDim.x is a power of two <= 256.
__global__ void SoftmaxCrossEntropyRowKernel(const float* logits,
                                             const int32_t* labels,
                                             int64_t cols, float grad_scale,
                                             float* row_loss, float* dlogits) {
  __shared__ float reduce[256];
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x;
  const float* x = logits + row * cols;

  float local_max = -INFINITY;
  for (int64_t c = tid; c < cols; c += blockDim.x) {
    local_max = MaxIgnoringNan(local_max, x[c]);
  }
  reduce[tid] = local_max;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) {
      reduce[tid] = MaxIgnoringNan(reduce[tid], reduce[tid + stride]);
    }
    __syncthreads();
  }
  const float row_max = reduce[0];
  __syncthreads();  // everyone has read reduce[0] before it is reused

  float local_sum = 0.0f;
  for (int64_t c = tid; c < cols; c += blockDim.x) {
    local_sum += SoftmaxShiftedExp(x[c], row_max);
  }
  reduce[tid] = local_sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) reduce[tid] += reduce[tid + stride];
    __syncthreads();
  }
  const float sum_exp = reduce[0];
  const int32_t label = labels[row];
  const bool label_ok = label >= 0 && label < cols;
  if (tid == 0) {
    row_loss[row] =
        label_ok ? SoftmaxXentRowLoss(x[label], row_max, sum_exp) : NAN;
  }
  // dlogits may alias logits: the label's logit is read above first.
  __syncthreads();
  if (dlogits != nullptr) {
    const float inv_sum = 1.0f / sum_exp;
    float* grad = dlogits + row * cols;
    for (int64_t c = tid; c < cols; c += blockDim.x) {
      grad[c] = SoftmaxXentGrad(x[c], row_max, inv_sum, c == label, grad_scale);
    }
  }
}

// One block of kMeanThreads: out[0] = mean(values[0..n)), in double, in a
// fixed order (deterministic).
__global__ void MeanKernel(const float* values, int64_t n, float* out) {
  __shared__ double reduce[kMeanThreads];
  const int tid = threadIdx.x;
  double sum = 0.0;
  for (int64_t i = tid; i < n; i += blockDim.x) sum += values[i];
  reduce[tid] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) reduce[tid] += reduce[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[0] = static_cast<float>(reduce[0] / static_cast<double>(n));
}

// One block per row; blockDim.x is a power of two <= 256.
__global__ void ArgmaxRowKernel(const float* x, int64_t cols, int32_t* out) {
  __shared__ float best_value[256];
  __shared__ int32_t best_index[256];
  const int tid = threadIdx.x;
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float value = -INFINITY;
  int32_t index = kArgmaxNone;
  for (int64_t c = tid; c < cols; c += blockDim.x) {
    if (ArgmaxBetter(row[c], static_cast<int32_t>(c), value, index)) {
      value = row[c];
      index = static_cast<int32_t>(c);
    }
  }
  best_value[tid] = value;
  best_index[tid] = index;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride &&
        ArgmaxBetter(best_value[tid + stride], best_index[tid + stride],
                     best_value[tid], best_index[tid])) {
      best_value[tid] = best_value[tid + stride];
      best_index[tid] = best_index[tid + stride];
    }
    __syncthreads();
  }
  if (tid == 0) {
    out[blockIdx.x] = best_index[0] == kArgmaxNone ? 0 : best_index[0];
  }
}

__global__ void AxpyKernel(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    y[i] = AxpyElement(alpha, x[i], y[i]);
  }
}

__global__ void ScaleKernel(float alpha, int64_t n, float* x) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    x[i] *= alpha;
  }
}

__global__ void FillKernel(float value, int64_t n, float* x) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    x[i] = value;
  }
}

__global__ void InitializeKernel(Initializer kind, uint64_t seed,
                                 int64_t fan_in, int64_t fan_out, int64_t n,
                                 float* x) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    x[i] =
        InitializerValue(kind, seed, static_cast<uint64_t>(i), fan_in, fan_out);
  }
}

template <DType kTo>
__global__ void CastFromFloatKernel(const float* x, int64_t n, uint16_t* y) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    y[i] = kTo == DType::kF16 ? FloatToHalfBits(x[i]) : FloatToBf16Bits(x[i]);
  }
}

template <DType kFrom>
__global__ void CastToFloatKernel(const uint16_t* x, int64_t n, float* y) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GridStride()) {
    y[i] = kFrom == DType::kF16 ? HalfBitsToFloat(x[i]) : Bf16BitsToFloat(x[i]);
  }
}

// ---------------------------------------------------------------------------
// Launch helpers: grid and block choices, then the launch. Callers check the
// launch error (cudaGetLastError, or the emulation's) afterwards.

inline dim3 ElementwiseGrid(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return dim3(static_cast<unsigned>(
      std::clamp<int64_t>(blocks, 1, kMaxElementwiseBlocks)));
}

// Threads for one-block-per-row reductions: a power of two covering `cols`,
// at least a warp, at most 256.
inline int RowReductionThreads(int64_t cols) {
  int threads = 32;
  while (threads < 256 && threads < cols) threads *= 2;
  return threads;
}

inline void LaunchActivationForward(cudaStream_t stream, Activation act,
                                    const float* x, int64_t n, float* y) {
  switch (act) {
    case Activation::kRelu:
      PS_LAUNCH(ActivationForwardKernel<Activation::kRelu>, ElementwiseGrid(n),
                dim3(kElementwiseThreads), stream, x, n, y);
      break;
    case Activation::kTanh:
      PS_LAUNCH(ActivationForwardKernel<Activation::kTanh>, ElementwiseGrid(n),
                dim3(kElementwiseThreads), stream, x, n, y);
      break;
    case Activation::kSigmoid:
      PS_LAUNCH(ActivationForwardKernel<Activation::kSigmoid>,
                ElementwiseGrid(n), dim3(kElementwiseThreads), stream, x, n, y);
      break;
  }
}

inline void LaunchActivationBackward(cudaStream_t stream, Activation act,
                                     const float* y, const float* dy, int64_t n,
                                     float* dx) {
  switch (act) {
    case Activation::kRelu:
      PS_LAUNCH(ActivationBackwardKernel<Activation::kRelu>, ElementwiseGrid(n),
                dim3(kElementwiseThreads), stream, y, dy, n, dx);
      break;
    case Activation::kTanh:
      PS_LAUNCH(ActivationBackwardKernel<Activation::kTanh>, ElementwiseGrid(n),
                dim3(kElementwiseThreads), stream, y, dy, n, dx);
      break;
    case Activation::kSigmoid:
      PS_LAUNCH(ActivationBackwardKernel<Activation::kSigmoid>,
                ElementwiseGrid(n), dim3(kElementwiseThreads), stream, y, dy, n,
                dx);
      break;
  }
}

inline void LaunchBiasAdd(cudaStream_t stream, const float* bias, int64_t rows,
                          int64_t cols, float* y) {
  PS_LAUNCH(BiasAddKernel, ElementwiseGrid(rows * cols),
            dim3(kElementwiseThreads), stream, bias, rows, cols, y);
}

inline void LaunchBiasGrad(cudaStream_t stream, const float* dy, int64_t rows,
                           int64_t cols, float* dbias) {
  const int64_t blocks = (cols + kBiasGradColumns - 1) / kBiasGradColumns;
  PS_LAUNCH(BiasGradKernel, dim3(static_cast<unsigned>(blocks)),
            dim3(kBiasGradColumns, kBiasGradRows), stream, dy, rows, cols,
            dbias);
}

// row_loss: scratch of `rows` floats.
inline void LaunchSoftmaxCrossEntropy(cudaStream_t stream, const float* logits,
                                      const int32_t* labels, int64_t rows,
                                      int64_t cols, float* row_loss,
                                      float* loss, float* dlogits) {
  const float grad_scale = 1.0f / static_cast<float>(rows);
  PS_LAUNCH(SoftmaxCrossEntropyRowKernel, dim3(static_cast<unsigned>(rows)),
            dim3(RowReductionThreads(cols)), stream, logits, labels, cols,
            grad_scale, row_loss, dlogits);
  PS_LAUNCH(MeanKernel, dim3(1), dim3(kMeanThreads), stream,
            static_cast<const float*>(row_loss), rows, loss);
}

inline void LaunchArgmax(cudaStream_t stream, const float* x, int64_t rows,
                         int64_t cols, int32_t* out) {
  PS_LAUNCH(ArgmaxRowKernel, dim3(static_cast<unsigned>(rows)),
            dim3(RowReductionThreads(cols)), stream, x, cols, out);
}

inline void LaunchAxpy(cudaStream_t stream, float alpha, const float* x,
                       int64_t n, float* y) {
  PS_LAUNCH(AxpyKernel, ElementwiseGrid(n), dim3(kElementwiseThreads), stream,
            alpha, x, n, y);
}

inline void LaunchScale(cudaStream_t stream, float alpha, int64_t n, float* x) {
  PS_LAUNCH(ScaleKernel, ElementwiseGrid(n), dim3(kElementwiseThreads), stream,
            alpha, n, x);
}

inline void LaunchFill(cudaStream_t stream, float value, int64_t n, float* x) {
  PS_LAUNCH(FillKernel, ElementwiseGrid(n), dim3(kElementwiseThreads), stream,
            value, n, x);
}

inline void LaunchInitialize(cudaStream_t stream, Initializer kind,
                             uint64_t seed, int64_t fan_in, int64_t fan_out,
                             int64_t n, float* x) {
  PS_LAUNCH(InitializeKernel, ElementwiseGrid(n), dim3(kElementwiseThreads),
            stream, kind, seed, fan_in, fan_out, n, x);
}

inline void LaunchCastFromFloat(cudaStream_t stream, const float* x, int64_t n,
                                DType to, uint16_t* y) {
  if (to == DType::kF16) {
    PS_LAUNCH(CastFromFloatKernel<DType::kF16>, ElementwiseGrid(n),
              dim3(kElementwiseThreads), stream, x, n, y);
  } else {
    PS_LAUNCH(CastFromFloatKernel<DType::kBF16>, ElementwiseGrid(n),
              dim3(kElementwiseThreads), stream, x, n, y);
  }
}

inline void LaunchCastToFloat(cudaStream_t stream, DType from,
                              const uint16_t* x, int64_t n, float* y) {
  if (from == DType::kF16) {
    PS_LAUNCH(CastToFloatKernel<DType::kF16>, ElementwiseGrid(n),
              dim3(kElementwiseThreads), stream, x, n, y);
  } else {
    PS_LAUNCH(CastToFloatKernel<DType::kBF16>, ElementwiseGrid(n),
              dim3(kElementwiseThreads), stream, x, n, y);
  }
}

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_KERNELS_CUH_
