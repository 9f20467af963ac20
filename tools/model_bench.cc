// A layer model's CPU step time and, with --epochs, its accuracy when
// trained in this one process (no parameter servers): the model of a job
// config, its tensors initialised as the shards would, updated by the
// shards' own optimizer code (server/shard/optimizer.h) with the config's
// optimizer, learning-rate schedule and weight decay, evaluated on the test
// set after each epoch. One step here is one BSP step of the job: a batch of
// data.batch_size x num_workers examples (the mean of the workers'
// gradients, as a BSP shard applies it), so the schedule's step counts
// agree. For the CNN's speed against PyTorch (docs/performance/cnn.md) and for
// quick checks of a model and optimizer before a cluster run; cluster runs
// are what the configs' targets name.
//
//   bazel run -c opt //tools:model_bench -- --steps=20
//   bazel run -c opt //tools:model_bench -- --epochs=8 --threads=2
// (--config names the job config; the CNN's BSP config by default).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/spec/config.h"
#include "common/spec/initializer.h"
#include "common/spec/model.h"
#include "kernels/cpu_backend.h"
#include "server/shard/optimizer.h"
#include "worker/data/batch.h"
#include "worker/data/dataset.h"
#include "worker/data/idx_batch_reader.h"
#include "worker/model/layer_model.h"

ABSL_FLAG(std::string, config, "configs/fashion_mnist_cnn_bsp.pbtxt",
          "Job config whose model to run (text format).");
ABSL_FLAG(std::string, data, "",
          "Fashion-MNIST directory; empty: the config's data.path.");
ABSL_FLAG(int, batch, 0,
          "Examples per step; 0: 128 when timing (the batch of "
          "tools/torch_cnn_step.py), data.batch_size x num_workers (one BSP "
          "step) with --epochs.");
ABSL_FLAG(int, steps, 20, "Timed steps (after 3 warm-up steps).");
ABSL_FLAG(int, epochs, 0,
          "Train this many epochs instead of timing steps, evaluating after "
          "each.");
ABSL_FLAG(float, lr, 0, "Base learning rate; 0: the config's.");
ABSL_FLAG(int, threads, 1, "OpenBLAS threads.");

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Examples ids[begin, begin + n) of `d` as a batch.
absl::StatusOr<worker::data::Batch> Gather(const worker::Dataset& d,
                                           const std::vector<int64_t>& ids,
                                           size_t begin, int n) {
  if (n < 0 || begin + n > ids.size()) {
    return absl::InvalidArgumentError("examples outside the id list");
  }
  return worker::data::IdxBatch(d, absl::MakeConstSpan(ids).subspan(begin, n),
                                static_cast<int64_t>(begin));
}

int Run() {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(absl::GetFlag(FLAGS_config));
  if (!spec.ok()) {
    std::fprintf(stderr, "model_bench: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  const std::string dir = absl::GetFlag(FLAGS_data).empty()
                              ? spec->data().path()
                              : absl::GetFlag(FLAGS_data);
  auto train = worker::LoadFashionMnist(dir, worker::Split::kTrain);
  if (!train.ok()) {
    std::fprintf(stderr, "model_bench: %s\n",
                 train.status().ToString().c_str());
    return 1;
  }
  worker::DatasetOptions test_options;
  test_options.stats = (*train)->stats;
  auto test = worker::LoadFashionMnist(dir, worker::Split::kTest, test_options);
  if (!test.ok()) return 1;

  kernels::CpuBackendOptions o;
  o.num_threads = absl::GetFlag(FLAGS_threads);
  auto backend = kernels::CreateCpuBackend(o);
  if (!backend.ok()) return 1;
  auto model = worker::model::CreateLayerModel(
      spec->model(), (*train)->example_size(), backend->get());
  if (!model.ok()) {
    std::fprintf(stderr, "model_bench: %s\n",
                 model.status().ToString().c_str());
    return 1;
  }
  worker::TrainableModel* m = model->get();
  // Initial weights as the shards make them; the optimizer's slots.
  OptimizerSpec opt_spec = spec->optimizer();
  if (absl::GetFlag(FLAGS_lr) > 0) {
    opt_spec.set_learning_rate(absl::GetFlag(FLAGS_lr));
  }
  auto optimizer = server::Optimizer::Create(opt_spec);
  if (!optimizer.ok()) {
    std::fprintf(stderr, "model_bench: %s\n",
                 optimizer.status().ToString().c_str());
    return 2;
  }
  std::vector<server::OptimizerSlots> slots(m->num_parameters());
  for (int i = 0; i < m->num_parameters(); ++i) {
    const TensorSpec& t = spec->model().tensors(i);
    std::vector<float> w(NumElements(t));
    if (!InitializeRange(t, spec->seed() + i, 0, absl::MakeSpan(w)).ok() ||
        !m->SetParameterRange(i, 0, w).ok()) {
      return 1;
    }
    (*optimizer)->InitSlots(m->parameters()[i].size, &slots[i]);
  }
  int64_t global_step = 0;
  // The CPU backend's buffers are host memory: the optimizer updates them
  // in place.
  auto step = [&](const absl::StatusOr<worker::data::Batch>& b)
      -> absl::StatusOr<float> {
    if (!b.ok()) return b.status();
    absl::StatusOr<float> loss = m->TrainStep(*b, {});
    if (!loss.ok()) return loss;
    const float lr = (*optimizer)->LearningRate(global_step++);
    for (int i = 0; i < m->num_parameters(); ++i) {
      kernels::DeviceSpan<const float> g = m->gradient(i);
      kernels::DeviceSpan<float> w = m->parameter(i);
      (*optimizer)
          ->Apply(lr, 1.0f, absl::MakeConstSpan(g.data, g.size),
                  absl::MakeSpan(w.data, w.size), &slots[i]);
    }
    return loss;
  };

  const int worker_batch =
      spec->data().batch_size() > 0 ? spec->data().batch_size() : 128;
  const int batch = absl::GetFlag(FLAGS_batch) > 0 ? absl::GetFlag(FLAGS_batch)
                    : absl::GetFlag(FLAGS_epochs) == 0
                        ? 128
                        : worker_batch * std::max(1, spec->num_workers());
  std::vector<int64_t> ids((*train)->num_examples);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(spec->data().shuffle_seed());
  if (absl::GetFlag(FLAGS_epochs) == 0) {
    const int steps = absl::GetFlag(FLAGS_steps);
    std::vector<absl::StatusOr<worker::data::Batch>> batches;
    for (int i = 0; i < 4; ++i) {
      batches.push_back(Gather(**train, ids, i * batch, batch));
    }
    for (int i = 0; i < 3; ++i) {
      if (!step(batches[i % 4]).ok()) return 1;
    }
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      const Clock::time_point t0 = Clock::now();
      absl::StatusOr<float> loss = step(batches[i % 4]);
      if (!loss.ok()) {
        std::fprintf(stderr, "model_bench: %s\n",
                     loss.status().ToString().c_str());
        return 1;
      }
      ms.push_back(1000 * Seconds(t0, Clock::now()));
    }
    std::sort(ms.begin(), ms.end());
    std::printf(
        "model_bench: %s, batch %d, %d BLAS thread(s): step (train + "
        "optimizer) median %.1f ms, min %.1f, max %.1f over %d steps\n",
        spec->name().c_str(), batch, absl::GetFlag(FLAGS_threads),
        ms[ms.size() / 2], ms.front(), ms.back(), steps);
    return 0;
  }
  const Clock::time_point start = Clock::now();
  for (int epoch = 0; epoch < absl::GetFlag(FLAGS_epochs); ++epoch) {
    std::shuffle(ids.begin(), ids.end(), rng);
    double loss_sum = 0;
    int n = 0;
    for (size_t b = 0; b + batch <= ids.size(); b += batch, ++n) {
      absl::StatusOr<float> loss = step(Gather(**train, ids, b, batch));
      if (!loss.ok()) return 1;
      loss_sum += *loss;
    }
    int64_t correct = 0;
    std::vector<int64_t> test_ids((*test)->num_examples);
    std::iota(test_ids.begin(), test_ids.end(), 0);
    for (int64_t b = 0; b < (*test)->num_examples; b += 1000) {
      absl::StatusOr<worker::data::Batch> batch = Gather(
          **test, test_ids, static_cast<size_t>(b),
          static_cast<int>(std::min<int64_t>(1000, (*test)->num_examples - b)));
      if (!batch.ok()) return 1;
      auto e = m->Evaluate(*batch);
      if (!e.ok()) return 1;
      correct += e->correct;
    }
    std::printf(
        "model_bench: epoch %d (step %lld, lr %.5f) train loss %.4f test "
        "accuracy %.4f (%.0f s)\n",
        epoch + 1, static_cast<long long>(global_step),
        (*optimizer)->LearningRate(global_step), loss_sum / n,
        static_cast<double>(correct) / (*test)->num_examples,
        Seconds(start, Clock::now()));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Step time and single-process accuracy of a job config's layer model.");
  absl::ParseCommandLine(argc, argv);
  return ps::Run();
}
