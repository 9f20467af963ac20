// What the benchmarks over the op API share (kernels_benchmark's files and
// worker/model's mlp_benchmark): their main(), the BLAS thread bound set
// from --blas_threads, random operands, backends, uploads, medians and the
// clock the layer benchmarks time with.
#ifndef PS_KERNELS_BENCHMARK_UTIL_H_
#define PS_KERNELS_BENCHMARK_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "benchmark/benchmark.h"
#include "kernels/backend.h"

namespace ps::kernels::bench {

// OpenBLAS's threads and the CPU backend's, from --blas_threads
// (BenchmarkMain).
extern int blas_threads;

// The batch of the MLP step, the CNN step and the CNN's layers, from
// --batch (BenchmarkMain; default 128).
extern int64_t batch_size;

// A benchmark binary's main(): the BLAS start-up check (kernels/
// blas_check.h; --blas_check=false keeps OpenBLAS's own choice, otherwise a
// fallback to generic kernels is corrected by a restart of the process),
// --blas_threads=N (default 1), --batch=N (default 128), the BLAS core
// (blas_core) and the CPU's features (blas_cpu) in the header, then Google
// Benchmark with the other flags. Returns the process's exit code.
int BenchmarkMain(int argc, char** argv);

// n floats uniform in [-1, 1), the same for the same seed.
std::vector<float> RandomVector(int64_t n, uint32_t seed);

// A GFLOP/s rate counter for `state`'s iterations of an m x n x k GEMM.
void SetGemmCounters(benchmark::State& state, int64_t m, int64_t n, int64_t k);

// The CUDA or the CPU backend (blas_threads threads); null after
// state.SkipWithError where it cannot be created.
std::unique_ptr<Backend> MakeBackend(benchmark::State& state, bool cuda);

// `host` copied into a new buffer on `backend`.
DeviceBuffer Upload(Backend& backend, const std::vector<float>& host);

double Median(std::vector<double> v);

// Seconds on the clock the layer benchmarks time with: on a CPU backend with
// one BLAS thread, the calling thread's CPU time (everything runs on it), so
// that builds sharing the machine disturb the figures less; otherwise wall
// time.
double Now(const Backend& backend);

// The seconds of an op and of its ceiling (the same work at the best rate
// the backend reaches, on the same backend in the same iteration).
struct OpTimes {
  std::vector<double> op_s, ceiling_s;
};

// One iteration: `op`, then `ceiling`, each followed by a Synchronize and
// timed with Now; appends both to `times`. False, after
// state.SkipWithError, where any of them fails.
template <typename Op, typename Ceiling>
bool TimeOpAndCeiling(benchmark::State& state, Backend& backend, Op&& op,
                      Ceiling&& ceiling, OpTimes& times) {
  const double t0 = Now(backend);
  absl::Status s = op();
  if (s.ok()) s = backend.Synchronize();
  const double t1 = Now(backend);
  if (s.ok()) s = ceiling();
  if (s.ok()) s = backend.Synchronize();
  const double t2 = Now(backend);
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return false;
  }
  times.op_s.push_back(t1 - t0);
  times.ceiling_s.push_back(t2 - t1);
  return true;
}

}  // namespace ps::kernels::bench

#endif  // PS_KERNELS_BENCHMARK_UTIL_H_
