#include "tools/ps_bench_sparse.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "tools/worker_processes.h"
#include "worker/client/parameter_client.h"
#include "worker/client/unique_keys.h"

namespace ps::bench {
namespace {

constexpr char kTable[] = "emb";
constexpr absl::Duration kStepTimeout = absl::Seconds(60);

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One worker's state: its client and the buffers of three batches (the
// step's, the next one's, whose rows the step pulls, and the one after,
// drawn while the step's calls are in flight), rotated every step.
class SparseWorker {
 public:
  SparseWorker(const SparseBenchOptions& o, ZipfKeyBatches keys,
               std::unique_ptr<client::ParameterClient> client)
      : o_(o), keys_(std::move(keys)), client_(std::move(client)) {
    salt_ = TableSalt(kTable);
    NextBatch(&now_);
    NextBatch(&next_);
    grads_.assign(static_cast<size_t>(o.batch) * o.dim, 1e-3f);
  }

  absl::Status Step(int64_t clock) {
    next_rows_.resize(next_.keys.size() * o_.dim);
    std::vector<client::SparsePush> push = {
        {0, now_.keys,
         absl::MakeConstSpan(grads_.data(), now_.keys.size() * o_.dim)}};
    std::vector<client::SparsePull> pull = {
        {0, next_.keys, absl::MakeSpan(next_rows_)}};
    // Base version: the last PullAll's (none: 0). ASP versions count ends
    // of steps, which these workers do not send, so the clock would be
    // ahead of the shard's version.
    constexpr int64_t kBase = client::ParameterClient::kPulledVersion;
    // The batch after next is drawn while the step's first call is in
    // flight, as a worker's data loader runs ahead of its step (the key
    // stream's generator is the benchmark's, not the parameter server's,
    // work; ps_lite_sparse_bench draws at the same point).
    if (o_.fused) {
      client::ParameterClient::StepTickets t = client_->PushRowsAndPull(
          std::move(push), clock, kBase, clock + 1, 0, std::move(pull));
      NextBatch(&after_);
      absl::Status s = t.end.Wait(kStepTimeout);
      absl::Status p = t.pull.Wait(kStepTimeout);
      if (!s.ok()) return s;
      if (!p.ok()) return p;
    } else {
      client::Ticket pushed = client_->PushRows(std::move(push), clock, kBase);
      NextBatch(&after_);
      absl::Status s = pushed.Wait(kStepTimeout);
      if (!s.ok()) return s;
      s = client_->PullRows(clock + 1, 0, std::move(pull)).Wait(kStepTimeout);
      if (!s.ok()) return s;
    }
    std::swap(now_, next_);
    std::swap(next_, after_);
    return absl::OkStatus();
  }

 private:
  // The batch's keys grouped by shard, as a worker's would be
  // (KeyDeduplicator), so that they are sent from its memory.
  void NextBatch(client::UniqueKeys* out) {
    keys_.Next(&drawn_);
    dedup_.DeduplicateByShard(drawn_, salt_,
                              static_cast<int>(o_.addresses.size()), out);
  }

  const SparseBenchOptions o_;
  ZipfKeyBatches keys_;
  std::unique_ptr<client::ParameterClient> client_;
  uint64_t salt_ = 0;
  client::KeyDeduplicator dedup_;
  std::vector<uint64_t> drawn_;
  client::UniqueKeys now_, next_, after_;
  std::vector<float> grads_, next_rows_;
};

}  // namespace

absl::StatusOr<ZipfKeyBatches> ZipfKeyBatches::Create(int64_t key_space,
                                                      double s, int batch,
                                                      uint64_t seed) {
  if (batch < 1 || batch > key_space / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", batch, " distinct keys from ", key_space,
                     " (at most half of them)"));
  }
  absl::StatusOr<data_tools::ZipfSampler> zipf =
      data_tools::ZipfSampler::Create(key_space, s);
  if (!zipf.ok()) return zipf.status();
  return ZipfKeyBatches(*zipf, batch, seed);
}

void ZipfKeyBatches::Next(std::vector<uint64_t>* keys) {
  if (taken_ < drawn_.size()) {
    keys->swap(drawn_[taken_++]);
    if (taken_ == drawn_.size()) {
      drawn_.clear();
      taken_ = 0;
    }
    return;
  }
  Draw(keys);
}

void ZipfKeyBatches::Predraw(int batches) {
  const size_t first = drawn_.size();
  drawn_.resize(first + std::max(batches, 0));
  for (size_t i = first; i < drawn_.size(); ++i) Draw(&drawn_[i]);
}

void ZipfKeyBatches::Draw(std::vector<uint64_t>* keys) {
  keys->clear();
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(batch_);
  while (static_cast<int>(keys->size()) < batch_) {
    const uint64_t k = static_cast<uint64_t>(zipf_.Sample(rng_));
    if (seen.insert(k).second) keys->push_back(k);
  }
}

JobSpec SparseBenchSpec(int dim, DType dtype, int workers) {
  JobSpec spec;
  spec.set_name("sparse-bench");
  spec.set_num_workers(workers);
  SparseTableSpec* t = spec.mutable_model()->add_sparse_tables();
  t->set_name(kTable);
  t->set_dim(dim);
  t->set_dtype(dtype);
  t->mutable_init()->set_kind(InitializerSpec::ZEROS);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  spec.mutable_data()->set_max_steps(1);
  return spec;
}

int64_t SparseStepBytes(int batch, int dim, DType dtype) {
  const int64_t row = static_cast<int64_t>(dim) * DTypeSize(dtype);
  return 2 * static_cast<int64_t>(batch) * (8 + row);
}

namespace {

// A set-up and warmed-up worker, or the error that stopped it.
struct StartedWorker {
  std::unique_ptr<SparseWorker> worker;
  std::string error;
};

StartedWorker StartWorker(const SparseBenchOptions& o) {
  StartedWorker out;
  const JobSpec spec = SparseBenchSpec(o.dim, o.dtype, 1);
  absl::StatusOr<Placement> placement = ComputePlacement(
      {}, static_cast<int>(o.addresses.size()), kDefaultChunkBytes);
  absl::StatusOr<ZipfKeyBatches> keys =
      ZipfKeyBatches::Create(o.key_space, o.zipf_s, o.batch,
                             0x5eed0000 + static_cast<uint64_t>(o.worker_id));
  if (!placement.ok() || !keys.ok()) {
    out.error =
        (placement.ok() ? keys.status() : placement.status()).ToString();
    return out;
  }
  keys->Predraw(o.predraw);
  client::ParameterClientOptions co;
  co.server_addresses = o.addresses;
  co.token = o.token;
  co.connections_per_shard = o.connections;
  co.max_request_bytes = o.max_request_bytes;
  co.sparse_tables.assign(spec.model().sparse_tables().begin(),
                          spec.model().sparse_tables().end());
  auto c =
      client::ParameterClient::Create(co, o.job_id, o.worker_id, *placement);
  if (!c.ok()) {
    out.error = c.status().ToString();
    return out;
  }
  out.worker =
      std::make_unique<SparseWorker>(o, *std::move(keys), *std::move(c));
  if (absl::Status s = out.worker->Step(0); !s.ok()) {
    out.error = absl::StrCat("warm-up step: ", s.ToString());
    out.worker.reset();
  }
  return out;
}

// Steps `worker` (warmed up at clock 0) for o.seconds.
SparseFigures Measure(const SparseBenchOptions& o, SparseWorker& worker) {
  SparseFigures f;
  int64_t clock = 1;
  std::vector<double> step_ms;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(o.seconds);
  while (absl::Now() < end || f.steps < o.min_steps) {
    const absl::Time t0 = absl::Now();
    if (absl::Status s = worker.Step(clock++); !s.ok()) {
      f.error = s.ToString();
      break;
    }
    step_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    ++f.steps;
  }
  f.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  f.median_step_ms = Median(step_ms);
  f.rows = 2 * f.steps * o.batch;
  f.bytes = f.steps * SparseStepBytes(o.batch, o.dim, o.dtype);
  return f;
}

}  // namespace

SparseFigures RunSparseWorker(const SparseBenchOptions& o) {
  StartedWorker w = StartWorker(o);
  if (w.worker == nullptr) {
    SparseFigures f;
    f.error = w.error;
    return f;
  }
  return Measure(o, *w.worker);
}

std::vector<SparseFigures> RunSparseThreads(const SparseBenchOptions& o,
                                            int num_workers) {
  std::vector<SparseFigures> figures(num_workers);
  std::atomic<int> ready{0};
  absl::Notification go;
  std::vector<std::thread> threads;
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back([&, w] {
      SparseBenchOptions mine = o;
      mine.worker_id = w + 1;
      StartedWorker started = StartWorker(mine);
      ready.fetch_add(1);
      go.WaitForNotification();
      if (started.worker == nullptr) {
        figures[w].error = started.error;
        return;
      }
      figures[w] = Measure(mine, *started.worker);
    });
  }
  // Bounded by the workers' own call timeouts.
  while (ready.load() < num_workers) absl::SleepFor(absl::Milliseconds(1));
  go.Notify();
  for (auto& t : threads) t.join();
  return figures;
}

absl::StatusOr<std::vector<SparseFigures>> RunSparseProcesses(
    const SparseBenchOptions& o, int num_workers) {
  const std::string dtype = o.dtype == FLOAT16    ? "fp16"
                            : o.dtype == BFLOAT16 ? "bf16"
                                                  : "fp32";
  std::vector<std::vector<std::string>> argvs;
  for (int w = 1; w <= num_workers; ++w) {
    argvs.push_back(
        {"/proc/self/exe", "--mode=sparse",
         absl::StrCat("--worker_child=", o.job_id, ",", w, ",0"),
         absl::StrCat("--servers=", absl::StrJoin(o.addresses, ",")),
         absl::StrCat("--sparse_dims=", o.dim), "--sparse_dtype=" + dtype,
         absl::StrCat("--sparse_batch=", o.batch),
         absl::StrCat("--sparse_key_space=", o.key_space),
         absl::StrCat("--sparse_predraw=", o.predraw),
         absl::StrCat("--fused=", o.fused ? "true" : "false"),
         absl::StrCat("--seconds_per_case=", o.seconds),
         absl::StrCat("--min_steps=", o.min_steps),
         absl::StrCat("--connections=", o.connections),
         absl::StrCat("--max_request_bytes=", o.max_request_bytes)});
  }
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> children =
      WorkerProcesses::Start(argvs, {"PS_TOKEN=" + o.token});
  if (!children.ok()) return children.status();
  if (absl::Status s = (*children)->WaitReady(absl::Now() + absl::Minutes(2));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = (*children)->Go(); !s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> lines = (*children)->Results(
      absl::Now() + absl::Seconds(o.seconds) + absl::Minutes(3));
  if (!lines.ok()) return lines.status();
  std::vector<SparseFigures> figures;
  for (const std::string& line : *lines) {
    absl::StatusOr<SparseFigures> f = ParseSparseFigures(line);
    if (!f.ok()) return f.status();
    figures.push_back(*std::move(f));
  }
  return figures;
}

int SparseChildMain(const SparseBenchOptions& o) {
  auto fail = [](const std::string& what) {
    std::printf("error: %s\n", what.c_str());
    std::fflush(stdout);
    return 1;
  };
  StartedWorker started = StartWorker(o);
  if (started.worker == nullptr) return fail(started.error);
  std::printf("ready\n");
  std::fflush(stdout);
  if (absl::Status s = AwaitGo(STDIN_FILENO, absl::Now() + absl::Minutes(10));
      !s.ok()) {
    return fail(s.ToString());
  }
  const SparseFigures f = Measure(o, *started.worker);
  std::printf("%s\n", FormatSparseFigures(f).c_str());
  std::fflush(stdout);
  return 0;
}

std::string FormatSparseFigures(const SparseFigures& f) {
  if (!f.error.empty()) return absl::StrCat("sparse error ", f.error);
  return absl::StrFormat(
      "sparse steps %d rows %d bytes %d seconds %.6f "
      "median_step_ms %.6f",
      f.steps, f.rows, f.bytes, f.seconds, f.median_step_ms);
}

absl::StatusOr<SparseFigures> ParseSparseFigures(absl::string_view line) {
  SparseFigures f;
  if (absl::ConsumePrefix(&line, "sparse error ")) {
    f.error = std::string(line);
    return f;
  }
  std::vector<absl::string_view> w = absl::StrSplit(line, ' ');
  if (w.size() != 11 || w[0] != "sparse" || w[1] != "steps" || w[3] != "rows" ||
      w[5] != "bytes" || w[7] != "seconds" || w[9] != "median_step_ms" ||
      !absl::SimpleAtoi(w[2], &f.steps) || !absl::SimpleAtoi(w[4], &f.rows) ||
      !absl::SimpleAtoi(w[6], &f.bytes) ||
      !absl::SimpleAtod(w[8], &f.seconds) ||
      !absl::SimpleAtod(w[10], &f.median_step_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a sparse worker's figures: \"", line, "\""));
  }
  return f;
}

SparseCase SummarizeSparse(int dim, int shards,
                           const std::vector<SparseFigures>& figures) {
  SparseCase c;
  c.dim = dim;
  c.shards = shards;
  c.workers = static_cast<int>(figures.size());
  double window = 0;
  int64_t rows = 0, bytes = 0;
  std::vector<double> medians;
  double slowest = -1;
  for (const SparseFigures& f : figures) {
    if (!f.error.empty() && c.error.empty()) c.error = f.error;
    window = std::max(window, f.seconds);
    rows += f.rows;
    bytes += f.bytes;
    medians.push_back(f.median_step_ms);
    // Rows per step counted once (push+pull), as the reference does.
    const double mine = f.seconds > 0 ? f.rows / 2.0 / f.seconds : 0;
    if (slowest < 0 || mine < slowest) slowest = mine;
  }
  if (window > 0) {
    c.rows_per_s = rows / 2.0 / window;
    c.gbps = bytes / window / 1e9;
  }
  c.rows_per_s_worker = std::max(0.0, slowest);
  c.step_ms = Median(medians);
  return c;
}

std::string SparseReportHeader() {
  return "| dim | shards | workers | rows/s (push+pull) | rows/s per worker "
         "(slowest) | GB/s (keys + rows, both ways) | step ms (median) | "
         "dense GB/s (same bytes) | sparse / dense |\n"
         "|---|---|---|---|---|---|---|---|---|";
}

std::string SparseReportRow(const SparseCase& c) {
  if (!c.error.empty()) {
    return absl::StrFormat("| %d | %d | %d | error: %s | | | | | |", c.dim,
                           c.shards, c.workers, c.error);
  }
  const std::string dense =
      c.dense_gbps > 0
          ? absl::StrFormat("%.3f | %.2fx", c.dense_gbps, c.gbps / c.dense_gbps)
          : std::string("- | -");
  return absl::StrFormat("| %d | %d | %d | %.2fM | %.2fM | %.3f | %.2f | %s |",
                         c.dim, c.shards, c.workers, c.rows_per_s / 1e6,
                         c.rows_per_s_worker / 1e6, c.gbps, c.step_ms, dense);
}

}  // namespace ps::bench
