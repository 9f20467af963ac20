// How fast the data path is on the real Fashion-MNIST: loading the training
// split, and the prefetch thread's batch rate when the step takes no time
// (so the producer is the bottleneck).
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "worker/data/batch_prefetcher.h"
#include "worker/data/dataset.h"

namespace ps::worker {
namespace {

void BM_LoadFashionMnistTrain(benchmark::State& state) {
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Dataset>> train =
        LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
    if (!train.ok()) {
      state.SkipWithError(std::string(train.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(train->get());
  }
}
BENCHMARK(BM_LoadFashionMnistTrain)->Unit(benchmark::kMillisecond);

void BM_PrefetchTrainBatches(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<Dataset>> loaded =
      LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  if (!loaded.ok()) {
    state.SkipWithError(std::string(loaded.status().message()).c_str());
    return;
  }
  std::shared_ptr<const Dataset> train = *std::move(loaded);
  PrefetcherOptions options;
  options.batch_size = static_cast<int>(state.range(0));
  absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
      BatchPrefetcher::Create(train, options);
  if (!prefetcher.ok()) {
    state.SkipWithError(std::string(prefetcher.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<Batch> batch = (*prefetcher)->Next(absl::Seconds(10));
    if (!batch.ok()) {
      state.SkipWithError(std::string(batch.status().message()).c_str());
      return;
    }
    (*prefetcher)->Recycle(*std::move(batch));
  }
  state.SetItemsProcessed(state.iterations() * options.batch_size);
}
BENCHMARK(BM_PrefetchTrainBatches)->Arg(128)->Arg(512)->UseRealTime();

}  // namespace
}  // namespace ps::worker
