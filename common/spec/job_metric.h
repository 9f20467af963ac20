// The test metrics a job is judged by (AUC, log loss, RMSE, accuracy): their
// names in job specs and in the evaluator's metric points, which direction is
// better, the targets that make sense for each, and which one is "the job's
// metric". The arithmetic of the metrics themselves is
// common/spec/eval_metrics.h; this is the vocabulary that the job spec's
// validation (common/spec/config.cc) and psctl's reports (tools/psctl/report.h)
// share. Stateless; thread-safe.
#ifndef PS_COMMON_SPEC_JOB_METRIC_H_
#define PS_COMMON_SPEC_JOB_METRIC_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"

namespace ps {

struct TestMetricInfo {
  absl::string_view name;        // in job specs: "auc"
  absl::string_view point_name;  // the evaluator's MetricPoint: "test_auc"
  absl::string_view label;       // for people (plot axes, tables): "test AUC"
  bool higher_is_better;
  // Valid targets: (min_target, max_target]; max_target is +inf for losses.
  double min_target;
  double max_target;
};

// Every metric, in the order of preference that picks a job's metric from
// the points it reported: test_auc, test_logloss, test_rmse, test_accuracy.
// AUC comes first because a binary (sigmoid) head reports AUC, log loss and
// possibly accuracy, and CTR work is compared on AUC; RMSE is the only
// metric of a regression (MSE) head; accuracy is a softmax head's.
absl::Span<const TestMetricInfo> TestMetrics();

// By spec name ("auc") or point name ("test_auc"); nullptr for neither.
const TestMetricInfo* FindTestMetric(absl::string_view name);

// The accuracy entry (never null).
const TestMetricInfo& AccuracyMetric();

// "auc, logloss, rmse, accuracy", for error messages and help texts.
std::string TestMetricNames();

// Whether `value` meets `target` in the metric's direction (>= for AUC and
// accuracy, <= for log loss and RMSE). NaN meets nothing.
bool MeetsTarget(const TestMetricInfo& metric, double value, double target);

// Whether `a` is strictly better than `b`; a number beats NaN.
bool IsBetter(const TestMetricInfo& metric, double a, double b);

// Why `value` cannot be a target in `metric` ("must be in (0, 1], got 1.5"),
// or "" when it can. NaN and infinities never can.
std::string TargetValueProblem(const TestMetricInfo& metric, double value);

// A job's target: metric == nullptr when the spec sets none.
struct JobTarget {
  const TestMetricInfo* metric = nullptr;
  double value = 0;
};

// From target { metric value }, else from target_accuracy (> 0) as the
// accuracy case. A metric name that FindTestMetric does not know (a spec that
// was not validated) gives no target.
JobTarget TargetOf(const JobSpec& spec);

}  // namespace ps

#endif  // PS_COMMON_SPEC_JOB_METRIC_H_
