// ps_bench's sparse mode: workers that push and pull rows of one sparse
// table by key, as a recommendation model's embedding does, and what they
// report. Each step draws a batch of `batch` unique keys Zipf(s) from
// [1, key_space] (the batch's unique feature ids), pushes a gradient for
// every row of the step's batch and pulls the rows of the next one: fused,
// the next batch's keys ride on the push (PushRowsAndPull: one round trip
// per shard); unfused, a push, a wait, a pull and a wait (as the ps-lite
// reference of docs/performance/sparse-tables.md measures).
//
// Counted per step: `batch` rows pushed and `batch` pulled (rows/s counts
// each row once per step, push+pull), and bytes in both directions: the
// push's keys and gradients, the pull's keys and rows (keys counted as cost).
#ifndef PS_TOOLS_PS_BENCH_SPARSE_H_
#define PS_TOOLS_PS_BENCH_SPARSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/config.pb.h"
#include "tools/data/zipf.h"
#include "worker/data/random.h"

namespace ps::bench {

// Batches of distinct keys Zipf(s) over [1, key_space]: draws until the
// batch holds `batch` distinct keys (so a batch of 4096 from 10^7 at 1.05
// takes about twice as many draws: its head keys recur).
class ZipfKeyBatches {
 public:
  // INVALID_ARGUMENT unless 1 <= batch <= key_space / 2 and s > 0.
  static absl::StatusOr<ZipfKeyBatches> Create(int64_t key_space, double s,
                                               int batch, uint64_t seed);
  // The next batch (replacing `keys`' contents), in order of first draw.
  void Next(std::vector<uint64_t>* keys);
  // Draws the next `batches` batches now; Next hands them out first, in
  // the same order, so the stream is the same.
  void Predraw(int batches);

 private:
  ZipfKeyBatches(data_tools::ZipfSampler zipf, int batch, uint64_t seed)
      : zipf_(zipf), batch_(batch), rng_(seed) {}
  void Draw(std::vector<uint64_t>* keys);

  data_tools::ZipfSampler zipf_;
  int batch_;
  worker::data::SplitMix64 rng_;
  std::vector<std::vector<uint64_t>> drawn_;
  size_t taken_ = 0;
};

// The job the sparse cases set up: one table "emb" of `dim` values in
// `dtype` (SGD, zeros), no dense tensors, ASP, for `workers` workers.
JobSpec SparseBenchSpec(int dim, DType dtype, int workers);

struct SparseBenchOptions {
  std::vector<std::string> addresses;  // index = shard index
  std::string token;
  std::string job_id;
  int64_t worker_id = 1;
  int dim = 16;
  DType dtype = FLOAT32;
  int batch = 4096;
  int64_t key_space = 10'000'000;
  double zipf_s = 1.05;
  // Batches drawn before the warm-up step (ZipfKeyBatches::Predraw).
  int predraw = 0;
  bool fused = true;
  double seconds = 1.5;
  int min_steps = 3;
  int connections = 2;
  int64_t max_request_bytes = 4 << 20;
};

struct SparseFigures {
  int64_t steps = 0;
  int64_t rows = 0;   // rows pushed + rows pulled
  int64_t bytes = 0;  // keys and rows, both directions
  double seconds = 0;
  double median_step_ms = 0;
  std::string error;
};

// The bytes one step moves: keys (8 each) and rows (dim x dtype each) of
// `batch` rows pushed and `batch` pulled.
int64_t SparseStepBytes(int batch, int dim, DType dtype);

// One worker: connects, runs a warm-up step, then steps for `seconds` (and
// at least min_steps). Errors go into the figures.
SparseFigures RunSparseWorker(const SparseBenchOptions& options);

// `num_workers` workers (ids 1..n) as threads of this process, each set up
// and warmed up before all start measuring together.
std::vector<SparseFigures> RunSparseThreads(const SparseBenchOptions& options,
                                            int num_workers);

// The same as processes of their own: this binary (ps_bench) again, with
// --mode=sparse --worker_child=JOB_ID,WORKER_ID,0 and the options as its
// flags (the token in PS_TOKEN, never on a command line); each runs
// SparseChildMain. Errors: a child that could not start, set up or report
// (tools/worker_processes.h).
absl::StatusOr<std::vector<SparseFigures>> RunSparseProcesses(
    const SparseBenchOptions& options, int num_workers);

// A child's side: sets up and warms up, says "ready" on stdout, waits for
// "go" on stdin, measures and writes its figures as one line. Returns the
// process's exit code (1 after an "error: ..." line).
int SparseChildMain(const SparseBenchOptions& options);

// Figures as one line (no newline), and back (INVALID_ARGUMENT for a line
// FormatSparseFigures did not write).
std::string FormatSparseFigures(const SparseFigures& f);
absl::StatusOr<SparseFigures> ParseSparseFigures(absl::string_view line);

// All workers' figures over the longest window: the report's row.
struct SparseCase {
  int dim = 0;
  int shards = 0;
  int workers = 0;
  double rows_per_s = 0;         // all workers
  double rows_per_s_worker = 0;  // the slowest worker
  double gbps = 0;
  double step_ms = 0;  // the workers' median step times' median
  // The dense path's push+pull GB/s for the same bytes per step (a model of
  // SparseStepBytes / 2 bytes, the same shards and workers), measured just
  // after; 0: not measured.
  double dense_gbps = 0;
  std::string error;
};
SparseCase SummarizeSparse(int dim, int shards,
                           const std::vector<SparseFigures>& figures);
// The markdown table's header lines and one row.
std::string SparseReportHeader();
std::string SparseReportRow(const SparseCase& c);

}  // namespace ps::bench

#endif  // PS_TOOLS_PS_BENCH_SPARSE_H_
