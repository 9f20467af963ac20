#include "tools/ps_bench_sparse.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/key_placement.h"
#include "common/payload_codec.h"
#include "common/placement.h"
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

// One worker's state: its client and the buffers of two batches (the
// step's and the next one's), swapped every step.
class SparseWorker {
 public:
  SparseWorker(const SparseBenchOptions& o, ZipfKeyBatches keys,
               std::unique_ptr<client::ParameterClient> client)
      : o_(o), keys_(std::move(keys)), client_(std::move(client)) {
    salt_ = TableSalt(kTable);
    NextBatch(&now_);
    grads_.assign(static_cast<size_t>(o.batch) * o.dim, 1e-3f);
  }

  absl::Status Step(int64_t clock) {
    NextBatch(&next_);
    next_rows_.resize(next_.keys.size() * o_.dim);
    std::vector<client::SparsePush> push = {
        {0, now_.keys,
         absl::MakeConstSpan(grads_.data(), now_.keys.size() * o_.dim)}};
    std::vector<client::SparsePull> pull = {
        {0, next_.keys, absl::MakeSpan(next_rows_)}};
    if (o_.fused) {
      client::ParameterClient::StepTickets t = client_->PushRowsAndPull(
          std::move(push), clock, clock, clock + 1, 0, std::move(pull));
      absl::Status s = t.end.Wait(kStepTimeout);
      absl::Status p = t.pull.Wait(kStepTimeout);
      if (!s.ok()) return s;
      if (!p.ok()) return p;
    } else {
      absl::Status s =
          client_->PushRows(std::move(push), clock, clock).Wait(kStepTimeout);
      if (!s.ok()) return s;
      s = client_->PullRows(clock + 1, 0, std::move(pull)).Wait(kStepTimeout);
      if (!s.ok()) return s;
    }
    std::swap(now_, next_);
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
  client::UniqueKeys now_, next_;
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

SparseFigures RunSparseWorker(const SparseBenchOptions& o) {
  SparseFigures f;
  const JobSpec spec = SparseBenchSpec(o.dim, o.dtype, 1);
  absl::StatusOr<Placement> placement = ComputePlacement(
      {}, static_cast<int>(o.addresses.size()), kDefaultChunkBytes);
  absl::StatusOr<ZipfKeyBatches> keys =
      ZipfKeyBatches::Create(o.key_space, o.zipf_s, o.batch,
                             0x5eed0000 + static_cast<uint64_t>(o.worker_id));
  if (!placement.ok() || !keys.ok()) {
    f.error = (placement.ok() ? keys.status() : placement.status()).ToString();
    return f;
  }
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
    f.error = c.status().ToString();
    return f;
  }
  SparseWorker worker(o, *std::move(keys), *std::move(c));
  int64_t clock = 0;
  if (absl::Status s = worker.Step(clock++); !s.ok()) {
    f.error = absl::StrCat("warm-up step: ", s.ToString());
    return f;
  }
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
         "(slowest) | GB/s (keys + rows, both ways) | step ms (median) |\n"
         "|---|---|---|---|---|---|---|";
}

std::string SparseReportRow(const SparseCase& c) {
  if (!c.error.empty()) {
    return absl::StrFormat("| %d | %d | %d | error: %s | | | |", c.dim,
                           c.shards, c.workers, c.error);
  }
  return absl::StrFormat("| %d | %d | %d | %.2fM | %.2fM | %.3f | %.2f |",
                         c.dim, c.shards, c.workers, c.rows_per_s / 1e6,
                         c.rows_per_s_worker / 1e6, c.gbps, c.step_ms);
}

}  // namespace ps::bench
