#ifndef PS_KERNELS_BACKEND_H_
#define PS_KERNELS_BACKEND_H_

// The backend-neutral op API. Model code (worker/model/) sees only
// `Backend`, `DeviceBuffer` and the views below; kernels/cpu_backend.h and
// kernels/cuda_backend.h create the two implementations.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/caching_allocator.h"
#include "kernels/conv_math.h"
#include "kernels/types.h"

namespace ps::kernels {

// A contiguous run of `size` elements in device memory (host memory on the CPU
// backend). Not owning.
template <typename T>
struct DeviceSpan {
  T* data = nullptr;
  int64_t size = 0;

  DeviceSpan() = default;
  DeviceSpan(T* d, int64_t n) : data(d), size(n) {}
  // Implicit where U* converts to T* (adds const).
  template <typename U,
            typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  DeviceSpan(const DeviceSpan<U>& other)  // NOLINT(google-explicit-constructor)
      : data(other.data), size(other.size) {}
};

// A row-major, densely packed [rows, cols] matrix in device memory. Not owning.
template <typename T>
struct DeviceMatrix {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  // Elements from one row's start to the next; 0 means `cols` (a dense
  // matrix). Larger for a block of columns of a wider matrix; only the
  // arguments documented as "strided" accept that (Gemm's `a` and `b`,
  // CopyMatrix, the embedding bags' outputs and gradients, the lower-triangle
  // ops' rows), the other ops reject it.
  int64_t ld = 0;

  DeviceMatrix() = default;
  DeviceMatrix(T* d, int64_t r, int64_t c, int64_t l = 0)
      : data(d), rows(r), cols(c), ld(l) {}
  // Implicit where U* converts to T* (adds const).
  template <typename U,
            typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  DeviceMatrix(
      const DeviceMatrix<U>& other)  // NOLINT(google-explicit-constructor)
      : data(other.data), rows(other.rows), cols(other.cols), ld(other.ld) {}

  int64_t stride() const { return ld > 0 ? ld : cols; }
  int64_t size() const { return rows * cols; }
  DeviceSpan<T> flat() const { return DeviceSpan<T>(data, rows * cols); }
};

// `count` dense row-major [rows, cols] matrices stored back to back: matrix i
// starts at data + i * rows * cols. Not owning.
template <typename T>
struct DeviceMatrixBatch {
  T* data = nullptr;
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;

  DeviceMatrixBatch() = default;
  DeviceMatrixBatch(T* d, int64_t n, int64_t r, int64_t c)
      : data(d), count(n), rows(r), cols(c) {}
  // Implicit where U* converts to T* (adds const).
  template <typename U,
            typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  DeviceMatrixBatch(
      const DeviceMatrixBatch<U>& other)  // NOLINT(google-explicit-constructor)
      : data(other.data),
        count(other.count),
        rows(other.rows),
        cols(other.cols) {}
};

// Owns one block of device memory from a backend's caching allocator; freeing
// returns it to the cache. Move-only. Keeps the allocator alive, so it may
// outlive the backend object, but it must not be used by another backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<CachingAllocator> allocator,
               CachingAllocator::Block block, int64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return block_.ptr; }
  int64_t bytes() const { return bytes_; }

  // Typed views. A view that does not fit in the buffer comes back with a null
  // data pointer, which every op rejects with INVALID_ARGUMENT.
  template <typename T>
  DeviceSpan<T> Span(int64_t size) const {
    if (size < 0 || size > bytes_ / static_cast<int64_t>(sizeof(T))) {
      return DeviceSpan<T>(nullptr, size);
    }
    return DeviceSpan<T>(static_cast<T*>(block_.ptr), size);
  }
  template <typename T>
  DeviceSpan<T> Span() const {
    return Span<T>(bytes_ / static_cast<int64_t>(sizeof(T)));
  }
  template <typename T>
  DeviceMatrix<T> Matrix(int64_t rows, int64_t cols) const {
    const bool fits =
        rows >= 0 && cols >= 0 &&
        (cols == 0 || rows <= bytes_ / static_cast<int64_t>(sizeof(T)) / cols);
    return DeviceMatrix<T>(fits ? static_cast<T*>(block_.ptr) : nullptr, rows,
                           cols);
  }
  template <typename T>
  DeviceMatrixBatch<T> Batch(int64_t count, int64_t rows, int64_t cols) const {
    const DeviceMatrix<T> all =
        rows >= 0 && cols >= 0 && count >= 0 &&
                (cols == 0 || rows <= (int64_t{1} << 62) / cols)
            ? Matrix<T>(count, rows * cols)
            : DeviceMatrix<T>();
    return DeviceMatrixBatch<T>(all.data, count, rows, cols);
  }

 private:
  void Release();

  std::shared_ptr<CachingAllocator> allocator_;
  CachingAllocator::Block block_;
  int64_t bytes_ = 0;
};

// One compute device and its ops. Every op validates its arguments the same
// way on every backend (shapes, null pointers, sizes that overflow the int32
// that BLAS takes) and returns INVALID_ARGUMENT before touching memory; device
// failures come back as INTERNAL (RESOURCE_EXHAUSTED when out of memory) with
// the driver's or library's message. Implementations override the Do* hooks,
// which see validated, non-empty arguments only.
//
// Ops are enqueued in order on the backend's single stream; they may run
// asynchronously with the host (CUDA). The Copy* functions that touch host
// memory are synchronous: when they return, the host buffer may be reused or
// read. Pointers in spans are device pointers unless named `host`.
//
// Not thread-safe: one thread drives one backend (a worker owns one device).
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string Name() const = 0;

  // Whether device memory is ordinary host memory that the host may read and
  // write directly (the CPU backend): callers can then skip staging copies.
  virtual bool HostAddressable() const { return false; }

  // Device memory through the backend's caching allocator.
  absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes);
  template <typename T>
  absl::StatusOr<DeviceBuffer> AllocateArray(int64_t count) {
    if (count <= 0 || count > (int64_t{1} << 50) / int64_t{sizeof(T)}) {
      return absl::InvalidArgumentError("AllocateArray: bad element count");
    }
    return Allocate(count * static_cast<int64_t>(sizeof(T)));
  }

  // Copies. Host<->device copies return when the copy is complete.
  absl::Status CopyToDevice(const void* host, void* device, int64_t bytes);
  absl::Status CopyToHost(const void* device, void* host, int64_t bytes);
  absl::Status CopyOnDevice(const void* src, void* dst, int64_t bytes);
  // Waits for all enqueued work; reports asynchronous device errors.
  absl::Status Synchronize();

  // c = alpha * op(a) * op(b) + beta * c, all row-major; op(a) is [m, k],
  // op(b) is [k, n], c is [m, n]. With beta == 0, c's old contents are
  // ignored (NaN included). m, n, k must fit in int32. `a` and `b` may be
  // column blocks of wider matrices (ld > cols); `c` must be dense.
  absl::Status Gemm(Transpose trans_a, Transpose trans_b, float alpha,
                    DeviceMatrix<const float> a, DeviceMatrix<const float> b,
                    float beta, DeviceMatrix<float> c);

  // y[r, c] += bias[c].
  absl::Status BiasAdd(DeviceSpan<const float> bias, DeviceMatrix<float> y);
  // dbias[c] = sum_r dy[r, c] (overwrites dbias).
  absl::Status BiasGrad(DeviceMatrix<const float> dy, DeviceSpan<float> dbias);

  // y = f(x); x and y may be the same memory.
  absl::Status ActivationForward(Activation act, DeviceSpan<const float> x,
                                 DeviceSpan<float> y);
  // dx = f'(x) * dy given y = f(x); dx may alias dy.
  absl::Status ActivationBackward(Activation act, DeviceSpan<const float> y,
                                  DeviceSpan<const float> dy,
                                  DeviceSpan<float> dx);

  // Fused, numerically stable softmax cross-entropy over rows of `logits`
  // [batch, classes] with `labels` [batch] in [0, classes):
  //   loss[0] = mean_r -log softmax(logits[r])[labels[r]]
  //   dlogits = (softmax(logits) - onehot(labels)) / batch   (if given)
  // dlogits may alias logits. The CPU backend rejects out-of-range labels;
  // the CUDA backend cannot see them from the host and yields a NaN loss.
  absl::Status SoftmaxCrossEntropy(DeviceMatrix<const float> logits,
                                   DeviceSpan<const int32_t> labels,
                                   DeviceSpan<float> loss,
                                   std::optional<DeviceMatrix<float>> dlogits);

  // out[r] = argmax_c x[r, c] (the first index on ties; NaNs are skipped).
  absl::Status Argmax(DeviceMatrix<const float> x, DeviceSpan<int32_t> out);

  // y += alpha * x.
  absl::Status Axpy(float alpha, DeviceSpan<const float> x,
                    DeviceSpan<float> y);
  // x *= alpha.
  absl::Status Scale(float alpha, DeviceSpan<float> x);
  // x[i] = value.
  absl::Status Fill(float value, DeviceSpan<float> x);
  // x[i] = InitializerValue(kind, seed, i, fan_in, fan_out) (random_math.h):
  // the same values on every backend for the same seed.
  absl::Status Initialize(Initializer kind, uint64_t seed, int64_t fan_in,
                          int64_t fan_out, DeviceSpan<float> x);

  // fp32 -> fp16/bf16 bits (`to` is kF16 or kBF16) and back.
  absl::Status CastFromFloat(DeviceSpan<const float> x, DType to,
                             DeviceSpan<uint16_t> y);
  absl::Status CastToFloat(DType from, DeviceSpan<const uint16_t> x,
                           DeviceSpan<float> y);

  // ---- Ops of the layers beyond the MLP (issue "Layers"). Each layer's
  // forward and backward is a few of these (see kernels/README.md):
  //   Conv2D      Conv2DForward + BiasAdd | BiasGrad + Conv2DBackwardFilter
  //               + Conv2DBackwardData (the biases: BiasAdd/BiasGrad on the
  //               [batch * out_pixels, out_c] output)
  //   pooling     MaxPool2D* / AvgPool2D*
  //   EmbeddingBag  EmbeddingBagForward | EmbeddingBagBackward
  //   DLRM dot    BatchedGemm(Z, Z^T) + GatherLowerTriangle |
  //               ScatterLowerTriangle + BatchedGemm(S, Z)
  //   FM          FmInteraction | FmInteractionBackward
  //   Dot (MF)    RowwiseDot (+ Axpy for biases) | RowwiseDotBackward
  //   Concat      CopyMatrix into / out of column blocks
  //   heads       SigmoidBinaryCrossEntropy, MeanSquaredError
  // Images are NHWC (kernels/conv_math.h). Int32 index arrays live in device
  // memory: the CPU backend checks their values and rejects bad ones with
  // INVALID_ARGUMENT before writing; the CUDA backend cannot see them from
  // the host, so its kernels clamp what would read out of bounds and document
  // what comes out instead.

  // c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for each of the `count`
  // matrices, with Gemm's contract per matrix (shapes, beta == 0). All
  // dense; counts equal; per-matrix dimensions and count fit in int32.
  absl::Status BatchedGemm(Transpose trans_a, Transpose trans_b, float alpha,
                           DeviceMatrixBatch<const float> a,
                           DeviceMatrixBatch<const float> b, float beta,
                           DeviceMatrixBatch<float> c);

  // dst = src, both [rows, cols]; either may be strided (a column block of a
  // wider matrix): Concat's forward and backward. They must not overlap.
  absl::Status CopyMatrix(DeviceMatrix<const float> src,
                          DeviceMatrix<float> dst);

  // im2col: `images` (g.batch NHWC images) -> `patches` [g.batch *
  // g.out_pixels(), g.patch_size()] (zeros where a patch reads padding).
  absl::Status Im2Col(const ConvGeometry& g, DeviceSpan<const float> images,
                      DeviceMatrix<float> patches);
  // col2im, im2col's adjoint: images[i] = sum of the patch entries that read
  // input i (overwrites `images`). Every backend sums in the same order.
  absl::Status Col2Im(const ConvGeometry& g, DeviceMatrix<const float> patches,
                      DeviceSpan<float> images);

  // Convolutions through im2col/col2im and GEMM, in blocks of images: each
  // block's patch matrix lives in `workspace`, which holds
  // floor(workspace.size / ConvWorkspacePerImage(g)) images (at least one;
  // any workspace will do when that is 0, a 1x1 stride-1 unpadded filter).
  // Fewer images per block keep the patches in cache; more make larger
  // GEMMs. ConvWorkspaceSize(g) is this backend's choice.
  static int64_t ConvWorkspacePerImage(const ConvGeometry& g);
  virtual int64_t ConvWorkspaceSize(const ConvGeometry& g) const;
  //   y [batch * out_pixels, out_c] = patches(x) * filter [patch_size, out_c]
  absl::Status Conv2DForward(const ConvGeometry& g, DeviceSpan<const float> x,
                             DeviceMatrix<const float> filter,
                             DeviceMatrix<float> y,
                             DeviceSpan<float> workspace);
  //   dfilter = patches(x)^T * dy (overwrites dfilter)
  absl::Status Conv2DBackwardFilter(const ConvGeometry& g,
                                    DeviceSpan<const float> x,
                                    DeviceMatrix<const float> dy,
                                    DeviceMatrix<float> dfilter,
                                    DeviceSpan<float> workspace);
  //   dx = col2im(dy * filter^T) (overwrites dx)
  absl::Status Conv2DBackwardData(const ConvGeometry& g,
                                  DeviceMatrix<const float> dy,
                                  DeviceMatrix<const float> filter,
                                  DeviceSpan<float> dx,
                                  DeviceSpan<float> workspace);

  // Max pooling: y (g.out_size()) and, per output, the index inside its image
  // ((h * in_w + w) * channels + c) of the input it took, for the backward
  // pass. Ties keep the first input in (h, w) order; NaN propagates.
  absl::Status MaxPool2DForward(const PoolGeometry& g,
                                DeviceSpan<const float> x, DeviceSpan<float> y,
                                DeviceSpan<int32_t> argmax);
  // dx[i] = sum of dy over the windows whose argmax is i (overwrites dx);
  // argmax as MaxPool2DForward wrote it for the same geometry. Indices
  // outside the image are ignored (other wrong indices give an unspecified
  // gradient, never a write outside dx).
  absl::Status MaxPool2DBackward(const PoolGeometry& g,
                                 DeviceSpan<const int32_t> argmax,
                                 DeviceSpan<const float> dy,
                                 DeviceSpan<float> dx);
  // Average pooling over the inputs inside each window (padding not counted).
  absl::Status AvgPool2DForward(const PoolGeometry& g,
                                DeviceSpan<const float> x, DeviceSpan<float> y);
  absl::Status AvgPool2DBackward(const PoolGeometry& g,
                                 DeviceSpan<const float> dy,
                                 DeviceSpan<float> dx);

  // Embedding bags over `rows` [num_rows, dim] (the unique rows of a batch,
  // as the parameter client returns them): bag b of `out` [num_bags, dim]
  // (strided) is scale * sum_p weights[p] * rows[indices[p]] over p in
  // [offsets[b], offsets[b + 1]), scale 1 (kSum) or 1 / count (kMean);
  // weights absent means 1; empty bags are 0. offsets has num_bags + 1
  // entries from 0 up to indices.size, non-decreasing; indices are in
  // [0, num_rows). CUDA: an out-of-range id makes its bag NaN, offsets are
  // clamped to [0, indices.size].
  absl::Status EmbeddingBagForward(
      EmbeddingBagMode mode, DeviceMatrix<const float> rows,
      DeviceSpan<const int32_t> indices, DeviceSpan<const int32_t> offsets,
      std::optional<DeviceSpan<const float>> weights, DeviceMatrix<float> out);
  // drows [num_rows, dim] = the gradient of every row: the sum over each
  // position p of scale * weights[p] * dout[bag of p] (overwrites drows;
  // rows no bag uses are 0). dout is strided. CPU: in order (deterministic).
  // CUDA: float atomics, one per (position, dimension), so the summation
  // order of a row used more than once varies from run to run; out-of-range
  // ids are skipped.
  absl::Status EmbeddingBagBackward(
      EmbeddingBagMode mode, DeviceSpan<const int32_t> indices,
      DeviceSpan<const int32_t> offsets,
      std::optional<DeviceSpan<const float>> weights,
      DeviceMatrix<const float> dout, DeviceMatrix<float> drows);

  // Fused, numerically stable sigmoid binary cross-entropy over logits [n]
  // with labels [n] in [0, 1]:
  //   loss[0] = mean_i max(x, 0) - x y + log(1 + exp(-|x|))
  //   dlogits = (sigmoid(x) - y) / n   (if given; may alias logits)
  absl::Status SigmoidBinaryCrossEntropy(
      DeviceSpan<const float> logits, DeviceSpan<const float> labels,
      DeviceSpan<float> loss, std::optional<DeviceSpan<float>> dlogits);
  // loss[0] = mean_i (p - t)^2; dpredictions = 2 (p - t) / n (if given; may
  // alias predictions).
  absl::Status MeanSquaredError(DeviceSpan<const float> predictions,
                                DeviceSpan<const float> targets,
                                DeviceSpan<float> loss,
                                std::optional<DeviceSpan<float>> dpredictions);

  // DLRM's dot interaction around BatchedGemm: row b of `out` [count,
  // fields * (fields - 1) / 2] (strided) is the strictly lower triangle of
  // gram[b] [fields, fields], pair (i > j) at column i * (i - 1) / 2 + j.
  absl::Status GatherLowerTriangle(DeviceMatrixBatch<const float> gram,
                                   DeviceMatrix<float> out);
  // Its adjoint for a symmetric product: dgram[b][i][j] = dgram[b][j][i] =
  // dout[b, pair(i, j)], zero diagonal (overwrites dgram); then
  // dZ[b] = dgram[b] * Z[b] for gram = Z Z^T.
  absl::Status ScatterLowerTriangle(DeviceMatrix<const float> dout,
                                    DeviceMatrixBatch<float> dgram);

  // Factorization machine, second order: v [batch, fields * dim] holds each
  // example's field embeddings; out[b] = sum_{f < g} <v[b, f], v[b, g]>.
  absl::Status FmInteraction(int64_t fields, DeviceMatrix<const float> v,
                             DeviceSpan<float> out);
  // dv[b, f, d] = dout[b] * (sum_g v[b, g, d] - v[b, f, d]) (overwrites dv).
  absl::Status FmInteractionBackward(int64_t fields,
                                     DeviceMatrix<const float> v,
                                     DeviceSpan<const float> dout,
                                     DeviceMatrix<float> dv);

  // out[r] = <a[r], b[r]> for a, b [rows, dim] (matrix factorization's Dot).
  absl::Status RowwiseDot(DeviceMatrix<const float> a,
                          DeviceMatrix<const float> b, DeviceSpan<float> out);
  // da[r] = dout[r] * b[r], db[r] = dout[r] * a[r] (overwrite).
  absl::Status RowwiseDotBackward(DeviceMatrix<const float> a,
                                  DeviceMatrix<const float> b,
                                  DeviceSpan<const float> dout,
                                  DeviceMatrix<float> da,
                                  DeviceMatrix<float> db);

 protected:
  // Implementations get validated, non-empty arguments (n >= 1 elements)
  // unless stated otherwise.
  virtual absl::StatusOr<DeviceBuffer> DoAllocate(int64_t bytes) = 0;
  virtual absl::Status DoCopyToDevice(const void* host, void* device,
                                      int64_t bytes) = 0;
  virtual absl::Status DoCopyToHost(const void* device, void* host,
                                    int64_t bytes) = 0;
  virtual absl::Status DoCopyOnDevice(const void* src, void* dst,
                                      int64_t bytes) = 0;
  virtual absl::Status DoSynchronize() = 0;
  // k may be 0 (c = beta * c).
  virtual absl::Status DoGemm(Transpose trans_a, Transpose trans_b, int m,
                              int n, int k, float alpha, const float* a,
                              int lda, const float* b, int ldb, float beta,
                              float* c, int ldc) = 0;
  virtual absl::Status DoBiasAdd(const float* bias, int64_t rows, int64_t cols,
                                 float* y) = 0;
  // rows may be 0 (dbias = 0).
  virtual absl::Status DoBiasGrad(const float* dy, int64_t rows, int64_t cols,
                                  float* dbias) = 0;
  virtual absl::Status DoActivationForward(Activation act, const float* x,
                                           int64_t n, float* y) = 0;
  virtual absl::Status DoActivationBackward(Activation act, const float* y,
                                            const float* dy, int64_t n,
                                            float* dx) = 0;
  // dlogits may be null (no gradient).
  virtual absl::Status DoSoftmaxCrossEntropy(const float* logits,
                                             const int32_t* labels,
                                             int64_t rows, int64_t cols,
                                             float* loss, float* dlogits) = 0;
  virtual absl::Status DoArgmax(const float* x, int64_t rows, int64_t cols,
                                int32_t* out) = 0;
  virtual absl::Status DoAxpy(float alpha, const float* x, int64_t n,
                              float* y) = 0;
  virtual absl::Status DoScale(float alpha, int64_t n, float* x) = 0;
  virtual absl::Status DoFill(float value, int64_t n, float* x) = 0;
  virtual absl::Status DoInitialize(Initializer kind, uint64_t seed,
                                    int64_t fan_in, int64_t fan_out, int64_t n,
                                    float* x) = 0;
  virtual absl::Status DoCastFromFloat(const float* x, int64_t n, DType to,
                                       uint16_t* y) = 0;
  virtual absl::Status DoCastToFloat(DType from, const uint16_t* x, int64_t n,
                                     float* y) = 0;

  // Hooks of the layer ops. Index arrays are device pointers (see above);
  // `weights` may be null; ld_* are row strides (>= cols). Counts >= 1
  // unless stated otherwise.
  virtual absl::Status DoBatchedGemm(Transpose trans_a, Transpose trans_b,
                                     int count, int m, int n, int k,
                                     float alpha, const float* a,
                                     const float* b, float beta, float* c) = 0;
  virtual absl::Status DoCopyMatrix(const float* src, int64_t ld_src,
                                    int64_t rows, int64_t cols, float* dst,
                                    int64_t ld_dst) = 0;
  virtual absl::Status DoIm2Col(const ConvGeometry& g, const float* images,
                                float* patches) = 0;
  virtual absl::Status DoCol2Im(const ConvGeometry& g, const float* patches,
                                float* images) = 0;
  // The convolutions are im2col/col2im + GEMM in blocks of images_per_block
  // images (>= 1; workspace null when im2col is the identity) on top of the
  // hooks above; a backend may override them.
  virtual absl::Status DoConv2DForward(const ConvGeometry& g, const float* x,
                                       const float* filter, float* y,
                                       float* workspace,
                                       int64_t images_per_block);
  virtual absl::Status DoConv2DBackwardFilter(const ConvGeometry& g,
                                              const float* x, const float* dy,
                                              float* dfilter, float* workspace,
                                              int64_t images_per_block);
  virtual absl::Status DoConv2DBackwardData(const ConvGeometry& g,
                                            const float* dy,
                                            const float* filter, float* dx,
                                            float* workspace,
                                            int64_t images_per_block);
  virtual absl::Status DoMaxPool2DForward(const PoolGeometry& g, const float* x,
                                          float* y, int32_t* argmax) = 0;
  virtual absl::Status DoMaxPool2DBackward(const PoolGeometry& g,
                                           const int32_t* argmax,
                                           const float* dy, float* dx) = 0;
  virtual absl::Status DoAvgPool2DForward(const PoolGeometry& g, const float* x,
                                          float* y) = 0;
  virtual absl::Status DoAvgPool2DBackward(const PoolGeometry& g,
                                           const float* dy, float* dx) = 0;
  // num_bags >= 1, dim >= 1; num_rows and nnz may be 0.
  virtual absl::Status DoEmbeddingBagForward(
      EmbeddingBagMode mode, const float* rows, int64_t num_rows, int64_t dim,
      const int32_t* indices, int64_t nnz, const int32_t* offsets,
      int64_t num_bags, const float* weights, float* out, int64_t ld_out) = 0;
  // num_rows >= 1, dim >= 1; num_bags and nnz may be 0.
  virtual absl::Status DoEmbeddingBagBackward(
      EmbeddingBagMode mode, const int32_t* indices, int64_t nnz,
      const int32_t* offsets, int64_t num_bags, const float* weights,
      const float* dout, int64_t ld_dout, int64_t num_rows, int64_t dim,
      float* drows) = 0;
  // dlogits / dpredictions may be null (no gradient).
  virtual absl::Status DoSigmoidBinaryCrossEntropy(const float* logits,
                                                   const float* labels,
                                                   int64_t n, float* loss,
                                                   float* dlogits) = 0;
  virtual absl::Status DoMeanSquaredError(const float* predictions,
                                          const float* targets, int64_t n,
                                          float* loss, float* dpredictions) = 0;
  // fields >= 2.
  virtual absl::Status DoGatherLowerTriangle(const float* gram, int64_t count,
                                             int64_t fields, float* out,
                                             int64_t ld_out) = 0;
  virtual absl::Status DoScatterLowerTriangle(const float* dout,
                                              int64_t ld_dout, int64_t count,
                                              int64_t fields, float* dgram) = 0;
  virtual absl::Status DoFmInteraction(const float* v, int64_t batch,
                                       int64_t fields, int64_t dim,
                                       float* out) = 0;
  virtual absl::Status DoFmInteractionBackward(const float* v, int64_t batch,
                                               int64_t fields, int64_t dim,
                                               const float* dout,
                                               float* dv) = 0;
  virtual absl::Status DoRowwiseDot(const float* a, const float* b,
                                    int64_t rows, int64_t dim, float* out) = 0;
  virtual absl::Status DoRowwiseDotBackward(const float* a, const float* b,
                                            int64_t rows, int64_t dim,
                                            const float* dout, float* da,
                                            float* db) = 0;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_H_
