#ifndef PS_KERNELS_BACKEND_H_
#define PS_KERNELS_BACKEND_H_

// The backend-neutral op API. Model code (kernels/mlp.h, worker/) sees only
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
  // matrix). Larger for a block of columns of a wider matrix; only Gemm's
  // `a` and `b` accept that, the other ops take dense matrices.
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
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_H_
