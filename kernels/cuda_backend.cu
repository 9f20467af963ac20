#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda_backend.h"
#include "kernels/gemm_layout.h"
#include "kernels/status_macros.h"

#define PS_LAUNCH(kernel, grid, block, stream, ...) \
  kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#include "kernels/cuda_kernels.cuh"
#include "kernels/cuda_layer_kernels.cuh"

namespace ps::kernels {
namespace {

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", cudaGetErrorName(error), ": ",
                                     cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", cublasGetStatusName(status),
                                     ": ", cublasGetStatusString(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int device) : device_(device) {}
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    PS_KERNELS_RETURN_IF_ERROR(
        CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
    void* ptr = nullptr;
    PS_KERNELS_RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&ptr, static_cast<size_t>(bytes)), "cudaMalloc"));
    return ptr;
  }
  void Free(void* ptr) override {
    // Errors here (a context already torn down at exit) have no one to go to.
    cudaSetDevice(device_);
    cudaFree(ptr);
  }

 private:
  const int device_;
};

// Per-device resources: stream, cuBLAS handle and its workspace, the pinned
// staging buffer. Owns all of them; Create() releases what it got on failure.
class CudaContext {
 public:
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(
      const CudaBackendOptions& options) {
    auto context = std::unique_ptr<CudaContext>(new CudaContext(options));
    PS_KERNELS_RETURN_IF_ERROR(context->Init(options));
    return context;
  }

  ~CudaContext() {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (staging_ != nullptr) cudaFreeHost(staging_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  char* staging() const { return staging_; }
  int64_t staging_bytes() const { return staging_bytes_; }
  bool allow_tf32() const { return allow_tf32_; }

  absl::Status Activate() const {
    return CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
  }

 private:
  explicit CudaContext(const CudaBackendOptions& options)
      : device_(options.device),
        staging_bytes_(options.staging_bytes),
        allow_tf32_(options.allow_tf32) {}

  absl::Status Init(const CudaBackendOptions& options) {
    PS_KERNELS_RETURN_IF_ERROR(Activate());
    PS_KERNELS_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags"));
    PS_KERNELS_RETURN_IF_ERROR(
        CudaStatus(cudaMallocHost(reinterpret_cast<void**>(&staging_),
                                  static_cast<size_t>(staging_bytes_)),
                   "cudaMallocHost (staging buffer)"));
    PS_KERNELS_RETURN_IF_ERROR(
        CublasStatus(cublasCreate(&cublas_), "cublasCreate"));
    PS_KERNELS_RETURN_IF_ERROR(
        CublasStatus(cublasSetStream(cublas_, stream_), "cublasSetStream"));
    if (options.cublas_workspace_bytes > 0) {
      PS_KERNELS_RETURN_IF_ERROR(CudaStatus(
          cudaMalloc(&workspace_,
                     static_cast<size_t>(options.cublas_workspace_bytes)),
          "cudaMalloc (cuBLAS workspace)"));
      PS_KERNELS_RETURN_IF_ERROR(
          CublasStatus(cublasSetWorkspace(
                           cublas_, workspace_,
                           static_cast<size_t>(options.cublas_workspace_bytes)),
                       "cublasSetWorkspace"));
    }
    PS_KERNELS_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(cublas_, options.allow_tf32
                                                    ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH),
                     "cublasSetMathMode"));
    return absl::OkStatus();
  }

  const int device_;
  const int64_t staging_bytes_;
  const bool allow_tf32_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  char* staging_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<CudaContext> context,
              std::shared_ptr<CachingAllocator> allocator)
      : context_(std::move(context)), allocator_(std::move(allocator)) {}

  ~CudaBackend() override {
    // Scratch goes back to the cache before the stream it was used on ends.
    loss_scratch_ = DeviceBuffer();
    context_.reset();
  }

  std::string Name() const override {
    return absl::StrCat("cuda:", context_->device());
  }

 protected:
  absl::StatusOr<DeviceBuffer> DoAllocate(int64_t bytes) override {
    absl::StatusOr<CachingAllocator::Block> block = allocator_->Allocate(bytes);
    if (!block.ok()) return block.status();
    return DeviceBuffer(allocator_, *block, bytes);
  }

  // Pageable host memory is staged through the pinned buffer in chunks; each
  // chunk completes before the staging buffer is refilled.
  absl::Status DoCopyToDevice(const void* host, void* device,
                              int64_t bytes) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    const char* src = static_cast<const char*>(host);
    char* dst = static_cast<char*>(device);
    for (int64_t done = 0; done < bytes;) {
      const int64_t chunk = std::min(bytes - done, context_->staging_bytes());
      std::memcpy(context_->staging(), src + done, static_cast<size_t>(chunk));
      PS_KERNELS_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(dst + done, context_->staging(),
                          static_cast<size_t>(chunk), cudaMemcpyHostToDevice,
                          context_->stream()),
          "cudaMemcpyAsync (host to device)"));
      PS_KERNELS_RETURN_IF_ERROR(CudaStatus(
          cudaStreamSynchronize(context_->stream()), "cudaStreamSynchronize"));
      done += chunk;
    }
    return absl::OkStatus();
  }

  absl::Status DoCopyToHost(const void* device, void* host,
                            int64_t bytes) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    const char* src = static_cast<const char*>(device);
    char* dst = static_cast<char*>(host);
    for (int64_t done = 0; done < bytes;) {
      const int64_t chunk = std::min(bytes - done, context_->staging_bytes());
      PS_KERNELS_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(context_->staging(), src + done,
                          static_cast<size_t>(chunk), cudaMemcpyDeviceToHost,
                          context_->stream()),
          "cudaMemcpyAsync (device to host)"));
      PS_KERNELS_RETURN_IF_ERROR(CudaStatus(
          cudaStreamSynchronize(context_->stream()), "cudaStreamSynchronize"));
      std::memcpy(dst + done, context_->staging(), static_cast<size_t>(chunk));
      done += chunk;
    }
    return absl::OkStatus();
  }

  absl::Status DoCopyOnDevice(const void* src, void* dst,
                              int64_t bytes) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    return CudaStatus(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                        cudaMemcpyDeviceToDevice, context_->stream()),
        "cudaMemcpyAsync (device to device)");
  }

  absl::Status DoSynchronize() override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    return CudaStatus(cudaStreamSynchronize(context_->stream()),
                      "cudaStreamSynchronize");
  }

  // cuBLAS is column-major: see gemm_layout.h.
  absl::Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    const ColumnMajorGemm g =
        ToColumnMajor(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    const auto op = [](Transpose t) {
      return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
    };
    const cublasComputeType_t compute = context_->allow_tf32()
                                            ? CUBLAS_COMPUTE_32F_FAST_TF32
                                            : CUBLAS_COMPUTE_32F;
    return CublasStatus(
        cublasGemmEx(context_->cublas(), op(g.trans_a), op(g.trans_b), g.m, g.n,
                     g.k, &alpha, g.a, CUDA_R_32F, g.lda, g.b, CUDA_R_32F,
                     g.ldb, &beta, g.c, CUDA_R_32F, g.ldc, compute,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  absl::Status DoBiasAdd(const float* bias, int64_t rows, int64_t cols,
                         float* y) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchBiasAdd(context_->stream(), bias, rows, cols, y);
    return LaunchStatus("BiasAdd");
  }
  absl::Status DoBiasGrad(const float* dy, int64_t rows, int64_t cols,
                          float* dbias) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchBiasGrad(context_->stream(), dy, rows, cols, dbias);
    return LaunchStatus("BiasGrad");
  }
  absl::Status DoActivationForward(Activation act, const float* x, int64_t n,
                                   float* y) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchActivationForward(context_->stream(), act, x, n, y);
    return LaunchStatus("ActivationForward");
  }
  absl::Status DoActivationBackward(Activation act, const float* y,
                                    const float* dy, int64_t n,
                                    float* dx) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchActivationBackward(context_->stream(), act, y, dy, n, dx);
    return LaunchStatus("ActivationBackward");
  }
  absl::Status DoSoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                     int64_t rows, int64_t cols, float* loss,
                                     float* dlogits) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    absl::StatusOr<float*> row_loss = LossScratch(rows);
    if (!row_loss.ok()) return row_loss.status();
    cuda::LaunchSoftmaxCrossEntropy(context_->stream(), logits, labels, rows,
                                    cols, *row_loss, loss, dlogits);
    return LaunchStatus("SoftmaxCrossEntropy");
  }
  absl::Status DoArgmax(const float* x, int64_t rows, int64_t cols,
                        int32_t* out) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchArgmax(context_->stream(), x, rows, cols, out);
    return LaunchStatus("Argmax");
  }
  absl::Status DoAxpy(float alpha, const float* x, int64_t n,
                      float* y) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchAxpy(context_->stream(), alpha, x, n, y);
    return LaunchStatus("Axpy");
  }
  absl::Status DoScale(float alpha, int64_t n, float* x) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchScale(context_->stream(), alpha, n, x);
    return LaunchStatus("Scale");
  }
  absl::Status DoFill(float value, int64_t n, float* x) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchFill(context_->stream(), value, n, x);
    return LaunchStatus("Fill");
  }
  absl::Status DoInitialize(Initializer kind, uint64_t seed, int64_t fan_in,
                            int64_t fan_out, int64_t n, float* x) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchInitialize(context_->stream(), kind, seed, fan_in, fan_out, n,
                           x);
    return LaunchStatus("Initialize");
  }
  absl::Status DoCastFromFloat(const float* x, int64_t n, DType to,
                               uint16_t* y) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchCastFromFloat(context_->stream(), x, n, to, y);
    return LaunchStatus("CastFromFloat");
  }
  absl::Status DoCastToFloat(DType from, const uint16_t* x, int64_t n,
                             float* y) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchCastToFloat(context_->stream(), from, x, n, y);
    return LaunchStatus("CastToFloat");
  }

  // ---- Layer ops: cuBLAS for the batched GEMM, cuda_layer_kernels.cuh for
  // the rest.
  absl::Status DoBatchedGemm(Transpose trans_a, Transpose trans_b, int count,
                             int m, int n, int k, float alpha, const float* a,
                             const float* b, float beta, float* c) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    const int lda = std::max(trans_a == Transpose::kYes ? m : k, 1);
    const int ldb = std::max(trans_b == Transpose::kYes ? k : n, 1);
    const ColumnMajorGemm g =
        ToColumnMajor(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, n);
    const auto op = [](Transpose t) {
      return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
    };
    const cublasComputeType_t compute = context_->allow_tf32()
                                            ? CUBLAS_COMPUTE_32F_FAST_TF32
                                            : CUBLAS_COMPUTE_32F;
    // The swap of ToColumnMajor applies to the strides too: g.a is b.
    return CublasStatus(
        cublasGemmStridedBatchedEx(
            context_->cublas(), op(g.trans_a), op(g.trans_b), g.m, g.n, g.k,
            &alpha, g.a, CUDA_R_32F, g.lda, int64_t{k} * n, g.b, CUDA_R_32F,
            g.ldb, int64_t{m} * k, &beta, g.c, CUDA_R_32F, g.ldc,
            int64_t{m} * n, count, compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  }
  absl::Status DoCopyMatrix(const float* src, int64_t ld_src, int64_t rows,
                            int64_t cols, float* dst, int64_t ld_dst) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchCopyMatrix(context_->stream(), src, ld_src, rows, cols, dst,
                           ld_dst);
    return LaunchStatus("CopyMatrix");
  }
  absl::Status DoIm2Col(const ConvGeometry& g, const float* images,
                        float* patches) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchIm2Col(context_->stream(), g, images, patches);
    return LaunchStatus("Im2Col");
  }
  absl::Status DoCol2Im(const ConvGeometry& g, const float* patches,
                        float* images) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchCol2Im(context_->stream(), g, patches, images);
    return LaunchStatus("Col2Im");
  }
  absl::Status DoMaxPool2DForward(const PoolGeometry& g, const float* x,
                                  float* y, int32_t* argmax) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchMaxPoolForward(context_->stream(), g, x, y, argmax);
    return LaunchStatus("MaxPool2DForward");
  }
  absl::Status DoMaxPool2DBackward(const PoolGeometry& g, const int32_t* argmax,
                                   const float* dy, float* dx) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchMaxPoolBackward(context_->stream(), g, argmax, dy, dx);
    return LaunchStatus("MaxPool2DBackward");
  }
  absl::Status DoAvgPool2DForward(const PoolGeometry& g, const float* x,
                                  float* y) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchAvgPoolForward(context_->stream(), g, x, y);
    return LaunchStatus("AvgPool2DForward");
  }
  absl::Status DoAvgPool2DBackward(const PoolGeometry& g, const float* dy,
                                   float* dx) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchAvgPoolBackward(context_->stream(), g, dy, dx);
    return LaunchStatus("AvgPool2DBackward");
  }
  absl::Status DoEmbeddingBagForward(EmbeddingBagMode mode, const float* rows,
                                     int64_t num_rows, int64_t dim,
                                     const int32_t* indices, int64_t nnz,
                                     const int32_t* offsets, int64_t num_bags,
                                     const float* weights, float* out,
                                     int64_t ld_out) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchEmbeddingBagForward(context_->stream(), mode, rows, num_rows,
                                    dim, indices, nnz, offsets, num_bags,
                                    weights, out, ld_out);
    return LaunchStatus("EmbeddingBagForward");
  }
  absl::Status DoEmbeddingBagBackward(EmbeddingBagMode mode,
                                      const int32_t* indices, int64_t nnz,
                                      const int32_t* offsets, int64_t num_bags,
                                      const float* weights, const float* dout,
                                      int64_t ld_dout, int64_t num_rows,
                                      int64_t dim, float* drows) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchEmbeddingBagBackward(context_->stream(), mode, indices, nnz,
                                     offsets, num_bags, weights, dout, ld_dout,
                                     num_rows, dim, drows);
    return LaunchStatus("EmbeddingBagBackward");
  }
  absl::Status DoSigmoidBinaryCrossEntropy(const float* logits,
                                           const float* labels, int64_t n,
                                           float* loss,
                                           float* dlogits) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    absl::StatusOr<float*> element_loss = LossScratch(n);
    if (!element_loss.ok()) return element_loss.status();
    cuda::LaunchSigmoidBinaryCrossEntropy(context_->stream(), logits, labels, n,
                                          *element_loss, loss, dlogits);
    return LaunchStatus("SigmoidBinaryCrossEntropy");
  }
  absl::Status DoMeanSquaredError(const float* predictions,
                                  const float* targets, int64_t n, float* loss,
                                  float* dpredictions) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    absl::StatusOr<float*> element_loss = LossScratch(n);
    if (!element_loss.ok()) return element_loss.status();
    cuda::LaunchMeanSquaredError(context_->stream(), predictions, targets, n,
                                 *element_loss, loss, dpredictions);
    return LaunchStatus("MeanSquaredError");
  }
  absl::Status DoGatherLowerTriangle(const float* gram, int64_t count,
                                     int64_t fields, float* out,
                                     int64_t ld_out) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchGatherLowerTriangle(context_->stream(), gram, count, fields,
                                    out, ld_out);
    return LaunchStatus("GatherLowerTriangle");
  }
  absl::Status DoScatterLowerTriangle(const float* dout, int64_t ld_dout,
                                      int64_t count, int64_t fields,
                                      float* dgram) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchScatterLowerTriangle(context_->stream(), dout, ld_dout, count,
                                     fields, dgram);
    return LaunchStatus("ScatterLowerTriangle");
  }
  absl::Status DoFmInteraction(const float* v, int64_t batch, int64_t fields,
                               int64_t dim, float* out) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchFmInteraction(context_->stream(), v, batch, fields, dim, out);
    return LaunchStatus("FmInteraction");
  }
  absl::Status DoFmInteractionBackward(const float* v, int64_t batch,
                                       int64_t fields, int64_t dim,
                                       const float* dout, float* dv) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchFmInteractionBackward(context_->stream(), v, batch, fields, dim,
                                      dout, dv);
    return LaunchStatus("FmInteractionBackward");
  }
  absl::Status DoRowwiseDot(const float* a, const float* b, int64_t rows,
                            int64_t dim, float* out) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchRowwiseDot(context_->stream(), a, b, rows, dim, out);
    return LaunchStatus("RowwiseDot");
  }
  absl::Status DoRowwiseDotBackward(const float* a, const float* b,
                                    int64_t rows, int64_t dim,
                                    const float* dout, float* da,
                                    float* db) override {
    PS_KERNELS_RETURN_IF_ERROR(context_->Activate());
    cuda::LaunchRowwiseDotBackward(context_->stream(), a, b, rows, dim, dout,
                                   da, db);
    return LaunchStatus("RowwiseDotBackward");
  }

 private:
  static absl::Status LaunchStatus(const char* op) {
    return CudaStatus(cudaGetLastError(), op);
  }

  // n floats of scratch for per-element losses, grown on demand. Ops on the
  // one stream run in order, so one buffer serves every loss op.
  absl::StatusOr<float*> LossScratch(int64_t n) {
    const int64_t needed = n * static_cast<int64_t>(sizeof(float));
    if (loss_scratch_.bytes() < needed) {
      absl::StatusOr<DeviceBuffer> scratch = DoAllocate(needed);
      if (!scratch.ok()) return scratch.status();
      loss_scratch_ = *std::move(scratch);
    }
    return static_cast<float*>(loss_scratch_.data());
  }

  std::unique_ptr<CudaContext> context_;
  std::shared_ptr<CachingAllocator> allocator_;
  DeviceBuffer loss_scratch_;  // per-row / per-element losses
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  if (options.staging_bytes <= 0 || options.cublas_workspace_bytes < 0 ||
      options.max_cached_bytes < 0) {
    return absl::InvalidArgumentError(
        "CudaBackendOptions: staging_bytes must be positive and byte counts "
        "non-negative");
  }
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorName(error),
        ": ", cudaGetErrorString(error), "; use the CPU backend"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device present; use the CPU backend");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " does not exist (", count,
                     " present)"));
  }
  absl::StatusOr<std::unique_ptr<CudaContext>> context =
      CudaContext::Create(options);
  if (!context.ok()) return context.status();
  auto allocator = std::make_shared<CachingAllocator>(
      std::make_unique<CudaRawAllocator>(options.device),
      options.max_cached_bytes);
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(*std::move(context), std::move(allocator)));
}

}  // namespace ps::kernels
