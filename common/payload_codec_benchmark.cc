// fp16 / bf16 payload conversion: NarrowFromFloat and WidenToFloat over one
// message worth of elements. Run with
//   bazel run //common:payload_codec_benchmark
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/payload_codec.h"

namespace ps {
namespace {

constexpr int64_t kElements = 1 << 20;

enum class Range {
  kNormal,  // every value a normal half
  kMixed,   // magnitudes 2^-21..2^3: a fifth below 2^-14 (subnormal halves)
};

// Gradient-like values of random sign and magnitude.
std::vector<float> Values(Range range) {
  std::vector<float> v(kElements);
  const int exponents = range == Range::kNormal ? 12 : 24;
  const int lowest = range == Range::kNormal ? -12 : -20;
  uint32_t state = 12345;
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) / 16777216.0f;  // [0,1)
    x = (unit - 0.5f) *
        std::ldexp(1.0f, static_cast<int>(state % exponents) + lowest);
  }
  return v;
}

void BM_Narrow(benchmark::State& state, DType dtype, Range range) {
  const std::vector<float> src = Values(range);
  std::string dst(src.size() * DTypeSize(dtype), '\0');
  for (auto _ : state) {
    NarrowFromFloat(dtype, src, dst.data());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_Widen(benchmark::State& state, DType dtype, Range range) {
  const std::vector<float> values = Values(range);
  std::string wire(values.size() * DTypeSize(dtype), '\0');
  NarrowFromFloat(dtype, values, wire.data());
  std::vector<float> dst(values.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        WidenToFloat(dtype, wire, absl::MakeSpan(dst)).ok());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

BENCHMARK_CAPTURE(BM_Narrow, fp16_normal, FLOAT16, Range::kNormal);
BENCHMARK_CAPTURE(BM_Narrow, fp16_mixed, FLOAT16, Range::kMixed);
BENCHMARK_CAPTURE(BM_Narrow, bf16_mixed, BFLOAT16, Range::kMixed);
BENCHMARK_CAPTURE(BM_Widen, fp16_normal, FLOAT16, Range::kNormal);
BENCHMARK_CAPTURE(BM_Widen, fp16_mixed, FLOAT16, Range::kMixed);
BENCHMARK_CAPTURE(BM_Widen, bf16_mixed, BFLOAT16, Range::kMixed);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
