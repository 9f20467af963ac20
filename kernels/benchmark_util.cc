#include "kernels/benchmark_util.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/blas_check.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"

namespace ps::kernels::bench {

int blas_threads = 1;
int64_t batch_size = 128;

int BenchmarkMain(int argc, char** argv) {
  bool blas_check = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--blas_check=false") == 0) blas_check = false;
  }
  // First, with argv as it came: it may restart this process.
  const BlasStartupResult blas =
      RunBlasStartupCheck(blas_check,
                          MakeBlasCheckEnv(std::getenv(kBlasCoreTypeVariable),
                                           std::getenv(kBlasRestartMarker)),
                          argv);
  std::fprintf(stderr, "blas: %s\n", blas.message.c_str());
  benchmark::AddCustomContext("blas_core", blas.core);
  benchmark::AddCustomContext("blas_cpu", DescribeCpu(DetectCpuFeatures()));
  // Take our flags out before Google Benchmark sees them.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    constexpr char kFlag[] = "--blas_threads=";
    constexpr char kBatchFlag[] = "--batch=";
    if (std::strncmp(argv[i], kFlag, sizeof(kFlag) - 1) == 0) {
      blas_threads = std::atoi(argv[i] + sizeof(kFlag) - 1);
      if (blas_threads < 1) blas_threads = 1;
    } else if (std::strncmp(argv[i], kBatchFlag, sizeof(kBatchFlag) - 1) == 0) {
      batch_size = std::atoll(argv[i] + sizeof(kBatchFlag) - 1);
      if (batch_size < 1) {
        std::fprintf(stderr, "--batch: expected a positive number, got %s\n",
                     argv[i] + sizeof(kBatchFlag) - 1);
        return 2;
      }
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

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

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

}  // namespace ps::kernels::bench
