// Deduplication of a batch's sparse keys, as a worker does once per table
// per step: Zipf(1.05) feature ids over 10^7, 4096 to 65536 per batch.
//
//   bazel run -c opt //worker/client:unique_keys_benchmark
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "common/wire/key_placement.h"
#include "tools/data/zipf.h"
#include "worker/client/unique_keys.h"
#include "worker/data/random.h"

namespace ps::client {
namespace {

std::vector<uint64_t> ZipfKeys(int n) {
  auto zipf = data_tools::ZipfSampler::Create(10'000'000, 1.05);
  worker::data::SplitMix64 rng(42);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = static_cast<uint64_t>(zipf->Sample(rng));
  return keys;
}

void BM_Deduplicate(benchmark::State& state) {
  const std::vector<uint64_t> keys = ZipfKeys(static_cast<int>(state.range(0)));
  KeyDeduplicator dedup;
  UniqueKeys u;
  for (auto _ : state) {
    dedup.Deduplicate(keys, &u);
    benchmark::DoNotOptimize(u.keys.data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
  state.counters["unique"] = static_cast<double>(u.keys.size());
}
BENCHMARK(BM_Deduplicate)->RangeMultiplier(4)->Range(4096, 65536);

void BM_DeduplicateByShard(benchmark::State& state) {
  const std::vector<uint64_t> keys = ZipfKeys(static_cast<int>(state.range(0)));
  const int shards = static_cast<int>(state.range(1));
  const uint64_t salt = TableSalt("embedding");
  KeyDeduplicator dedup;
  UniqueKeys u;
  for (auto _ : state) {
    dedup.DeduplicateByShard(keys, salt, shards, &u);
    benchmark::DoNotOptimize(u.keys.data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
}
BENCHMARK(BM_DeduplicateByShard)->ArgsProduct({{4096, 16384, 65536}, {2, 8}});

// Summing a batch's per-position gradients per unique key at dim 16.
void BM_SumRowsByInverse(benchmark::State& state) {
  const std::vector<uint64_t> keys = ZipfKeys(static_cast<int>(state.range(0)));
  constexpr int kDim = 16;
  KeyDeduplicator dedup;
  UniqueKeys u;
  dedup.Deduplicate(keys, &u);
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  std::vector<float> sum(u.keys.size() * kDim);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        SumRowsByInverse(u.inverse, kDim, grads, absl::MakeSpan(sum)));
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
}
BENCHMARK(BM_SumRowsByInverse)->RangeMultiplier(4)->Range(4096, 65536);

}  // namespace
}  // namespace ps::client
