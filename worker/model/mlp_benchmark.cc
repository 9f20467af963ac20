// One training step of the 784-256-128-10 MLP at batch 128 (--batch; the
// Fashion-MNIST MLP configs' model, the MlpSpec shorthand through the layer
// model of layer_model.h, as a worker trains it), and the same step with the
// first layer's weight in the step pipeline's two row blocks in alternation
// with the unsplit one, so that both see the same machine load.
//
//   bazel build //worker/model:mlp_benchmark
//   bazel-bin/worker/model/mlp_benchmark --blas_threads=1
//
// Flags as kernels_benchmark's (kernels/benchmark_util.h BenchmarkMain):
// --blas_threads=N, --batch=N, --blas_check=false, the rest to Google
// Benchmark. CUDA cases report an error where no GPU works.

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/benchmark_util.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"
#include "worker/model/layer_model.h"

namespace ps::worker::model {
namespace {

using kernels::Backend;
using kernels::DeviceBuffer;
using kernels::Transpose;
using kernels::bench::batch_size;
using kernels::bench::MakeBackend;
using kernels::bench::Median;
using kernels::bench::RandomVector;
using kernels::bench::Upload;

const std::vector<int64_t> kLayers = {784, 256, 128, 10};

// The GEMMs one MLP step issues, with the same shapes, through the backend.
absl::Status StepGemms(Backend& backend, const std::vector<DeviceBuffer>& acts,
                       const std::vector<DeviceBuffer>& weights,
                       const DeviceBuffer& delta, const DeviceBuffer& out) {
  const int layers = static_cast<int>(kLayers.size()) - 1;
  for (int i = 0; i < layers; ++i) {  // forward
    absl::Status s =
        backend.Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                     acts[i].Matrix<float>(batch_size, kLayers[i]),
                     weights[i].Matrix<float>(kLayers[i], kLayers[i + 1]), 0.0f,
                     acts[i + 1].Matrix<float>(batch_size, kLayers[i + 1]));
    if (!s.ok()) return s;
  }
  for (int i = layers - 1; i >= 0; --i) {  // backward
    absl::Status s =
        backend.Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                     acts[i].Matrix<float>(batch_size, kLayers[i]),
                     delta.Matrix<float>(batch_size, kLayers[i + 1]), 0.0f,
                     out.Matrix<float>(kLayers[i], kLayers[i + 1]));
    if (!s.ok()) return s;
    if (i == 0) break;
    s = backend.Gemm(Transpose::kNo, Transpose::kYes, 1.0f,
                     delta.Matrix<float>(batch_size, kLayers[i + 1]),
                     weights[i].Matrix<float>(kLayers[i], kLayers[i + 1]), 0.0f,
                     out.Matrix<float>(batch_size, kLayers[i]));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// The MLP on `backend`, its weights He-uniform from `seed` (as the
// parameter servers initialise the shorthand), biases zero; null after
// SkipWithError.
std::unique_ptr<TrainableModel> MakeMlp(benchmark::State& state,
                                        Backend* backend, uint64_t seed) {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(kLayers[0]);
  spec.mutable_mlp()->add_hidden(kLayers[1]);
  spec.mutable_mlp()->add_hidden(kLayers[2]);
  spec.mutable_mlp()->set_num_classes(kLayers[3]);
  absl::StatusOr<std::unique_ptr<TrainableModel>> model =
      CreateLayerModel(spec, kLayers[0], backend);
  absl::Status s = model.status();
  for (int i = 0; s.ok() && i < (*model)->num_parameters(); ++i) {
    const ParameterInfo& p = (*model)->parameters()[i];
    s = p.shape.size() == 2
            ? backend->Initialize(kernels::Initializer::kHeUniform, seed + i,
                                  p.shape[0], p.shape[1],
                                  (*model)->parameter(i))
            : backend->Fill(0.0f, (*model)->parameter(i));
  }
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return nullptr;
  }
  return *std::move(model);
}

// A batch of batch_size random examples, labels 0..9 in turn.
data::Batch MakeBatch() {
  data::Batch batch;
  batch.size = static_cast<int>(batch_size);
  batch.dense_dim = static_cast<int>(kLayers[0]);
  batch.dense = RandomVector(batch_size * kLayers[0], 3);
  batch.label_kind = data::LabelKind::kClass;
  for (int64_t i = 0; i < batch_size; ++i) {
    batch.classes.push_back(static_cast<int32_t>(i % 10));
  }
  return batch;
}

void MlpStep(benchmark::State& state, bool cuda) {
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  std::unique_ptr<TrainableModel> mlp = MakeMlp(state, backend.get(), 1);
  if (mlp == nullptr) return;
  const data::Batch batch = MakeBatch();
  for (auto _ : state) {
    absl::StatusOr<float> loss = mlp->TrainStep(batch, {});
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
    acts.push_back(Upload(*backend, RandomVector(batch_size * size, 4)));
  }
  for (size_t i = 0; i + 1 < kLayers.size(); ++i) {
    weights.push_back(
        Upload(*backend, RandomVector(kLayers[i] * kLayers[i + 1], 5)));
  }
  DeviceBuffer delta = Upload(*backend, RandomVector(batch_size * 256, 6));
  DeviceBuffer out =
      *backend->AllocateArray<float>(std::max<int64_t>(784, batch_size) * 256);
  const int reps = static_cast<int>(std::min<int64_t>(state.iterations(), 500));
  using Clock = std::chrono::steady_clock;
  std::vector<double> step_s, gemm_s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    (void)mlp->TrainStep(batch, {});
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

// The step with fc0/weight in row blocks at row 392 (the step pipeline's
// two blocks of 0.4 MB for this model behind one shard of the default
// chunk size) against the unsplit step: each iteration runs one of each on
// the same batch and weights, timed with kernels::bench::Now (CPU time with
// one BLAS thread); counters are the medians and their ratio.
void BM_CpuMlpSplitVsWhole(benchmark::State& state) {
  std::unique_ptr<Backend> backend = MakeBackend(state, /*cuda=*/false);
  if (backend == nullptr) return;
  std::unique_ptr<TrainableModel> whole = MakeMlp(state, backend.get(), 1);
  if (whole == nullptr) return;
  std::unique_ptr<TrainableModel> split = MakeMlp(state, backend.get(), 1);
  if (split == nullptr) return;
  const data::Batch batch = MakeBatch();
  ModelStepHooks blocks;
  blocks.row_splits = {{kLayers[0] / 2}};
  std::vector<double> whole_s, split_s;
  for (auto _ : state) {
    const double t0 = kernels::bench::Now(*backend);
    absl::StatusOr<float> a = whole->TrainStep(batch, {});
    const double t1 = kernels::bench::Now(*backend);
    absl::StatusOr<float> b = split->TrainStep(batch, blocks);
    const double t2 = kernels::bench::Now(*backend);
    if (!a.ok() || !b.ok()) {
      state.SkipWithError("a training step failed");
      return;
    }
    whole_s.push_back(t1 - t0);
    split_s.push_back(t2 - t1);
  }
  const double w = Median(whole_s), sp = Median(split_s);
  state.counters["whole_ms_median"] = 1e3 * w;
  state.counters["split_ms_median"] = 1e3 * sp;
  state.counters["split/whole"] = sp / w;
}

BENCHMARK(BM_CpuMlpSplitVsWhole)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ps::worker::model

int main(int argc, char** argv) {
  return ps::kernels::bench::BenchmarkMain(argc, argv);
}
