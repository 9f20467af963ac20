// Sparse tables in process, through the shard store (no gRPC):
//   memory   the shard's resident memory per row after 10^6 rows are created
//            (by pulls), next to the bound of 1.3 x (row + optimizer
//            slots) + 48 bytes and the table's own count (SparseTableStatus
//            bytes);
//   push     ASP pushes of 4096 unique keys (drawn Zipf(1.05) from 10^7) x
//            dim, rows/s;
//   pull     pulls of the same batches, rows/s.
// Both with the benchmark thread's CPU time per row (the figure to compare
// on a shared machine). For dim 16 and 64, SGD and Adam (two slots).
//   --spread: instead, SGD at dims 16 and 64 on a table of 4 x 10^6 rows
//            whose push and pull batches are 4096 keys drawn uniformly from
//            those rows (every visit a random access over the whole table,
//            as the end-to-end benchmark's growing Zipf tail makes them),
//            about 1.3 GB at dim 64.
//   bsp      BSP steps of 4 workers, each pushing its own batch (end of
//            step); the step closes at the last push and applies every
//            key's sum: the wall time per step and the close's own, with
//            the shard's default apply threads.
//
//   bazel run -c opt //server/shard:sparse_table_benchmark [-- --spread]
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/wire/payload_codec.h"
#include "proto/config.pb.h"
#include "server/shard/shard_store.h"

ABSL_FLAG(bool, spread, false,
          "SGD on a table of 4 x 10^6 rows with batches drawn uniformly from "
          "its rows, instead of the default cases.");

namespace ps::server {
namespace {

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// This thread's CPU time, in ns.
int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

JobSpec Spec(int dim, OptimizerSpec::Kind kind,
             ConsistencySpec::Model model = ConsistencySpec::ASP,
             int workers = 1) {
  JobSpec spec;
  spec.set_name("bench");
  spec.set_num_workers(workers);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  TensorSpec* t = spec.mutable_model()->add_tensors();
  t->set_name("bias");
  t->add_shape(16);
  SparseTableSpec* table = spec.mutable_model()->add_sparse_tables();
  table->set_name("emb");
  table->set_dim(dim);
  table->mutable_optimizer()->set_kind(kind);
  table->mutable_optimizer()->set_learning_rate(0.01f);
  return spec;
}

// Batches of `batch` unique keys, Zipf(s) over [0, n) by rejection-free
// inverse CDF on a precomputed table of the head and a power-law tail.
std::vector<std::vector<uint64_t>> ZipfBatches(int batches, int batch,
                                               uint64_t n, double s) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // Inverse of the continuous approximation of the Zipf CDF.
  const double a = 1.0 - s;
  const double hn = (std::pow(static_cast<double>(n), a) - 1.0) / a;
  std::vector<std::vector<uint64_t>> out(batches);
  for (auto& keys : out) {
    absl::flat_hash_set<uint64_t> seen;
    while (static_cast<int>(keys.size()) < batch) {
      const double x = std::pow(1.0 + a * hn * u(rng), 1.0 / a);
      const uint64_t k = std::min<uint64_t>(n - 1, static_cast<uint64_t>(x));
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  return out;
}

PullArgs PullOf(const std::vector<uint64_t>& keys) {
  PullArgs args;
  args.job_id = "bench";
  args.worker_id = 1;
  args.sparse_only = true;
  SparseRowsView v;
  v.table = 0;
  v.num_rows = static_cast<int64_t>(keys.size());
  v.keys = keys;
  args.sparse.push_back(v);
  return args;
}

PushArgs PushOf(int64_t worker, uint64_t seq, const std::vector<uint64_t>& keys,
                int dim, absl::string_view grads) {
  PushArgs args;
  args.job_id = "bench";
  args.worker_id = worker;
  args.seq = seq;
  SparseRowsView v;
  v.table = 0;
  v.dtype = FLOAT32;
  v.num_rows = static_cast<int64_t>(keys.size());
  v.dim = dim;
  v.keys = keys;
  v.rows = grads.substr(0, keys.size() * dim * sizeof(float));
  args.sparse.push_back(v);
  return args;
}

// BSP steps of kWorkers workers over Zipf batches: ms per step, and ms of
// the closing push (the step's apply).
void RunBsp(int dim, OptimizerSpec::Kind kind,
            const std::vector<std::vector<uint64_t>>& batches) {
  constexpr int kWorkers = 4;
  ShardStoreOptions options;
  options.apply_threads = DefaultApplyThreads();
  auto store = *ShardStore::Create(options);
  SetupJobRequest setup;
  setup.set_job_id("bench");
  *setup.mutable_spec() = Spec(dim, kind, ConsistencySpec::BSP, kWorkers);
  setup.set_num_shards(1);
  for (int w = 1; w <= kWorkers; ++w) setup.add_worker_ids(w);
  if (!store->SetupJob(setup).ok()) std::abort();
  std::vector<float> grads(4096 * dim, 0.001f);
  const absl::string_view grad_bytes(reinterpret_cast<char*>(grads.data()),
                                     grads.size() * sizeof(float));
  int64_t steps = 0;
  absl::Duration close;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(2)) {
    for (int w = 1; w <= kWorkers; ++w) {
      PushArgs args =
          PushOf(w, steps + 1, batches[(steps * kWorkers + w) % batches.size()],
                 dim, grad_bytes);
      args.clock = steps;
      args.base_version = steps;
      args.end_of_step = true;
      const absl::Time t = absl::Now();
      if (!store->Push(args, absl::InfiniteFuture()).ok()) std::abort();
      if (w == kWorkers) close += absl::Now() - t;
    }
    ++steps;
  }
  std::printf(
      "dim %3d %-4s  BSP, %d workers, %d apply threads: %6.2f ms a step, the "
      "close %6.2f ms\n",
      dim, kind == OptimizerSpec::ADAM ? "Adam" : "SGD", kWorkers,
      options.apply_threads,
      absl::ToDoubleMilliseconds(absl::Now() - start) / steps,
      absl::ToDoubleMilliseconds(close) / steps);
}

// Batches of `batch` distinct keys drawn uniformly from the first `rows`
// keys of Run's table (key j is j x the golden ratio's 2^64).
std::vector<std::vector<uint64_t>> SpreadBatches(int batches, int batch,
                                                 int64_t rows) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint64_t>> out(batches);
  for (auto& keys : out) {
    absl::flat_hash_set<uint64_t> seen;
    while (static_cast<int>(keys.size()) < batch) {
      const uint64_t k =
          (rng() % static_cast<uint64_t>(rows)) * 0x9E3779B97F4A7C15ull;
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  return out;
}

// `rows` rows created by pulls, then push and pull rows/s: on Zipf batches,
// or with `spread` on batches drawn uniformly from those rows.
void Run(int dim, OptimizerSpec::Kind kind, int64_t rows_created, bool spread) {
  ShardStoreOptions options;
  auto store = *ShardStore::Create(options);
  SetupJobRequest setup;
  setup.set_job_id("bench");
  *setup.mutable_spec() = Spec(dim, kind);
  setup.set_num_shards(1);
  setup.add_worker_ids(1);
  if (!store->SetupJob(setup).ok()) std::abort();
  std::string out;
  auto sink_fn = [&](size_t, DType d, int32_t row_dim, int64_t n) {
    out.resize(n * row_dim * DTypeSize(d));
    return out.data();
  };
  const SparseSink sink = sink_fn;
  auto no_chunks = [](const Chunk&, absl::Span<const float>,
                      const WeightsRef&) {};

  // Memory: the rows created by pulls of 4096 keys.
  const int64_t kRows = rows_created;
  const int64_t rss_before = RssBytes();
  std::vector<uint64_t> keys;
  for (int64_t k = 0; k < kRows; k += 4096) {
    keys.clear();
    for (int64_t j = k; j < std::min(kRows, k + 4096); ++j) {
      keys.push_back(static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ull);
    }
    if (!store
             ->PullWithRows(PullOf(keys), absl::InfiniteFuture(), no_chunks,
                            &sink)
             .ok()) {
      std::abort();
    }
  }
  const double per_row = static_cast<double>(RssBytes() - rss_before) / kRows;
  const int slots = kind == OptimizerSpec::ADAM ? 2 : 0;
  const double row_and_slots = 4.0 * dim * (1 + slots);
  const auto status = *store->GetShardStatus("bench");
  const double counted =
      static_cast<double>(status.sparse_tables(0).bytes()) / kRows;

  // Push and pull rows/s on batches of 4096 keys.
  const auto batches = spread ? SpreadBatches(64, 4096, kRows)
                              : ZipfBatches(64, 4096, 10000000, 1.05);
  std::vector<float> grads(4096 * dim, 0.001f);
  const absl::string_view grad_bytes(reinterpret_cast<char*>(grads.data()),
                                     grads.size() * sizeof(float));
  uint64_t seq = 1;
  int64_t rows = 0;
  absl::Time start = absl::Now();
  int64_t cpu = ThreadCpuNs();
  while (absl::Now() - start < absl::Seconds(2)) {
    for (const auto& b : batches) {
      PushArgs args;
      args.job_id = "bench";
      args.worker_id = 1;
      args.seq = seq++;
      SparseRowsView v;
      v.table = 0;
      v.dtype = FLOAT32;
      v.num_rows = static_cast<int64_t>(b.size());
      v.dim = dim;
      v.keys = b;
      v.rows = grad_bytes;
      args.sparse.push_back(v);
      if (!store->Push(args, absl::InfiniteFuture()).ok()) std::abort();
      rows += static_cast<int64_t>(b.size());
    }
  }
  const double push_rate = rows / absl::ToDoubleSeconds(absl::Now() - start);
  const double push_ns = static_cast<double>(ThreadCpuNs() - cpu) / rows;
  rows = 0;
  start = absl::Now();
  cpu = ThreadCpuNs();
  while (absl::Now() - start < absl::Seconds(2)) {
    for (const auto& b : batches) {
      if (!store
               ->PullWithRows(PullOf(b), absl::InfiniteFuture(), no_chunks,
                              &sink)
               .ok()) {
        std::abort();
      }
      rows += static_cast<int64_t>(b.size());
    }
  }
  const double pull_rate = rows / absl::ToDoubleSeconds(absl::Now() - start);
  const double pull_ns = static_cast<double>(ThreadCpuNs() - cpu) / rows;
  std::printf(
      "dim %3d %-4s  memory/row %6.1f B (RSS; table's count %6.1f B; bound "
      "1.3 x %4.0f + 48 = %6.1f B)  push %5.2f M rows/s (%5.1f ns CPU a row)  "
      "pull %5.2f M rows/s (%5.1f ns CPU a row)\n",
      dim, kind == OptimizerSpec::ADAM ? "Adam" : "SGD", per_row, counted,
      row_and_slots, 1.3 * row_and_slots + 48, push_rate / 1e6, push_ns,
      pull_rate / 1e6, pull_ns);
}

}  // namespace
}  // namespace ps::server

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_spread)) {
    for (int dim : {16, 64}) {
      ps::server::Run(dim, ps::OptimizerSpec::SGD, 4000000, /*spread=*/true);
    }
    return 0;
  }
  for (int dim : {16, 64}) {
    for (auto kind : {ps::OptimizerSpec::SGD, ps::OptimizerSpec::ADAM}) {
      ps::server::Run(dim, kind, 1000000, /*spread=*/false);
    }
  }
  // After the memory figures: what BSP frees stays in the heap.
  const auto batches = ps::server::ZipfBatches(64, 4096, 10000000, 1.05);
  for (int dim : {16, 64}) {
    ps::server::RunBsp(dim, ps::OptimizerSpec::SGD, batches);
  }
  return 0;
}
