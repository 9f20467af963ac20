// The shard store's data paths in process, without gRPC, by model size:
//   AspPush   an ASP push of every chunk (SGD: the NaN/Inf check fused into
//             the update, read from the payload);
//   BspStep   a BSP step of two workers: each pushes its gradient with its
//             end of step (staged), the second closes the step (sum, apply);
//   BspEarly  the same with chunks_final: the second push completes every
//             chunk and applies it from its payload, then closes the step;
//   Pull      a pull of every chunk, keeping the zero-copy references;
//   Image     a replicated shard's state transfer (shard_image.h): the
//             image the primary takes while the shard waits, and its
//             install on the new backup.
// Bytes/s count the gradient bytes pushed (or the weight bytes pulled).
//
//   bazel run //server/shard:shard_store_benchmark --
//     --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// (one line).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "common/platform/process.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/shard_store.h"

namespace ps::server {
namespace {

// `bytes` of fp32 weights in four tensors (as tools/ps_bench.cc), SGD.
JobSpec Spec(int64_t bytes, ConsistencySpec::Model model, int workers) {
  JobSpec spec;
  spec.set_name("bench");
  spec.set_num_workers(workers);
  for (int t = 0; t < 4; ++t) {
    TensorSpec* ts = spec.mutable_model()->add_tensors();
    ts->set_name(absl::StrCat("layer", t));
    ts->add_shape(bytes / 4 / 4);
    ts->mutable_init()->set_kind(InitializerSpec::ZEROS);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_data()->set_max_steps(1 << 30);
  return spec;
}

// A store with job "bench" (workers 1..`workers`, one shard) and a push of
// `gradient` to every chunk.
struct Bench {
  Bench(int64_t bytes, ConsistencySpec::Model model, int workers)
      : gradient(bytes / 4, 1e-3f) {
    store = *ShardStore::Create({});
    SetupJobRequest r;
    r.set_job_id("bench");
    *r.mutable_spec() = Spec(bytes, model, workers);
    r.set_num_shards(1);
    for (int w = 1; w <= workers; ++w) r.add_worker_ids(w);
    setup = store->SetupJob(r).status();
    push.job_id = "bench";
    if (!setup.ok()) return;
    const std::shared_ptr<const Placement> placement =
        *store->GetPlacement("bench");
    for (const Chunk& c : placement->chunks) {
      PushChunk pc;
      pc.chunk_id = c.chunk_id;
      pc.num_elements = c.num_elements;
      pc.data = absl::string_view(
          reinterpret_cast<const char*>(gradient.data()), c.num_elements * 4);
      push.chunks.push_back(pc);
    }
  }
  // Pushes as `worker` at `step`; false (and the benchmark fails) on error.
  bool Push(benchmark::State& state, int64_t worker, uint64_t seq,
            int64_t step) {
    push.worker_id = worker;
    push.seq = seq;
    push.clock = push.base_version = step;
    absl::StatusOr<PushResult> r = store->Push(push, absl::InfiniteFuture());
    if (!r.ok()) state.SkipWithError(std::string(r.status().message()).c_str());
    return r.ok();
  }

  std::vector<float> gradient;
  std::unique_ptr<ShardStore> store;
  PushArgs push;
  absl::Status setup;
};

// Fails the benchmark if its job could not be set up.
bool SetUp(benchmark::State& state, const Bench& b) {
  if (!b.setup.ok()) {
    state.SkipWithError(std::string(b.setup.message()).c_str());
  }
  return b.setup.ok();
}

void BM_AspPush(benchmark::State& state) {
  Bench b(state.range(0), ConsistencySpec::ASP, 1);
  if (!SetUp(state, b)) return;
  uint64_t seq = 0;
  for (auto _ : state) {
    if (!b.Push(state, 1, ++seq, 0)) break;
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BspSteps(benchmark::State& state, bool chunks_final) {
  Bench b(state.range(0), ConsistencySpec::BSP, 2);
  if (!SetUp(state, b)) return;
  b.push.end_of_step = true;
  b.push.chunks_final = chunks_final;
  int64_t step = 0;
  for (auto _ : state) {
    if (!b.Push(state, 1, step + 1, step) || !b.Push(state, 2, step + 1, step))
      break;
    ++step;
  }
  state.SetBytesProcessed(state.iterations() * 2 * state.range(0));
}

void BM_BspStep(benchmark::State& state) { BspSteps(state, false); }
void BM_BspEarly(benchmark::State& state) { BspSteps(state, true); }

void BM_Pull(benchmark::State& state) {
  Bench b(state.range(0), ConsistencySpec::ASP, 1);
  if (!SetUp(state, b)) return;
  PullArgs args;
  args.job_id = "bench";
  args.worker_id = 1;
  std::vector<WeightsRef> held;
  for (auto _ : state) {
    held.clear();
    absl::StatusOr<PullResult> r =
        b.store->Pull(args, absl::InfiniteFuture(),
                      [&](const Chunk&, absl::Span<const float>,
                          const WeightsRef& ref) { held.push_back(ref); });
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Image(benchmark::State& state) {
  Bench b(state.range(0), ConsistencySpec::ASP, 1);
  if (!SetUp(state, b)) return;
  for (auto _ : state) {
    absl::StatusOr<ShardImage> image = b.store->Image("bench");
    if (!image.ok()) {
      state.SkipWithError(std::string(image.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(image->tables().data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_ImageInstall(benchmark::State& state) {
  Bench from(state.range(0), ConsistencySpec::ASP, 1);
  Bench to(state.range(0), ConsistencySpec::ASP, 1);
  if (!SetUp(state, from) || !SetUp(state, to)) return;
  const absl::StatusOr<ShardImage> image = from.store->Image("bench");
  if (!image.ok()) {
    state.SkipWithError(std::string(image.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    const absl::Status s = to.store->Install("bench", *image);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

BENCHMARK(BM_AspPush)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_BspStep)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_BspEarly)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_Pull)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_Image)->Arg(1 << 20)->Arg(16 << 20)->Arg(256 << 20)->UseRealTime();
BENCHMARK(BM_ImageInstall)
    ->Arg(1 << 20)
    ->Arg(16 << 20)
    ->Arg(256 << 20)
    ->UseRealTime();

}  // namespace
}  // namespace ps::server

// As the daemons: absl's lock-order graph off (it costs on every lock).
int main(int argc, char** argv) {
  ps::DisableMutexDeadlockDetection();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
