// GEMM through the op API next to OpenBLAS called directly, one training
// step of the 784-256-128-10 MLP at batch 128, and the layer ops at the
// shapes of the Fashion-MNIST CNN and of embedding models (further down).
//
//   bazel run -c opt //kernels:kernels_benchmark -- --blas_threads=1
//
// --blas_threads=N (default 1) bounds OpenBLAS's threads; --blas_check=false
// keeps OpenBLAS's own choice of kernels (see kernels/blas_check.h; by
// default a fallback to generic kernels is corrected by a restart); all
// other flags go to Google Benchmark. The header names the BLAS core
// (blas_core) and the CPU's features (blas_cpu). CUDA benchmarks report an
// error where no GPU works.

#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/blas_check.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/mlp.h"

namespace ps::kernels {
namespace {

int blas_threads = 1;

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

void SetGemmCounters(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// Args: m, n, k, trans_a, trans_b (C[m,n] = op(A) op(B), row-major).
void BM_CblasSgemm(benchmark::State& state) {
  const int m = state.range(0), n = state.range(1), k = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  openblas_set_num_threads(blas_threads);
  const std::vector<float> a = RandomVector(int64_t{m} * k, 1);
  const std::vector<float> b = RandomVector(int64_t{k} * n, 2);
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(),
                ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  SetGemmCounters(state, m, n, k);
}

std::unique_ptr<Backend> MakeBackend(benchmark::State& state, bool cuda) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      cuda ? CreateCudaBackend({})
           : CreateCpuBackend({.num_threads = blas_threads});
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return nullptr;
  }
  return *std::move(backend);
}

DeviceBuffer Upload(Backend& backend, const std::vector<float>& host) {
  DeviceBuffer buffer = *backend.AllocateArray<float>(host.size());
  (void)backend.CopyToDevice(host.data(), buffer.data(),
                             host.size() * sizeof(float));
  return buffer;
}

void BackendGemm(benchmark::State& state, bool cuda) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Transpose ta = state.range(3) ? Transpose::kYes : Transpose::kNo;
  const Transpose tb = state.range(4) ? Transpose::kYes : Transpose::kNo;
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  DeviceBuffer a = Upload(*backend, RandomVector(m * k, 1));
  DeviceBuffer b = Upload(*backend, RandomVector(k * n, 2));
  DeviceBuffer c = *backend->AllocateArray<float>(m * n);
  const auto ma =
      ta == Transpose::kYes ? a.Matrix<float>(k, m) : a.Matrix<float>(m, k);
  const auto mb =
      tb == Transpose::kYes ? b.Matrix<float>(n, k) : b.Matrix<float>(k, n);
  for (auto _ : state) {
    const absl::Status s =
        backend->Gemm(ta, tb, 1.0f, ma, mb, 0.0f, c.Matrix<float>(m, n));
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  (void)backend->Synchronize();
  SetGemmCounters(state, m, n, k);
}

void BM_CpuBackendGemm(benchmark::State& state) { BackendGemm(state, false); }
void BM_CudaBackendGemm(benchmark::State& state) { BackendGemm(state, true); }

void GemmShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "ta", "tb"});
  // The MLP 784-256-128-10 at batch 128: forward, weight and input gradients.
  b->Args({128, 256, 784, 0, 0});
  b->Args({128, 128, 256, 0, 0});
  b->Args({128, 10, 128, 0, 0});
  b->Args({784, 256, 128, 1, 0});
  b->Args({256, 128, 128, 1, 0});
  b->Args({128, 256, 128, 0, 1});
  b->Args({1024, 1024, 1024, 0, 0});
}

BENCHMARK(BM_CblasSgemm)->Apply(GemmShapes)->UseRealTime();
BENCHMARK(BM_CpuBackendGemm)->Apply(GemmShapes)->UseRealTime();
BENCHMARK(BM_CudaBackendGemm)->Apply(GemmShapes)->UseRealTime();

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The within-5% check: each iteration runs OpenBLAS directly and then the CPU
// backend's Gemm on the same operands, so both see the same machine load;
// counters are median rates over the iterations and their ratio.
void BM_GemmBackendVsCblas(benchmark::State& state) {
  const int m = state.range(0), n = state.range(1), k = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  std::unique_ptr<Backend> backend = MakeBackend(state, /*cuda=*/false);
  if (backend == nullptr) return;
  // The CPU backend's "device" memory is host memory: share the operands.
  DeviceBuffer a = Upload(*backend, RandomVector(int64_t{m} * k, 1));
  DeviceBuffer b = Upload(*backend, RandomVector(int64_t{k} * n, 2));
  DeviceBuffer c = *backend->AllocateArray<float>(int64_t{m} * n);
  const auto ma = ta ? a.Matrix<float>(k, m) : a.Matrix<float>(m, k);
  const auto mb = tb ? b.Matrix<float>(n, k) : b.Matrix<float>(k, n);
  std::vector<double> direct_s, ours_s;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, ma.data,
                static_cast<int>(ma.cols), mb.data, static_cast<int>(mb.cols),
                0.0f, c.Matrix<float>(m, n).data, n);
    const auto t1 = Clock::now();
    const absl::Status s =
        backend->Gemm(ta ? Transpose::kYes : Transpose::kNo,
                      tb ? Transpose::kYes : Transpose::kNo, 1.0f, ma, mb, 0.0f,
                      c.Matrix<float>(m, n));
    const auto t2 = Clock::now();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    direct_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    ours_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double flop = 2.0 * m * n * k;
  const double direct = flop / Median(direct_s) / 1e9;
  const double ours = flop / Median(ours_s) / 1e9;
  state.counters["cblas_GFLOP/s"] = direct;
  state.counters["ours_GFLOP/s"] = ours;
  state.counters["ours/cblas"] = ours / direct;
}

BENCHMARK(BM_GemmBackendVsCblas)->Apply(GemmShapes)->UseRealTime();

constexpr int64_t kBatch = 128;
const std::vector<int64_t> kLayers = {784, 256, 128, 10};

// The GEMMs one MLP step issues, with the same shapes, through the backend.
absl::Status StepGemms(Backend& backend, const std::vector<DeviceBuffer>& acts,
                       const std::vector<DeviceBuffer>& weights,
                       const DeviceBuffer& delta, const DeviceBuffer& out) {
  const int layers = static_cast<int>(kLayers.size()) - 1;
  for (int i = 0; i < layers; ++i) {  // forward
    absl::Status s =
        backend.Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                     acts[i].Matrix<float>(kBatch, kLayers[i]),
                     weights[i].Matrix<float>(kLayers[i], kLayers[i + 1]), 0.0f,
                     acts[i + 1].Matrix<float>(kBatch, kLayers[i + 1]));
    if (!s.ok()) return s;
  }
  for (int i = layers - 1; i >= 0; --i) {  // backward
    absl::Status s =
        backend.Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                     acts[i].Matrix<float>(kBatch, kLayers[i]),
                     delta.Matrix<float>(kBatch, kLayers[i + 1]), 0.0f,
                     out.Matrix<float>(kLayers[i], kLayers[i + 1]));
    if (!s.ok()) return s;
    if (i == 0) break;
    s = backend.Gemm(Transpose::kNo, Transpose::kYes, 1.0f,
                     delta.Matrix<float>(kBatch, kLayers[i + 1]),
                     weights[i].Matrix<float>(kLayers[i], kLayers[i + 1]), 0.0f,
                     out.Matrix<float>(kBatch, kLayers[i]));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void MlpStep(benchmark::State& state, bool cuda) {
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  absl::StatusOr<std::unique_ptr<Mlp>> mlp =
      Mlp::Create(backend.get(), {.layer_sizes = kLayers});
  if (!mlp.ok() || !(*mlp)->InitializeParameters(1).ok()) {
    state.SkipWithError("Mlp::Create failed");
    return;
  }
  const std::vector<float> images = RandomVector(kBatch * kLayers[0], 3);
  std::vector<int32_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[i] = static_cast<int32_t>(i % 10);
  for (auto _ : state) {
    absl::StatusOr<float> loss = (*mlp)->TrainStep(images, labels);
    if (!loss.ok()) {
      state.SkipWithError(std::string(loss.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(*loss);
  }

  // Share outside GEMM: outside the timed loop, alternate one step and the
  // step's GEMMs alone (same shapes, same backend); compare the medians, so
  // both halves see the same machine load.
  std::vector<DeviceBuffer> acts, weights;
  for (int64_t size : kLayers) {
    acts.push_back(Upload(*backend, RandomVector(kBatch * size, 4)));
  }
  for (size_t i = 0; i + 1 < kLayers.size(); ++i) {
    weights.push_back(
        Upload(*backend, RandomVector(kLayers[i] * kLayers[i + 1], 5)));
  }
  DeviceBuffer delta = Upload(*backend, RandomVector(kBatch * 256, 6));
  DeviceBuffer out = *backend->AllocateArray<float>(784 * 256);
  const int reps = static_cast<int>(std::min<int64_t>(state.iterations(), 500));
  using Clock = std::chrono::steady_clock;
  std::vector<double> step_s, gemm_s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    (void)(*mlp)->TrainStep(images, labels);
    const auto t1 = Clock::now();
    (void)StepGemms(*backend, acts, weights, delta, out);
    (void)backend->Synchronize();
    const auto t2 = Clock::now();
    step_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    gemm_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double step = Median(step_s), gemm = Median(gemm_s);
  state.counters["step_ms_median"] = 1e3 * step;
  state.counters["gemm_ms_median"] = 1e3 * gemm;
  state.counters["non_gemm_share"] = 1.0 - gemm / step;
}

void BM_CpuMlpTrainStep(benchmark::State& state) { MlpStep(state, false); }
void BM_CudaMlpTrainStep(benchmark::State& state) { MlpStep(state, true); }

BENCHMARK(BM_CpuMlpTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaMlpTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------------------
// Layer ops at the shapes of the Fashion-MNIST CNN (5x5 convolutions 1->32
// and 32->64 with padding 2, max-pool 2, dense 3136->256->10, batch 128)
// and of embedding models (4096 unique rows of dim 16 or 64, 26 fields).
// Each op is timed next to its ceiling on the same backend in the same
// iteration (the GEMM of the same shape on operands already laid out, or a
// device copy of the same bytes), and the medians are reported.

#define PS_BENCH_RETURN_IF_ERROR(expr)             \
  do {                                             \
    const absl::Status bench_status_ = (expr);     \
    if (!bench_status_.ok()) return bench_status_; \
  } while (false)

// Seconds on the clock the layer benchmarks time with: on a CPU backend with
// one BLAS thread, the calling thread's CPU time (everything runs on it), so
// that builds sharing the machine disturb the figures less; otherwise wall
// time.
double Now(const Backend& backend) {
  if (backend.HostAddressable() && blas_threads == 1) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) +
           1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ConvGeometry CnnConv(int64_t layer, int64_t batch) {
  return layer == 1 ? ConvGeometry{.batch = batch,
                                   .in_h = 28,
                                   .in_w = 28,
                                   .in_c = 1,
                                   .out_c = 32,
                                   .kernel_h = 5,
                                   .kernel_w = 5,
                                   .pad_h = 2,
                                   .pad_w = 2}
                    : ConvGeometry{.batch = batch,
                                   .in_h = 14,
                                   .in_w = 14,
                                   .in_c = 32,
                                   .out_c = 64,
                                   .kernel_h = 5,
                                   .kernel_w = 5,
                                   .pad_h = 2,
                                   .pad_w = 2};
}

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// Args: layer (1 or 2), images per im2col block (0: the backend's choice).
// Reports the op's GFLOP/s, the GFLOP/s of its GEMMs alone and the ratio.
void ConvBench(benchmark::State& state, bool cuda, ConvPass pass) {
  const ConvGeometry g = CnnConv(state.range(0), kBatch);
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  const int64_t rows = g.batch * g.out_pixels();
  const int64_t ws_size = state.range(1) == 0
                              ? backend->ConvWorkspaceSize(g)
                              : Backend::ConvWorkspacePerImage(g) *
                                    std::min<int64_t>(state.range(1), g.batch);
  DeviceBuffer x = Upload(*backend, RandomVector(g.batch * g.image_size(), 1));
  DeviceBuffer w = Upload(*backend, RandomVector(g.patch_size() * g.out_c, 2));
  DeviceBuffer y = Upload(*backend, RandomVector(rows * g.out_c, 3));
  DeviceBuffer ws =
      *backend->AllocateArray<float>(std::max<int64_t>(ws_size, 1));
  const DeviceMatrix<float> wm = w.Matrix<float>(g.patch_size(), g.out_c);
  const DeviceMatrix<float> ym = y.Matrix<float>(rows, g.out_c);
  // The ceiling: the op's GEMMs alone, block by block, on one block's patch
  // matrix already laid out (as if im2col/col2im cost nothing and left the
  // patches in cache).
  const int64_t images =
      ws_size == 0 ? g.batch : ws_size / Backend::ConvWorkspacePerImage(g);
  DeviceBuffer patches = Upload(
      *backend, RandomVector(images * g.out_pixels() * g.patch_size(), 4));
  const auto op = [&]() -> absl::Status {
    switch (pass) {
      case ConvPass::kForward:
        return backend->Conv2DForward(g,
                                      x.Span<float>(g.batch * g.image_size()),
                                      wm, ym, ws.Span<float>(ws_size));
      case ConvPass::kBackwardData:
        return backend->Conv2DBackwardData(
            g, ym, wm, x.Span<float>(g.batch * g.image_size()),
            ws.Span<float>(ws_size));
      case ConvPass::kBackwardFilter:
        return backend->Conv2DBackwardFilter(
            g, x.Span<float>(g.batch * g.image_size()), ym, wm,
            ws.Span<float>(ws_size));
    }
    return absl::OkStatus();
  };
  const auto gemm = [&]() -> absl::Status {
    for (int64_t n0 = 0; n0 < g.batch; n0 += images) {
      const int64_t block_rows =
          std::min(images, g.batch - n0) * g.out_pixels();
      const DeviceMatrix<float> pm =
          patches.Matrix<float>(block_rows, g.patch_size());
      const DeviceMatrix<float> yb(ym.data + n0 * g.out_pixels() * g.out_c,
                                   block_rows, g.out_c);
      absl::Status s;
      switch (pass) {
        case ConvPass::kForward:
          s = backend->Gemm(Transpose::kNo, Transpose::kNo, 1.0f, pm, wm, 0.0f,
                            yb);
          break;
        case ConvPass::kBackwardData:
          s = backend->Gemm(Transpose::kNo, Transpose::kYes, 1.0f, yb, wm, 0.0f,
                            pm);
          break;
        case ConvPass::kBackwardFilter:
          s = backend->Gemm(Transpose::kYes, Transpose::kNo, 1.0f, pm, yb,
                            n0 == 0 ? 0.0f : 1.0f, wm);
          break;
      }
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  std::vector<double> op_s, gemm_s;
  for (auto _ : state) {
    const double t0 = Now(*backend);
    absl::Status s = op();
    if (s.ok()) s = backend->Synchronize();
    const double t1 = Now(*backend);
    if (s.ok()) s = gemm();
    if (s.ok()) s = backend->Synchronize();
    const double t2 = Now(*backend);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    op_s.push_back(t1 - t0);
    gemm_s.push_back(t2 - t1);
  }
  const double flop = 2.0 * rows * g.out_c * g.patch_size();
  state.counters["op_ms"] = 1e3 * Median(op_s);
  state.counters["GFLOP/s"] = flop / Median(op_s) / 1e9;
  state.counters["gemm_GFLOP/s"] = flop / Median(gemm_s) / 1e9;
  state.counters["of_gemm"] = Median(gemm_s) / Median(op_s);
  state.counters["images/block"] = images;
}

void ConvBlockings(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "images"});
  for (int64_t layer : {1, 2}) {
    for (int64_t images : {0, 1, 2, 4, 8, 16, 32, 128}) {
      b->Args({layer, images});
    }
  }
}

void BM_CpuConv2DForward(benchmark::State& state) {
  ConvBench(state, false, ConvPass::kForward);
}
void BM_CpuConv2DBackwardData(benchmark::State& state) {
  ConvBench(state, false, ConvPass::kBackwardData);
}
void BM_CpuConv2DBackwardFilter(benchmark::State& state) {
  ConvBench(state, false, ConvPass::kBackwardFilter);
}
void BM_CudaConv2DForward(benchmark::State& state) {
  ConvBench(state, true, ConvPass::kForward);
}
void BM_CudaConv2DBackwardData(benchmark::State& state) {
  ConvBench(state, true, ConvPass::kBackwardData);
}
void BM_CudaConv2DBackwardFilter(benchmark::State& state) {
  ConvBench(state, true, ConvPass::kBackwardFilter);
}
BENCHMARK(BM_CpuConv2DForward)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CpuConv2DBackwardData)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CpuConv2DBackwardFilter)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CudaConv2DForward)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CudaConv2DBackwardData)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CudaConv2DBackwardFilter)->Apply(ConvBlockings)->UseRealTime();

// One SGD step of the CNN over the op API, as a model layer would issue it:
// conv(5x5, 1->32) relu maxpool conv(5x5, 32->64) relu maxpool dense(3136,
// 256) relu dense(256, 10) softmax cross-entropy, backward, and w -= lr * g.
// Reports the step time and the convolutions' share of it.
class CnnStep {
 public:
  absl::Status Init(Backend* backend) {
    b_ = backend;
    for (int i = 0; i < 8; ++i) {
      params_.push_back(Upload(*b_, RandomVector(kParamSizes[i], 10 + i)));
      grads_.push_back(*b_->AllocateArray<float>(kParamSizes[i]));
      PS_BENCH_RETURN_IF_ERROR(
          b_->Scale(0.05f, params_.back().Span<float>(kParamSizes[i])));
    }
    images_ = Upload(*b_, RandomVector(kBatch * 784, 20));
    std::vector<int32_t> labels(kBatch);
    for (int64_t i = 0; i < kBatch; ++i)
      labels[i] = static_cast<int32_t>(i % 10);
    labels_ = *b_->AllocateArray<int32_t>(kBatch);
    PS_BENCH_RETURN_IF_ERROR(
        b_->CopyToDevice(labels.data(), labels_.data(), kBatch * 4));
    for (int64_t size : {c1_.batch * c1_.out_pixels() * 32,  // conv1 out
                         p1_.out_size(),                     // pool1 out
                         c2_.batch * c2_.out_pixels() * 64,  // conv2 out
                         p2_.out_size(),                     // pool2 out
                         kBatch * 256, kBatch * 10}) {
      acts_.push_back(*b_->AllocateArray<float>(size));
      dacts_.push_back(*b_->AllocateArray<float>(size));
    }
    argmax1_ = *b_->AllocateArray<int32_t>(p1_.out_size());
    argmax2_ = *b_->AllocateArray<int32_t>(p2_.out_size());
    dpool1_ = *b_->AllocateArray<float>(p1_.out_size());
    loss_ = *b_->AllocateArray<float>(1);
    ws_size_ = std::max(b_->ConvWorkspaceSize(c1_), b_->ConvWorkspaceSize(c2_));
    ws_ = *b_->AllocateArray<float>(std::max<int64_t>(ws_size_, 1));
    return absl::OkStatus();
  }

  // One step; adds the time spent in convolution ops to *conv_s.
  absl::Status Run(double* conv_s) {
    const auto timed = [&](const absl::Status& s, double t0) {
      *conv_s += Now(*b_) - t0;
      return s;
    };
    const DeviceSpan<float> ws = ws_.Span<float>(ws_size_);
    double t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DForward(c1_, images_.Span<float>(kBatch * 784),
                                Param(0, 25, 32), Act(0, 32), ws),
              t));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[1].Span<float>(32), Act(0, 32)));
    PS_BENCH_RETURN_IF_ERROR(Relu(0));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DForward(
        p1_, acts_[0].Span<float>(p1_.batch * p1_.image_size()),
        acts_[1].Span<float>(p1_.out_size()),
        argmax1_.Span<int32_t>(p1_.out_size())));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DForward(c2_, acts_[1].Span<float>(p1_.out_size()),
                                Param(2, 800, 64), Act(2, 64), ws),
              t));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[3].Span<float>(64), Act(2, 64)));
    PS_BENCH_RETURN_IF_ERROR(Relu(2));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DForward(
        p2_, acts_[2].Span<float>(p2_.batch * p2_.image_size()),
        acts_[3].Span<float>(p2_.out_size()),
        argmax2_.Span<int32_t>(p2_.out_size())));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                                      Act(3, 3136), Param(4, 3136, 256), 0.0f,
                                      Act(4, 256)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[5].Span<float>(256), Act(4, 256)));
    PS_BENCH_RETURN_IF_ERROR(Relu(4));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                                      Act(4, 256), Param(6, 256, 10), 0.0f,
                                      Act(5, 10)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[7].Span<float>(10), Act(5, 10)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->SoftmaxCrossEntropy(Act(5, 10), labels_.Span<int32_t>(kBatch),
                                loss_.Span<float>(1), DAct(5, 10)));
    // Backward.
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                                      Act(4, 256), DAct(5, 10), 0.0f,
                                      Grad(6, 256, 10)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(5, 10), grads_[7].Span<float>(10)));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kYes, 1.0f,
                                      DAct(5, 10), Param(6, 256, 10), 0.0f,
                                      DAct(4, 256)));
    PS_BENCH_RETURN_IF_ERROR(ReluBackward(4));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                                      Act(3, 3136), DAct(4, 256), 0.0f,
                                      Grad(4, 3136, 256)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(4, 256), grads_[5].Span<float>(256)));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kYes, 1.0f,
                                      DAct(4, 256), Param(4, 3136, 256), 0.0f,
                                      DAct(3, 3136)));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DBackward(
        p2_, argmax2_.Span<int32_t>(p2_.out_size()),
        dacts_[3].Span<float>(p2_.out_size()),
        dacts_[2].Span<float>(p2_.batch * p2_.image_size())));
    PS_BENCH_RETURN_IF_ERROR(ReluBackward(2));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(2, 64), grads_[3].Span<float>(64)));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(timed(
        b_->Conv2DBackwardFilter(c2_, acts_[1].Span<float>(p1_.out_size()),
                                 DAct(2, 64), Grad(2, 800, 64), ws),
        t));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DBackwardData(c2_, DAct(2, 64), Param(2, 800, 64),
                                     dpool1_.Span<float>(p1_.out_size()), ws),
              t));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DBackward(
        p1_, argmax1_.Span<int32_t>(p1_.out_size()),
        dpool1_.Span<float>(p1_.out_size()),
        dacts_[0].Span<float>(p1_.batch * p1_.image_size())));
    PS_BENCH_RETURN_IF_ERROR(ReluBackward(0));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(0, 32), grads_[1].Span<float>(32)));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DBackwardFilter(c1_, images_.Span<float>(kBatch * 784),
                                       DAct(0, 32), Grad(0, 25, 32), ws),
              t));
    for (int i = 0; i < 8; ++i) {  // SGD
      PS_BENCH_RETURN_IF_ERROR(
          b_->Axpy(-0.01f, grads_[i].Span<float>(kParamSizes[i]),
                   params_[i].Span<float>(kParamSizes[i])));
    }
    return b_->Synchronize();
  }

 private:
  static constexpr int64_t kParamSizes[8] = {25 * 32,    32,  800 * 64, 64,
                                             3136 * 256, 256, 256 * 10, 10};
  DeviceMatrix<float> Param(int i, int64_t rows, int64_t cols) {
    return params_[i].Matrix<float>(rows, cols);
  }
  DeviceMatrix<float> Grad(int i, int64_t rows, int64_t cols) {
    return grads_[i].Matrix<float>(rows, cols);
  }
  // Activation i as a [n, cols] matrix.
  DeviceMatrix<float> Act(int i, int64_t cols) {
    return acts_[i].Matrix<float>(acts_[i].bytes() / 4 / cols, cols);
  }
  DeviceMatrix<float> DAct(int i, int64_t cols) {
    return dacts_[i].Matrix<float>(dacts_[i].bytes() / 4 / cols, cols);
  }
  absl::Status Relu(int i) {
    const DeviceSpan<float> a = acts_[i].Span<float>();
    return b_->ActivationForward(Activation::kRelu, a, a);
  }
  absl::Status ReluBackward(int i) {
    const DeviceSpan<float> d =
        dacts_[i].Span<float>(acts_[i].Span<float>().size);
    return b_->ActivationBackward(Activation::kRelu,
                                  acts_[i].Span<float>(d.size), d, d);
  }

  Backend* b_ = nullptr;
  const ConvGeometry c1_ = CnnConv(1, kBatch);
  const ConvGeometry c2_ = CnnConv(2, kBatch);
  const PoolGeometry p1_{
      .batch = kBatch, .in_h = 28, .in_w = 28, .channels = 32};
  const PoolGeometry p2_{
      .batch = kBatch, .in_h = 14, .in_w = 14, .channels = 64};
  std::vector<DeviceBuffer> params_, grads_, acts_, dacts_;
  DeviceBuffer images_, labels_, argmax1_, argmax2_, dpool1_, loss_, ws_;
  int64_t ws_size_ = 0;
};

void CnnTrainStep(benchmark::State& state, bool cuda) {
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  CnnStep step;
  absl::Status s = step.Init(backend.get());
  std::vector<double> step_s, conv_s;
  for (auto _ : state) {
    if (!s.ok()) break;
    double conv = 0.0;
    const double t0 = Now(*backend);
    s = step.Run(&conv);
    step_s.push_back(Now(*backend) - t0);
    conv_s.push_back(conv);
  }
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  state.counters["step_ms_median"] = 1e3 * Median(step_s);
  state.counters["conv_ms_median"] = 1e3 * Median(conv_s);
  state.counters["conv_share"] = Median(conv_s) / Median(step_s);
}

void BM_CpuCnnTrainStep(benchmark::State& state) { CnnTrainStep(state, false); }
void BM_CudaCnnTrainStep(benchmark::State& state) { CnnTrainStep(state, true); }
BENCHMARK(BM_CpuCnnTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaCnnTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();

// Embedding bags of one id per (example, field): 512 examples x 26 fields =
// 13312 ids over 4096 unique rows, ids drawn Zipf(1.05) over the rows (the
// parameter client's inverse index). Args: dim, backward (0 or 1).
// Bytes counted: forward reads each id's row and writes each bag;
// backward reads each bag's gradient and reads and writes each id's row
// gradient (plus zeroing the rows). The ceiling: CopyOnDevice of as many
// bytes as are written.
void EmbeddingBench(benchmark::State& state, bool cuda) {
  const int64_t dim = state.range(0);
  const bool backward = state.range(1) != 0;
  constexpr int64_t kRows = 4096, kExamples = 512, kFields = 26;
  constexpr int64_t kIds = kExamples * kFields;
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  std::vector<double> cdf(kRows);
  double total = 0.0;
  for (int64_t r = 0; r < kRows; ++r)
    cdf[r] = total += std::pow(r + 1.0, -1.05);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, total);
  std::vector<int32_t> ids(kIds), offsets(kIds + 1);
  for (int64_t i = 0; i < kIds; ++i) {
    ids[i] = static_cast<int32_t>(
        std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    offsets[i + 1] = static_cast<int32_t>(i + 1);
  }
  DeviceBuffer rows = Upload(*backend, RandomVector(kRows * dim, 1));
  DeviceBuffer out = Upload(*backend, RandomVector(kIds * dim, 2));
  DeviceBuffer copy = *backend->AllocateArray<float>(kIds * dim);
  DeviceBuffer dids = *backend->AllocateArray<int32_t>(kIds);
  DeviceBuffer doffsets = *backend->AllocateArray<int32_t>(kIds + 1);
  (void)backend->CopyToDevice(ids.data(), dids.data(), kIds * 4);
  (void)backend->CopyToDevice(offsets.data(), doffsets.data(), (kIds + 1) * 4);
  const auto op = [&]() {
    return backward
               ? backend->EmbeddingBagBackward(
                     EmbeddingBagMode::kSum, dids.Span<int32_t>(kIds),
                     doffsets.Span<int32_t>(kIds + 1), std::nullopt,
                     out.Matrix<float>(kIds, dim),
                     rows.Matrix<float>(kRows, dim))
               : backend->EmbeddingBagForward(
                     EmbeddingBagMode::kSum, rows.Matrix<float>(kRows, dim),
                     dids.Span<int32_t>(kIds), doffsets.Span<int32_t>(kIds + 1),
                     std::nullopt, out.Matrix<float>(kIds, dim));
  };
  const int64_t row_bytes = kIds * dim * 4;
  const double bytes = backward ? 3.0 * row_bytes + kRows * dim * 4.0
                                : 2.0 * row_bytes + kIds * 8.0;
  std::vector<double> op_s, copy_s;
  for (auto _ : state) {
    const double t0 = Now(*backend);
    absl::Status s = op();
    if (s.ok()) s = backend->Synchronize();
    const double t1 = Now(*backend);
    if (s.ok()) s = backend->CopyOnDevice(out.data(), copy.data(), row_bytes);
    if (s.ok()) s = backend->Synchronize();
    const double t2 = Now(*backend);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    op_s.push_back(t1 - t0);
    copy_s.push_back(t2 - t1);
  }
  const double copy_rate = 2.0 * row_bytes / Median(copy_s) / 1e9;
  state.counters["op_us"] = 1e6 * Median(op_s);
  state.counters["GB/s"] = bytes / Median(op_s) / 1e9;
  state.counters["copy_GB/s"] = copy_rate;
  state.counters["of_copy"] = bytes / Median(op_s) / 1e9 / copy_rate;
}

void EmbeddingShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dim", "backward"});
  for (int64_t dim : {16, 64}) {
    for (int64_t backward : {0, 1}) b->Args({dim, backward});
  }
}

void BM_CpuEmbeddingBag(benchmark::State& state) {
  EmbeddingBench(state, false);
}
void BM_CudaEmbeddingBag(benchmark::State& state) {
  EmbeddingBench(state, true);
}
BENCHMARK(BM_CpuEmbeddingBag)->Apply(EmbeddingShapes)->UseRealTime();
BENCHMARK(BM_CudaEmbeddingBag)->Apply(EmbeddingShapes)->UseRealTime();

}  // namespace
}  // namespace ps::kernels

int main(int argc, char** argv) {
  bool blas_check = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--blas_check=false") == 0) blas_check = false;
  }
  // First, with argv as it came: it may restart this process.
  const ps::kernels::BlasStartupResult blas = ps::kernels::RunBlasStartupCheck(
      blas_check,
      ps::kernels::MakeBlasCheckEnv(
          std::getenv(ps::kernels::kBlasCoreTypeVariable),
          std::getenv(ps::kernels::kBlasRestartMarker)),
      argv);
  std::fprintf(stderr, "blas: %s\n", blas.message.c_str());
  benchmark::AddCustomContext("blas_core", blas.core);
  benchmark::AddCustomContext(
      "blas_cpu", ps::kernels::DescribeCpu(ps::kernels::DetectCpuFeatures()));
  // Take our flags out before Google Benchmark sees them.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    constexpr char kFlag[] = "--blas_threads=";
    if (std::strncmp(argv[i], kFlag, sizeof(kFlag) - 1) == 0) {
      ps::kernels::blas_threads = std::atoi(argv[i] + sizeof(kFlag) - 1);
      if (ps::kernels::blas_threads < 1) ps::kernels::blas_threads = 1;
    } else if (std::strncmp(argv[i], "--blas_check=", 13) != 0) {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
