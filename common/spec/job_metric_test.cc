#include "common/spec/job_metric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace ps {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(JobMetric, NamesDirectionsAndOrderOfPreference) {
  struct Case {
    const char* name;
    const char* point_name;
    const char* label;
    bool higher_is_better;
  } cases[] = {
      {"auc", "test_auc", "test AUC", true},
      {"logloss", "test_logloss", "test logloss", false},
      {"rmse", "test_rmse", "test RMSE", false},
      {"accuracy", "test_accuracy", "test accuracy", true},
  };
  ASSERT_EQ(TestMetrics().size(), std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    EXPECT_EQ(TestMetrics()[i].name, c.name) << i;
    const TestMetricInfo* by_name = FindTestMetric(c.name);
    ASSERT_NE(by_name, nullptr) << c.name;
    EXPECT_EQ(by_name, FindTestMetric(c.point_name)) << c.point_name;
    EXPECT_EQ(by_name->point_name, c.point_name);
    EXPECT_EQ(by_name->label, c.label);
    EXPECT_EQ(by_name->higher_is_better, c.higher_is_better) << c.name;
  }
  EXPECT_EQ(FindTestMetric("AUC"), nullptr);  // names are exact
  EXPECT_EQ(FindTestMetric("train_loss"), nullptr);
  EXPECT_EQ(FindTestMetric(""), nullptr);
  EXPECT_EQ(&AccuracyMetric(), FindTestMetric("accuracy"));
  EXPECT_EQ(TestMetricNames(), "auc, logloss, rmse, accuracy");
}

TEST(JobMetric, MeetsTargetFollowsTheDirection) {
  const TestMetricInfo& auc = *FindTestMetric("auc");
  const TestMetricInfo& logloss = *FindTestMetric("logloss");
  EXPECT_TRUE(MeetsTarget(auc, 0.80, 0.80));
  EXPECT_TRUE(MeetsTarget(auc, 0.81, 0.80));
  EXPECT_FALSE(MeetsTarget(auc, 0.79, 0.80));
  EXPECT_TRUE(MeetsTarget(logloss, 0.45, 0.45));
  EXPECT_TRUE(MeetsTarget(logloss, 0.44, 0.45));
  EXPECT_FALSE(MeetsTarget(logloss, 0.46, 0.45));
  EXPECT_FALSE(MeetsTarget(auc, kNaN, 0.5));
  EXPECT_FALSE(MeetsTarget(logloss, kNaN, 0.5));

  EXPECT_TRUE(IsBetter(auc, 0.8, 0.7));
  EXPECT_FALSE(IsBetter(auc, 0.7, 0.8));
  EXPECT_FALSE(IsBetter(auc, 0.7, 0.7));
  EXPECT_TRUE(IsBetter(logloss, 0.3, 0.4));
  EXPECT_FALSE(IsBetter(logloss, 0.4, 0.3));
  EXPECT_TRUE(IsBetter(logloss, 0.4, kNaN));
  EXPECT_FALSE(IsBetter(logloss, kNaN, 0.4));
}

TEST(JobMetric, TargetValueProblems) {
  struct Case {
    const char* metric;
    double value;
    const char* want;  // "" = valid
  } cases[] = {
      {"auc", 0.8, ""},
      {"auc", 1.0, ""},
      {"auc", 1.5, "for auc, must be in (0, 1], got 1.5"},
      {"auc", -0.1, "must be in (0, 1]"},
      {"auc", 0.0, "must be in (0, 1]"},
      {"accuracy", 1.01, "must be in (0, 1]"},
      {"logloss", 0.45, ""},
      {"logloss", 3.0, ""},
      {"logloss", -0.2, "for logloss, must be > 0, got -0.2"},
      {"rmse", 0.93, ""},
      {"rmse", -1, "for rmse, must be > 0"},
      {"rmse", 0, "must be > 0"},
      {"rmse", kNaN, "must be a finite number, got nan"},
      {"logloss", kInf, "must be a finite number"},
  };
  for (const Case& c : cases) {
    const std::string got =
        TargetValueProblem(*FindTestMetric(c.metric), c.value);
    if (std::string(c.want).empty()) {
      EXPECT_EQ(got, "") << c.metric << " " << c.value;
    } else {
      EXPECT_NE(got.find(c.want), std::string::npos)
          << c.metric << " " << c.value << ": " << got;
    }
  }
}

TEST(JobMetric, TargetOfASpec) {
  JobSpec spec;
  EXPECT_EQ(TargetOf(spec).metric, nullptr);  // none

  spec.set_target_accuracy(0.85f);  // the accuracy case
  JobTarget t = TargetOf(spec);
  ASSERT_NE(t.metric, nullptr);
  EXPECT_EQ(t.metric->name, "accuracy");
  EXPECT_FLOAT_EQ(t.value, 0.85f);

  spec.clear_target_accuracy();
  spec.mutable_target()->set_metric("test_logloss");
  spec.mutable_target()->set_value(0.45);
  t = TargetOf(spec);
  ASSERT_NE(t.metric, nullptr);
  EXPECT_EQ(t.metric->name, "logloss");
  EXPECT_DOUBLE_EQ(t.value, 0.45);

  spec.mutable_target()->set_metric("f1");  // not validated: no target
  EXPECT_EQ(TargetOf(spec).metric, nullptr);
}

}  // namespace
}  // namespace ps
