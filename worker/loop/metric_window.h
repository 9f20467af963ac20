// The worker's training metrics: points stamped with their step's epoch and
// the job's wall time (MetricStamp), and the window of steps between two
// reports whose means and throughput they carry (MetricWindow).
#ifndef PS_WORKER_LOOP_METRIC_WINDOW_H_
#define PS_WORKER_LOOP_METRIC_WINDOW_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "proto/coordinator_service.pb.h"

namespace ps::worker {

// Where metric points go (the coordinator, in the daemon). `done`: the last
// call of the job, with no points.
using MetricSink =
    std::function<void(std::vector<MetricPoint> points, bool done)>;

// Makes metric points: epoch = step / steps_per_epoch, time_ms since the
// job started (the stamp's construction). `clock` is not owned and must
// outlive it. Thread-compatible.
class MetricStamp {
 public:
  MetricStamp(const Clock* clock, int64_t steps_per_epoch);

  MetricPoint Point(const std::string& name, double value, int64_t step) const;

 private:
  const Clock* const clock_;
  const int64_t steps_per_epoch_;
  const absl::Time job_start_;
};

// Where one step's wall time went.
struct StepSplit {
  absl::Duration wait;     // for the batch
  absl::Duration pull;     // for weights, before the step and inside it
  absl::Duration compute;  // forward and backward, pushes handed out
  absl::Duration push;     // ending the step
};

// More points for a report, (name, value) each.
using ExtraPoints =
    std::function<std::vector<std::pair<std::string, double>>()>;

struct MetricWindowOptions {
  // Report every this many steps (and after the job's last).
  int report_every_steps = 20;
  int batch_size = 1;  // examples per step
  // Called at each report for points to send with it (the daemon's
  // compression counters); unset: none.
  ExtraPoints extra = nullptr;
};

// The steps since the last report. Report() sends train_loss,
// examples_per_sec (over the window's wall time), step_time_ms, wait_ms,
// pull_ms, compute_ms, push_ms (means per step), staleness (mean over the
// step ends whose staleness is known; 0 if none), clock and options.extra's
// points, then starts a new window. `stamp` and `clock` are not owned.
// Thread-compatible.
class MetricWindow {
 public:
  // The first window starts now.
  MetricWindow(const MetricStamp* stamp, const Clock* clock,
               const MetricWindowOptions& options);

  void AddStep(float loss, const StepSplit& split);
  // `ends` step ends whose staleness sums to `sum`.
  void AddStaleness(double sum, int64_t ends);

  int64_t steps() const { return steps_; }
  // Whether to report after the step that leaves the clock at `clock`.
  bool Due(int64_t clock, int64_t total_steps) const {
    return steps_ >= options_.report_every_steps || clock >= total_steps;
  }
  // Sends the window's points, stamped `clock` (the clock after its last
  // step), to `sink`, then starts the next window when `sink` returns (the
  // report's own time counts in neither). A window of no steps sends
  // nothing.
  void Report(int64_t clock, const MetricSink& sink);

 private:
  void Reset();

  const MetricStamp* const stamp_;
  const Clock* const clock_;
  const MetricWindowOptions options_;
  // Sums since start_, in milliseconds for the times.
  int64_t steps_ = 0;
  double loss_ = 0, wait_ = 0, pull_ = 0, compute_ = 0, push_ = 0;
  double staleness_ = 0;
  int64_t staleness_ends_ = 0;
  absl::Time start_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_METRIC_WINDOW_H_
