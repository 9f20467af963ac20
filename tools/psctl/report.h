// What psctl shows people: the live progress line of a job, and the
// comparison of several jobs (table + plots). Pure functions over the
// coordinator's records and metric series, so they are unit-tested without
// a cluster; only WritePlots runs a program (gnuplot).
#ifndef PS_TOOLS_PSCTL_REPORT_H_
#define PS_TOOLS_PSCTL_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator_service.pb.h"

namespace ps::psctl {

// One line: bar, percent, epoch, step, loss, test accuracy, examples/s, ETA.
// `elapsed_s` is the job's running time so far (for the ETA).
std::string ProgressLine(const JobRecord& job, double elapsed_s, int width);

// Everything compare needs about one job.
struct JobData {
  JobRecord record;
  std::vector<MetricPoint> points;
  std::vector<JobEvent> events;
};

struct JobSummary {
  std::string job_id;
  std::string name;
  std::string state;
  double final_accuracy = 0;  // last test_accuracy point
  double best_accuracy = 0;
  double seconds_to_target = -1;  // -1: never reached
  int64_t steps_to_target = -1;
  double epochs_to_target = -1;
  double examples_per_sec = 0;  // summed over workers (mean of each)
  double mean_staleness = 0;
  int64_t dropped_pushes = 0;
  int64_t rejected_pushes = 0;
  int64_t evictions = 0;
  double wall_seconds = 0;
  int64_t steps = 0;
};

JobSummary Summarize(const JobData& job, double target_accuracy);

// A fixed-width text table, one row per job, with a header naming the target.
std::string FormatComparison(const std::vector<JobSummary>& rows,
                             double target_accuracy);

// Writes <prefix>.png and <prefix>.svg (test accuracy and training loss
// against wall time and against epochs, one line per job), plus what
// replots them: the gnuplot script <prefix>.gp and the data it reads,
// <prefix>-<job>-acc.dat and <prefix>-<job>-loss.dat. FAILED_PRECONDITION
// if gnuplot is not installed; INTERNAL if it fails, with its messages in
// <prefix>.gnuplot.log (removed when it succeeds).
absl::Status WritePlots(const std::vector<JobData>& jobs,
                        const std::string& prefix);

// "1h02m", "3m05s", "12s".
std::string FormatDuration(double seconds);

}  // namespace ps::psctl

#endif  // PS_TOOLS_PSCTL_REPORT_H_
