// One ps_bench worker: a ParameterClient doing ASP steps on a dense model
// against running shards, timed. ps_bench runs it on a thread of its own
// process or, with --worker_processes, as a child process (the figures then
// travel as one line: FormatFigures / ParseFigures).
#ifndef PS_TOOLS_BENCH_WORKER_H_
#define PS_TOOLS_BENCH_WORKER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"

namespace ps::bench {

// The benchmark's job: up to 4 equal tensors ("layers") of fp32 zeros,
// `bytes` in all, SGD under ASP.
JobSpec DenseBenchSpec(int64_t bytes, int workers);

// Its placement on `num_shards` shards (as the shards compute it).
absl::StatusOr<Placement> DenseBenchPlacement(int64_t bytes, int num_shards);

struct BenchWorkerOptions {
  std::vector<std::string> addresses;  // index = shard index
  std::string token;
  std::string job_id;
  int64_t worker_id = 1;
  int64_t bytes = 0;  // of the model
  int connections = 2;
  int64_t max_request_bytes = 4 << 20;
  // Steps as workers run them (pushes and the end of step answered with
  // the weights); false: a pull, then the pushes and the end of step.
  bool fused = true;
  double seconds = 1.5;  // measuring time
  int min_steps = 3;
  // Record the process's CPU time (for a worker alone in its process).
  bool process_cpu = false;
};

// What one worker measured. Per-worker GB/s: 2 * bytes * steps / seconds.
struct WorkerFigures {
  int64_t steps = 0;
  double seconds = 0;  // its own measuring window
  double median_step_ms = 0;
  // CPU seconds (user + system) its process used while it measured; < 0
  // where not measured per worker (worker threads share a process).
  double cpu_seconds = -1;
  std::string error;  // empty: all steps succeeded
};

// One line (no newline), and back. ParseFigures: INVALID_ARGUMENT for a
// line FormatFigures did not write.
std::string FormatFigures(const WorkerFigures& f);
absl::StatusOr<WorkerFigures> ParseFigures(absl::string_view line);

class BenchWorker {
 public:
  // Connects, pulls the weights and runs one step (connections and buffers
  // warm); the error of any of these.
  static absl::StatusOr<std::unique_ptr<BenchWorker>> Start(
      const BenchWorkerOptions& options);
  virtual ~BenchWorker() = default;

  // Runs steps for `seconds` (at least min_steps), or until one fails.
  // Not thread-safe: one thread runs a worker.
  virtual WorkerFigures Run() = 0;
};

}  // namespace ps::bench

#endif  // PS_TOOLS_BENCH_WORKER_H_
