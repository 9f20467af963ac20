// What psctl shows people: the live progress line of a job, a job's test
// metric (status, metrics), and the comparison of several jobs (table +
// plots) in their metric. Pure functions over the
// coordinator's records and metric series, so they are unit-tested without
// a cluster; only WritePlots runs a program (gnuplot).
#ifndef PS_TOOLS_PSCTL_REPORT_H_
#define PS_TOOLS_PSCTL_REPORT_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/spec/job_metric.h"
#include "proto/coordinator_service.pb.h"

namespace ps::psctl {

// The test metrics psctl shows for a job while it runs (the progress line)
// and in `list`, from its spec alone (so before any evaluation): the
// metric of its target when it sets one, then those its head implies: a
// sigmoid head's AUC and log loss, a regression (MSE) head's RMSE, a
// softmax head's (or an MlpSpec's) accuracy. No metric twice; never empty.
std::vector<const TestMetricInfo*> ShownMetrics(const JobSpec& spec);

// A test metric's latest value (NaN: none yet).
struct LiveMetric {
  const TestMetricInfo* metric = nullptr;
  double value = std::numeric_limits<double>::quiet_NaN();
};

// The value of each of `metrics` at its latest point in `points` (by time;
// NaN for a metric with no point), in the order of `metrics`.
std::vector<LiveMetric> LatestValues(
    const std::vector<MetricPoint>& points,
    const std::vector<const TestMetricInfo*>& metrics);

// The short name of a metric in the progress line and `list`: PlotTag's
// ("auc", "logloss", "rmse", "acc").
std::string ShortName(const TestMetricInfo& metric);

// One line: bar, percent, epoch, step, loss, the job's test metrics by name
// ("auc 0.7812 logloss 0.4400", "rmse 0.8800", "acc 0.8512"; "-" before the
// first evaluation), examples/s, ETA. `metrics` are the values to show
// (LatestValues of ShownMetrics); accuracy without a value falls back to the
// record's last_test_accuracy. The fraction done is step/total_steps; a job
// whose total steps are unknown (text data: the workers count their shards'
// examples themselves) shows its epoch out of the spec's epochs ("epoch
// 0.49/3", default 1) and the fraction by epochs, and, when the coordinator
// knows them, the examples trained; one that ends at data.max_steps with
// its total unknown shows an empty bar and no percent. `elapsed_s` is the
// job's running time so far (for the ETA).
std::string ProgressLine(const JobRecord& job,
                         const std::vector<LiveMetric>& metrics,
                         double elapsed_s, int width);
// With no metric values fetched: ShownMetrics of the job's spec, accuracy
// from the record, "-" for the others.
std::string ProgressLine(const JobRecord& job, double elapsed_s, int width);

// A job's metric for `list` and the end of `wait`: "auc 0.7812" (the first
// of `metrics`), "auc -" when it has no value.
std::string FormatLiveMetric(const LiveMetric& m);

// `psctl status`'s sparse tables: a header and one line per table and shard
// (rows, capacity, bytes, evictions, admissions, rows pushed and pulled,
// gradients dropped before admission and rejected), tables in the order of
// the shards' answers, shards by index. Empty when no shard has a sparse
// table.
std::string FormatSparseTables(const std::vector<ShardStatus>& shards);

// Everything compare needs about one job.
struct JobData {
  JobRecord record;
  std::vector<MetricPoint> points;
  std::vector<JobEvent> events;
};

// The test metric a job is judged by: its spec's target metric when it sets
// one (target, or target_accuracy), else the first metric of TestMetrics()
// (AUC, logloss, RMSE, accuracy) it reported points of, else accuracy.
const TestMetricInfo& JobMetric(const JobData& job);

// The last and best value of one test metric; NaN when it has no point.
struct MetricValues {
  const TestMetricInfo* metric = nullptr;
  double final_value = std::numeric_limits<double>::quiet_NaN();
  double best_value = std::numeric_limits<double>::quiet_NaN();
  int64_t evaluations = 0;
  // The last evaluation is of the job's final model (MetricPoint.
  // final_model), taken at last_time_s since the job started.
  bool final_model = false;
  double last_time_s = 0;
};

struct JobSummary {
  std::string job_id;
  std::string name;
  std::string state;
  // What final/best and the *_to_target columns are in, and the target (0:
  // none). `values.metric` is never null.
  MetricValues values;
  double target = 0;
  double seconds_to_target = -1;  // -1: never reached
  int64_t steps_to_target = -1;
  double epochs_to_target = -1;
  // The job's other test metrics, in the order of TestMetrics() (status).
  std::vector<MetricValues> other_metrics;
  double examples_per_sec = 0;  // summed over workers (mean of each)
  double mean_staleness = 0;
  int64_t dropped_pushes = 0;
  int64_t rejected_pushes = 0;
  int64_t evictions = 0;
  double wall_seconds = 0;
  int64_t steps = 0;
};

// Summarises `job` in `metric`: the first evaluation (in time) that meets
// `target` in the metric's direction gives the *_to_target columns; a target
// <= 0 is none.
JobSummary Summarize(const JobData& job, const TestMetricInfo& metric,
                     double target);
// In the job's own metric (JobMetric).
JobSummary Summarize(const JobData& job, double target);
// In the job's own metric, with its spec's target (status, metrics).
JobSummary Summarize(const JobData& job);

// "test AUC 0.7812 (best 0.7840, higher is better; 12 evaluations)", or
// "test AUC - (no evaluation yet)".
std::string FormatMetricValues(const MetricValues& v);
// "auc >= 0.8: reached after 1m20s (step 400, epoch 1.50)", "auc >= 0.8: not
// reached", or "" without a target.
std::string FormatTargetProgress(const JobSummary& s);

// "57600/60000 examples trained (96.0%), 2400 skipped" from the record's
// examples_trained / _total / _skipped; "" when the job has no data plans.
std::string FormatDataProgress(const JobRecord& r);

// "195312 metric points reported, 16384 kept: older points of long series
// merged (coordinator --max_points_per_series)" from the record's
// metric_points_reported / _kept; "" when every point is kept as reported.
std::string FormatThinnedSeries(const JobRecord& r);

// The metric a comparison judges its jobs by, and the target in it (0: none).
struct ComparisonMetric {
  const TestMetricInfo* metric = &AccuracyMetric();
  double target = 0;
};

// The metric of a comparison: `metric_flag` when not empty (a name or point
// name; INVALID_ARGUMENT if unknown), else the jobs' common JobMetric, where
// a job with no target and no test point yet takes the others' (accuracy if
// none has one). Jobs judged by different metrics are refused
// (INVALID_ARGUMENT naming each job's metric and suggesting --metric) rather
// than ranked on mixed columns.
// The target: `target_flag` when not 0 (INVALID_ARGUMENT if it is no valid
// target in the metric), else the first job's spec target in that metric,
// else none.
absl::StatusOr<ComparisonMetric> ChooseComparisonMetric(
    const std::vector<JobData>& jobs, absl::string_view metric_flag,
    double target_flag);

// A line naming the metric, its direction and the target, then a
// fixed-width text table, one row per job. final/best show "-" for a job
// with no point of the metric; t@/steps@/epoch@ show "never" (or "-") for a
// job that did not meet the target.
std::string FormatComparison(const std::vector<JobSummary>& rows,
                             const ComparisonMetric& cmp);

// Writes <prefix>.png and <prefix>.svg (the comparison's test metric, with
// the target as a dashed line, and training loss, against wall time and
// against epochs, one line per job), plus what replots them: the gnuplot
// script <prefix>.gp and the data it reads, <prefix>-<job>-<m>.dat (m: acc,
// auc, logloss or rmse) and <prefix>-<job>-loss.dat. FAILED_PRECONDITION if
// gnuplot is not installed; INTERNAL if it fails, with its messages in
// <prefix>.gnuplot.log (removed when it succeeds).
absl::Status WritePlots(const std::vector<JobData>& jobs,
                        const ComparisonMetric& cmp, const std::string& prefix);

// The data file tag of a metric in WritePlots: "acc" for accuracy, else its
// name.
std::string PlotTag(const TestMetricInfo& metric);

// "1h02m", "3m05s", "12s".
std::string FormatDuration(double seconds);

}  // namespace ps::psctl

#endif  // PS_TOOLS_PSCTL_REPORT_H_
