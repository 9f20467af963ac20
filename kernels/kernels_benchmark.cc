// GEMM through the op API next to OpenBLAS called directly; the layer ops at
// the shapes of the Fashion-MNIST CNN (conv_benchmark.cc) and of embedding
// models (embedding_bag_benchmark.cc) are cases of the same binary. (The
// MLP's training step is worker/model/mlp_benchmark.cc.)
//
//   bazel run -c opt //kernels:kernels_benchmark -- --blas_threads=1
//
// --blas_threads=N (default 1) bounds OpenBLAS's threads; --batch=N (default
// 128) is the CNN's batch (its layers and its step); --blas_check=false
// keeps OpenBLAS's own choice of kernels (see kernels/blas_check.h; by
// default a fallback to generic kernels is corrected by a restart); all
// other flags go to Google Benchmark. The header names the BLAS core
// (blas_core) and the CPU's features (blas_cpu). CUDA benchmarks report an
// error where no GPU works.

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/benchmark_util.h"

namespace ps::kernels::bench {
namespace {

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

// cuBLAS sgemm (fp32, TF32 off) on square n x n x n shapes, to set
// against a GPU's published fp32 peak (tools/gpu_check.sh). Launches are
// asynchronous: each iteration runs the GEMM `reps` times and then
// synchronises, timed by the wall clock, so all of the GPU's work is inside
// the measurement and one synchronisation's latency is small against it.
// Counters: the median iteration's GFLOP/s.
void BM_CudaSgemmSquare(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::unique_ptr<Backend> backend = MakeBackend(state, /*cuda=*/true);
  if (backend == nullptr) return;
  DeviceBuffer a = Upload(*backend, RandomVector(n * n, 1));
  DeviceBuffer b = Upload(*backend, RandomVector(n * n, 2));
  DeviceBuffer c = *backend->AllocateArray<float>(n * n);
  // About 2^32 multiply-adds per iteration at least.
  const int64_t reps = std::max<int64_t>(1, (int64_t{1} << 32) / (n * n * n));
  const auto gemm = [&] {
    return backend->Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                         a.Matrix<float>(n, n), b.Matrix<float>(n, n), 0.0f,
                         c.Matrix<float>(n, n));
  };
  absl::Status s = gemm();  // cuBLAS's first call picks its kernel
  if (s.ok()) s = backend->Synchronize();
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int64_t r = 0; s.ok() && r < reps; ++r) s = gemm();
    if (s.ok()) s = backend->Synchronize();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok()) break;
    state.SetIterationTime(t);
    seconds.push_back(t);
  }
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  state.counters["GFLOP/s"] = 2.0 * n * n * n * reps / Median(seconds) / 1e9;
  state.counters["reps"] = static_cast<double>(reps);
}

BENCHMARK(BM_CudaSgemmSquare)
    ->ArgName("n")
    ->RangeMultiplier(2)
    ->Range(1024, 8192)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

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

}  // namespace
}  // namespace ps::kernels::bench

int main(int argc, char** argv) {
  return ps::kernels::bench::BenchmarkMain(argc, argv);
}
