#include "common/spec/job_metric.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A target of 0 is refused for every metric: for AUC and accuracy it is met
// by any evaluation, for log loss and RMSE by none, and in proto3 it is what
// a target written without its value reads as.
constexpr TestMetricInfo kMetrics[] = {
    {"auc", "test_auc", "test AUC", true, 0.0, 1.0},
    {"logloss", "test_logloss", "test logloss", false, 0.0, kInf},
    {"rmse", "test_rmse", "test RMSE", false, 0.0, kInf},
    {"accuracy", "test_accuracy", "test accuracy", true, 0.0, 1.0},
};

}  // namespace

absl::Span<const TestMetricInfo> TestMetrics() { return kMetrics; }

const TestMetricInfo* FindTestMetric(absl::string_view name) {
  for (const TestMetricInfo& m : kMetrics) {
    if (name == m.name || name == m.point_name) return &m;
  }
  return nullptr;
}

const TestMetricInfo& AccuracyMetric() { return kMetrics[3]; }

std::string TestMetricNames() {
  std::string out;
  for (const TestMetricInfo& m : kMetrics) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", m.name);
  }
  return out;
}

bool MeetsTarget(const TestMetricInfo& metric, double value, double target) {
  return metric.higher_is_better ? value >= target : value <= target;
}

bool IsBetter(const TestMetricInfo& metric, double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return metric.higher_is_better ? a > b : a < b;
}

std::string TargetValueProblem(const TestMetricInfo& metric, double value) {
  if (!std::isfinite(value)) {
    return absl::StrCat("must be a finite number, got ", value);
  }
  if (value > metric.min_target && value <= metric.max_target) return "";
  if (metric.max_target == kInf) {
    return absl::StrCat("for ", metric.name, ", must be > ", metric.min_target,
                        ", got ", value);
  }
  return absl::StrCat("for ", metric.name, ", must be in (", metric.min_target,
                      ", ", metric.max_target, "], got ", value);
}

JobTarget TargetOf(const JobSpec& spec) {
  JobTarget t;
  if (spec.has_target()) {
    t.metric = FindTestMetric(spec.target().metric());
    if (t.metric != nullptr) t.value = spec.target().value();
  } else if (spec.target_accuracy() > 0) {
    t.metric = &AccuracyMetric();
    t.value = spec.target_accuracy();
  }
  return t;
}

}  // namespace ps
