// Embedding bags at the shapes of embedding models (4096 unique rows of dim
// 16 or 64, 26 fields), each timed next to a device copy of the same bytes
// on the same backend in the same iteration. Cases of kernels_benchmark
// (kernels_benchmark.cc has main and the flags).

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/benchmark_util.h"

namespace ps::kernels::bench {
namespace {

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
  const auto copy_rows = [&]() {
    return backend->CopyOnDevice(out.data(), copy.data(), row_bytes);
  };
  OpTimes times;
  for (auto _ : state) {
    if (!TimeOpAndCeiling(state, *backend, op, copy_rows, times)) return;
  }
  const std::vector<double>& op_s = times.op_s;
  const std::vector<double>& copy_s = times.ceiling_s;
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
}  // namespace ps::kernels::bench
