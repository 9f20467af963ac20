#include "tools/psctl/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/coordinator/metric_series.h"

namespace ps::psctl {
namespace {

MetricPoint Point(const std::string& name, double value, int64_t step,
                  double epoch, int64_t time_ms, int64_t member = 1) {
  MetricPoint p;
  p.set_name(name);
  p.set_value(value);
  p.set_step(step);
  p.set_epoch(epoch);
  p.set_time_ms(time_ms);
  p.set_member_id(member);
  return p;
}

JobData TwoWorkerJob() {
  JobData j;
  j.record.set_job_id("job-1");
  j.record.mutable_spec()->set_name("fmnist-bsp");
  j.record.set_state(SUCCEEDED);
  j.record.set_global_step(300);
  j.record.set_start_time_ms(1000);
  j.record.set_end_time_ms(61000);
  j.points = {
      Point("test_accuracy", 0.70, 100, 1.0, 20000),
      Point("test_accuracy", 0.86, 200, 2.0, 40000),
      Point("test_accuracy", 0.85, 300, 3.0, 60000),
      Point("examples_per_sec", 1000, 100, 1, 20000, 1),
      Point("examples_per_sec", 1200, 200, 2, 40000, 1),
      Point("examples_per_sec", 500, 100, 1, 20000, 2),
      Point("staleness", 1, 100, 1, 20000, 1),
      Point("staleness", 3, 100, 1, 20000, 2),
      Point("dropped_pushes", 4, 300, 3, 60000, 0),
      Point("dropped_pushes", 7, 300, 3, 60000, 0),
      Point("train_loss", 1.0, 10, 0.01, 1000, 1),
      Point("train_loss", 0.5, 10, 0.02, 1100, 2),
  };
  JobEvent e;
  e.set_kind("evicted");
  j.events = {e, JobEvent()};
  return j;
}

TEST(Report, SummarizeComputesEveryColumn) {
  const JobSummary s = Summarize(TwoWorkerJob(), 0.85);
  EXPECT_EQ(s.name, "fmnist-bsp");
  EXPECT_EQ(s.state, "SUCCEEDED");
  EXPECT_DOUBLE_EQ(s.values.final_value, 0.85);
  EXPECT_DOUBLE_EQ(s.values.best_value, 0.86);
  EXPECT_DOUBLE_EQ(s.seconds_to_target, 40.0);
  EXPECT_EQ(s.steps_to_target, 200);
  EXPECT_DOUBLE_EQ(s.epochs_to_target, 2.0);
  EXPECT_DOUBLE_EQ(s.examples_per_sec, 1100 + 500);  // mean per worker, summed
  EXPECT_DOUBLE_EQ(s.mean_staleness, 2.0);
  EXPECT_EQ(s.dropped_pushes, 7);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_DOUBLE_EQ(s.wall_seconds, 60.0);
}

TEST(Report, TargetNeverReached) {
  const JobSummary s = Summarize(TwoWorkerJob(), 0.95);
  EXPECT_EQ(s.seconds_to_target, -1);
  EXPECT_EQ(s.steps_to_target, -1);
  const std::string table = FormatComparison({s}, {&AccuracyMetric(), 0.95});
  EXPECT_NE(table.find("never"), std::string::npos) << table;
  EXPECT_NE(table.find("t@0.95"), std::string::npos) << table;
}

// A job whose evaluator reported `series` of test metrics (name, values in
// time order: one point per 10 s, step 100 and epoch 1 apart).
JobData JobWith(
    const std::string& id,
    const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  JobData j;
  j.record.set_job_id(id);
  j.record.mutable_spec()->set_name(id + "-name");
  j.record.set_state(SUCCEEDED);
  for (const auto& [name, values] : series) {
    for (size_t i = 0; i < values.size(); ++i) {
      j.points.push_back(Point(name, values[i], 100 * (i + 1), 1.0 * (i + 1),
                               10000 * (i + 1), 0));
    }
  }
  return j;
}

TEST(Report, JobMetricFollowsTheSpecThenThePoints) {
  struct Case {
    std::vector<std::string> reported;
    std::string spec_metric;  // target { metric } ("" = none)
    float target_accuracy;
    std::string want;
  } cases[] = {
      {{"test_accuracy"}, "", 0, "accuracy"},
      {{"test_accuracy", "test_logloss", "test_auc"}, "", 0, "auc"},
      {{"test_logloss", "test_rmse"}, "", 0, "logloss"},
      {{"test_rmse"}, "", 0, "rmse"},
      {{}, "", 0, "accuracy"},  // nothing evaluated yet
      {{"train_loss"}, "", 0, "accuracy"},
      {{"test_auc", "test_logloss"}, "logloss", 0, "logloss"},
      {{"test_auc"}, "test_rmse", 0, "rmse"},  // the spec's word wins
      {{"test_auc", "test_accuracy"}, "", 0.9f, "accuracy"},
  };
  for (const Case& c : cases) {
    std::vector<std::pair<std::string, std::vector<double>>> series;
    for (const std::string& name : c.reported) series.push_back({name, {0.5}});
    JobData j = JobWith("j", series);
    if (!c.spec_metric.empty()) {
      j.record.mutable_spec()->mutable_target()->set_metric(c.spec_metric);
      j.record.mutable_spec()->mutable_target()->set_value(0.5);
    }
    j.record.mutable_spec()->set_target_accuracy(c.target_accuracy);
    EXPECT_EQ(JobMetric(j).name, c.want)
        << testing::PrintToString(c.reported) << " " << c.spec_metric;
  }
}

TEST(Report, EachMetricInItsDirection) {
  struct Case {
    const char* point_name;
    std::vector<double> values;
    double target;
    double want_final, want_best;
    double want_seconds;  // -1: not reached
  } cases[] = {
      {"test_auc", {0.70, 0.79, 0.81, 0.80}, 0.80, 0.80, 0.81, 30},
      {"test_auc", {0.70, 0.79}, 0.80, 0.79, 0.79, -1},
      {"test_logloss", {0.60, 0.47, 0.44, 0.46}, 0.45, 0.46, 0.44, 30},
      {"test_logloss", {0.60, 0.47}, 0.45, 0.47, 0.47, -1},
      {"test_rmse", {1.20, 0.95, 0.97}, 0.95, 0.97, 0.95, 20},  // meets at ==
      {"test_rmse", {1.20, 1.00, 0.96}, 0.95, 0.96, 0.96, -1},
      {"test_accuracy", {0.80, 0.86}, 0.85, 0.86, 0.86, 20},
      {"test_accuracy", {0.80, 0.84}, 0.85, 0.84, 0.84, -1},
      {"test_auc", {0.70, 0.90}, 0, 0.90, 0.90, -1},  // no target
  };
  for (const Case& c : cases) {
    const JobSummary s =
        Summarize(JobWith("j", {{c.point_name, c.values}}), c.target);
    const std::string what = absl::StrCat(c.point_name, " @", c.target);
    EXPECT_EQ(s.values.metric->point_name, c.point_name) << what;
    EXPECT_DOUBLE_EQ(s.values.final_value, c.want_final) << what;
    EXPECT_DOUBLE_EQ(s.values.best_value, c.want_best) << what;
    EXPECT_EQ(s.values.evaluations, static_cast<int64_t>(c.values.size()));
    EXPECT_DOUBLE_EQ(s.seconds_to_target, c.want_seconds) << what;
    if (c.want_seconds >= 0) {
      EXPECT_EQ(s.steps_to_target, 10 * c.want_seconds) << what;
      EXPECT_DOUBLE_EQ(s.epochs_to_target, c.want_seconds / 10) << what;
    } else {
      EXPECT_EQ(s.steps_to_target, -1) << what;
      EXPECT_EQ(s.epochs_to_target, -1) << what;
    }
  }
}

TEST(Report, PointsAreTakenInTimeOrder) {
  JobData j = JobWith("j", {});
  j.points = {Point("test_logloss", 0.40, 300, 3, 30000),
              Point("test_logloss", 0.70, 100, 1, 10000),
              Point("test_logloss", 0.50, 200, 2, 20000)};
  const JobSummary s = Summarize(j, 0.55);
  EXPECT_DOUBLE_EQ(s.values.final_value, 0.40);
  EXPECT_DOUBLE_EQ(s.values.best_value, 0.40);
  EXPECT_EQ(s.steps_to_target, 200);
}

TEST(Report, StatusLinesInTheSpecsTarget) {
  JobData j = JobWith("j", {{"test_auc", {0.70, 0.79, 0.81}},
                            {"test_logloss", {0.52, 0.47, 0.45}}});
  j.record.mutable_spec()->mutable_target()->set_metric("auc");
  j.record.mutable_spec()->mutable_target()->set_value(0.8);
  JobSummary s = Summarize(j);
  EXPECT_EQ(FormatMetricValues(s.values),
            "test AUC 0.8100 (best 0.8100, higher is better; 3 evaluations)");
  ASSERT_EQ(s.other_metrics.size(), 1u);
  EXPECT_EQ(FormatMetricValues(s.other_metrics[0]),
            "test logloss 0.4500 (best 0.4500, lower is better; 3 "
            "evaluations)");
  EXPECT_EQ(FormatTargetProgress(s),
            "auc >= 0.8: reached after 30s (step 300, epoch 3.00)");

  j.record.mutable_spec()->mutable_target()->set_value(0.9);
  EXPECT_EQ(FormatTargetProgress(Summarize(j)), "auc >= 0.9: not reached");

  j.record.mutable_spec()->mutable_target()->set_metric("logloss");
  j.record.mutable_spec()->mutable_target()->set_value(0.47);
  s = Summarize(j);
  EXPECT_EQ(s.values.metric->name, "logloss");
  EXPECT_EQ(FormatTargetProgress(s),
            "logloss <= 0.47: reached after 20s (step 200, epoch 2.00)");

  j.record.mutable_spec()->clear_target();  // no target: no target line
  EXPECT_EQ(FormatTargetProgress(Summarize(j)), "");

  const JobData fresh = JobWith("j", {});
  MetricValues none = Summarize(fresh).values;
  EXPECT_EQ(FormatMetricValues(none), "test accuracy - (no evaluation yet)");
}

TEST(Report, TheLastEvaluationOfTheFinalModelIsNamed) {
  JobData j = JobWith("j", {{"test_accuracy", {0.80, 0.86}}});
  for (MetricPoint& p : j.points) p.set_final_model(p.value() > 0.85);
  const JobSummary s = Summarize(j);
  EXPECT_TRUE(s.values.final_model);
  EXPECT_EQ(FormatMetricValues(s.values),
            "test accuracy 0.8600 (best 0.8600, higher is better; 2 "
            "evaluations, the last of the final model)");
}

TEST(Report, ComparisonMetricOfTheJobs) {
  JobData bsp = JobWith("bsp", {{"test_auc", {0.7}}, {"test_logloss", {0.5}}});
  JobData asp = JobWith("asp", {{"test_auc", {0.7}}, {"test_logloss", {0.5}}});
  asp.record.mutable_spec()->mutable_target()->set_metric("auc");
  asp.record.mutable_spec()->mutable_target()->set_value(0.78);
  JobData mnist = JobWith("mnist", {{"test_accuracy", {0.8}}});

  // One metric: the first spec target in it.
  absl::StatusOr<ComparisonMetric> cmp =
      ChooseComparisonMetric({bsp, asp}, "", 0);
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_EQ(cmp->metric->name, "auc");
  EXPECT_DOUBLE_EQ(cmp->target, 0.78);
  // --target wins over the specs'.
  cmp = ChooseComparisonMetric({bsp, asp}, "", 0.75);
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_DOUBLE_EQ(cmp->target, 0.75);
  // --metric picks one the specs set no target in.
  cmp = ChooseComparisonMetric({bsp, asp}, "test_logloss", 0);
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_EQ(cmp->metric->name, "logloss");
  EXPECT_EQ(cmp->target, 0);

  // Different metrics: refused, naming each job's, unless --metric.
  cmp = ChooseComparisonMetric({bsp, mnist}, "", 0);
  ASSERT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cmp.status().message(),
            "the jobs are judged by different metrics (bsp: auc, mnist: "
            "accuracy); compare them in one with --metric (auc, logloss, "
            "rmse, accuracy)");
  // A job not evaluated yet, with no target, takes the others' metric.
  const JobData fresh = JobWith("fresh", {});
  cmp = ChooseComparisonMetric({fresh, bsp}, "", 0);
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_EQ(cmp->metric->name, "auc");
  cmp = ChooseComparisonMetric({fresh}, "", 0);
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_EQ(cmp->metric->name, "accuracy");
  cmp = ChooseComparisonMetric({bsp, mnist}, "accuracy", 0.85);
  ASSERT_TRUE(cmp.ok()) << cmp.status();
  EXPECT_EQ(cmp->metric->name, "accuracy");

  // Bad flags.
  cmp = ChooseComparisonMetric({bsp}, "f1", 0);
  ASSERT_FALSE(cmp.ok());
  EXPECT_NE(cmp.status().message().find("--metric: unknown metric 'f1'"),
            std::string::npos)
      << cmp.status();
  cmp = ChooseComparisonMetric({bsp}, "", 1.5);
  ASSERT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.status().message(),
            "--target: for auc, must be in (0, 1], got 1.5");
  cmp = ChooseComparisonMetric({bsp}, "logloss", -0.3);
  ASSERT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.status().message(),
            "--target: for logloss, must be > 0, got -0.3");
}

TEST(Report, ComparisonTableInALowerIsBetterMetric) {
  const ComparisonMetric cmp{FindTestMetric("logloss"), 0.45};
  const JobData fast =
      JobWith("fast", {{"test_logloss", {0.60, 0.44}}, {"test_auc", {0.7}}});
  const JobData slow = JobWith("slow", {{"test_logloss", {0.60, 0.50}}});
  const JobData blind = JobWith("blind", {{"test_auc", {0.7}}});  // no logloss
  std::vector<JobSummary> rows;
  for (const JobData& j : {fast, slow, blind}) {
    rows.push_back(Summarize(j, *cmp.metric, cmp.target));
  }
  const std::string table = FormatComparison(rows, cmp);
  std::istringstream lines(table);
  std::string title, header, row_fast, row_slow, row_blind;
  std::getline(lines, title);
  std::getline(lines, header);
  std::getline(lines, row_fast);
  std::getline(lines, row_slow);
  std::getline(lines, row_blind);
  EXPECT_EQ(title,
            "metric: test logloss (lower is better); t@, steps@, epoch@: the "
            "first evaluation with logloss <= 0.45");
  EXPECT_NE(header.find(" t@0.45 "), std::string::npos) << header;
  EXPECT_NE(row_fast.find(" 0.4400  0.4400       20s      200    2.00 "),
            std::string::npos)
      << row_fast;
  EXPECT_NE(row_slow.find(" 0.5000  0.5000     never        -       - "),
            std::string::npos)
      << row_slow;
  EXPECT_NE(row_blind.find("       -       -         -        -       - "),
            std::string::npos)
      << row_blind;

  // No target: the title says how to set one and nobody is "never".
  const std::string untargeted =
      FormatComparison({rows[1]}, {FindTestMetric("logloss"), 0});
  EXPECT_NE(untargeted.find("no target (set target in the job spec, or "
                            "--target)"),
            std::string::npos)
      << untargeted;
  EXPECT_NE(untargeted.find(" t@- "), std::string::npos) << untargeted;
  EXPECT_EQ(untargeted.find("never"), std::string::npos) << untargeted;
}

TEST(Report, PlotsFollowTheMetric) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot not installed (tools/setup.sh installs it)";
  }
  struct Case {
    const char* metric;
    double target;
    const char* ylabel;
    const char* key;
  } cases[] = {
      {"auc", 0.8, "set ylabel 'test AUC (higher is better)'",
       "set key bottom right"},
      {"logloss", 0.45, "set ylabel 'test logloss (lower is better)'",
       "set key top right"},
      {"rmse", 0, "set ylabel 'test RMSE (lower is better)'",
       "set key top right"},
  };
  for (const Case& c : cases) {
    const TestMetricInfo& m = *FindTestMetric(c.metric);
    const std::string prefix = testing::TempDir() + "/plot-" + c.metric;
    JobData j = JobWith("job-1", {{std::string(m.point_name), {0.9, 0.7}},
                                  {"train_loss", {1.0, 0.5}}});
    ASSERT_TRUE(WritePlots({j}, {&m, c.target}, prefix).ok()) << c.metric;
    EXPECT_GT(std::filesystem::file_size(prefix + ".png"), 1000u) << c.metric;
    std::ifstream data(prefix + "-job_1-" + c.metric + ".dat");
    std::stringstream data_text;
    data_text << data.rdbuf();
    EXPECT_EQ(data_text.str(),
              absl::StrCat("# time_s epoch step ", m.point_name,
                           "\n10 1 100 0.9\n20 2 200 0.7\n"));
    std::ifstream gp(prefix + ".gp");
    std::stringstream script;
    script << gp.rdbuf();
    EXPECT_NE(script.str().find(c.ylabel), std::string::npos) << script.str();
    EXPECT_NE(script.str().find(c.key), std::string::npos) << script.str();
    EXPECT_NE(script.str().find("set ylabel 'training loss'"),
              std::string::npos);
    EXPECT_EQ(script.str().find("dashtype 2") != std::string::npos,
              c.target > 0)
        << script.str();
  }
}

TEST(Report, PlotsOfJobsWithoutPoints) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot not installed (tools/setup.sh installs it)";
  }
  // Nothing evaluated in the metric and no training loss: gnuplot would
  // refuse an empty plot, so each panel says what is missing.
  const JobData blind = JobWith("blind", {{"test_auc", {0.7}}});
  for (double target : {0.0, 0.9}) {
    const std::string prefix =
        absl::StrCat(testing::TempDir(), "/empty-", target > 0);
    const absl::Status s =
        WritePlots({blind}, {FindTestMetric("rmse"), target}, prefix);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_GT(std::filesystem::file_size(prefix + ".png"), 1000u);
    std::ifstream gp(prefix + ".gp");
    std::stringstream script;
    script << gp.rdbuf();
    EXPECT_NE(script.str().find("no test RMSE reported"), std::string::npos)
        << script.str();
    EXPECT_NE(script.str().find("no training loss reported"), std::string::npos)
        << script.str();
    EXPECT_EQ(script.str().find("blind-rmse.dat"), std::string::npos)
        << script.str();
  }
}

TEST(Report, ProgressLine) {
  JobRecord r;
  r.set_global_step(250);
  r.set_total_steps(1000);
  r.set_epoch(2.5);
  r.set_last_train_loss(0.4321);
  r.set_last_test_accuracy(0.8512);
  r.set_examples_per_sec(1500);
  const std::string line = ProgressLine(r, 60, 20);
  EXPECT_NE(line.find("[#####...............]"), std::string::npos) << line;
  EXPECT_NE(line.find(" 25%"), std::string::npos) << line;
  EXPECT_NE(line.find("step 250/1000"), std::string::npos) << line;
  EXPECT_NE(line.find("loss 0.4321"), std::string::npos) << line;
  EXPECT_NE(line.find("acc 0.8512"), std::string::npos) << line;
  EXPECT_NE(line.find("1500 ex/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 3m00s"), std::string::npos) << line;
}

JobSpec SpecWithHead(HeadSpec::Loss loss) {
  JobSpec spec;
  spec.mutable_model()->mutable_head()->set_loss(loss);
  return spec;
}

std::vector<std::string> Names(
    const std::vector<const TestMetricInfo*>& metrics) {
  std::vector<std::string> names;
  for (const TestMetricInfo* m : metrics) names.emplace_back(m->name);
  return names;
}

TEST(Report, ShownMetricsFollowTheHeadAndTheTarget) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Names(ShownMetrics(SpecWithHead(HeadSpec::SIGMOID_CROSS_ENTROPY))),
            (V{"auc", "logloss"}));
  EXPECT_EQ(Names(ShownMetrics(SpecWithHead(HeadSpec::MEAN_SQUARED_ERROR))),
            (V{"rmse"}));
  EXPECT_EQ(Names(ShownMetrics(SpecWithHead(HeadSpec::SOFTMAX_CROSS_ENTROPY))),
            (V{"accuracy"}));
  // The MlpSpec shorthand: a softmax head.
  EXPECT_EQ(Names(ShownMetrics(JobSpec())), (V{"accuracy"}));
  // The target's metric first, not twice.
  JobSpec ctr = SpecWithHead(HeadSpec::SIGMOID_CROSS_ENTROPY);
  ctr.mutable_target()->set_metric("logloss");
  ctr.mutable_target()->set_value(0.45);
  EXPECT_EQ(Names(ShownMetrics(ctr)), (V{"logloss", "auc"}));
  JobSpec mlp;
  mlp.set_target_accuracy(0.85f);
  EXPECT_EQ(Names(ShownMetrics(mlp)), (V{"accuracy"}));
}

TEST(Report, LatestValuesByTime) {
  const std::vector<const TestMetricInfo*> metrics =
      ShownMetrics(SpecWithHead(HeadSpec::SIGMOID_CROSS_ENTROPY));
  // Out of time order, as points of two reports may come.
  const std::vector<LiveMetric> v =
      LatestValues({Point("test_auc", 0.79, 400, 0.4, 9000),
                    Point("test_auc", 0.75, 200, 0.2, 5000),
                    Point("test_accuracy", 0.9, 400, 0.4, 9000)},
                   metrics);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].metric->name, "auc");
  EXPECT_DOUBLE_EQ(v[0].value, 0.79);
  EXPECT_EQ(v[1].metric->name, "logloss");
  EXPECT_TRUE(std::isnan(v[1].value));
  EXPECT_EQ(FormatLiveMetric(v[0]), "auc 0.7900");
  EXPECT_EQ(FormatLiveMetric(v[1]), "logloss -");
}

TEST(Report, ProgressLineNamesTheJobsMetric) {
  JobRecord r;
  *r.mutable_spec() = SpecWithHead(HeadSpec::SIGMOID_CROSS_ENTROPY);
  r.set_global_step(250);
  r.set_total_steps(1000);
  r.set_last_train_loss(0.31);
  // What the evaluator's accuracy on a 10% CTR looks like: not the metric.
  r.set_last_test_accuracy(0.9001);
  const std::vector<const TestMetricInfo*> metrics = ShownMetrics(r.spec());
  const std::string before = ProgressLine(r, 60, 20);
  EXPECT_NE(before.find(" auc - logloss - "), std::string::npos) << before;
  EXPECT_EQ(before.find(" acc "), std::string::npos) << before;
  const std::string line =
      ProgressLine(r,
                   LatestValues({Point("test_auc", 0.7712, 200, 0.2, 5000),
                                 Point("test_logloss", 0.2822, 200, 0.2, 5000)},
                                metrics),
                   60, 20);
  EXPECT_NE(line.find(" auc 0.7712 logloss 0.2822 "), std::string::npos)
      << line;
  EXPECT_EQ(line.find("0.9001"), std::string::npos) << line;

  JobRecord mf;
  *mf.mutable_spec() = SpecWithHead(HeadSpec::MEAN_SQUARED_ERROR);
  const std::string rmse =
      ProgressLine(mf,
                   LatestValues({Point("test_rmse", 0.88, 10, 1, 100)},
                                ShownMetrics(mf.spec())),
                   1, 20);
  EXPECT_NE(rmse.find(" rmse 0.8800 "), std::string::npos) << rmse;
  EXPECT_EQ(rmse.find(" acc"), std::string::npos) << rmse;
}

TEST(Report, ProgressLineOfATextJobGoesByEpochs) {
  JobRecord r;
  *r.mutable_spec() = SpecWithHead(HeadSpec::SIGMOID_CROSS_ENTROPY);
  r.mutable_spec()->mutable_data()->set_format(DataSpec::CRITEO);
  r.mutable_spec()->mutable_data()->set_epochs(2);
  r.set_global_step(960);
  r.set_total_steps(0);  // the coordinator does not know it
  r.set_epoch(0.5);
  r.set_examples_per_sec(30000);
  std::string line = ProgressLine(r, 60, 20);
  EXPECT_NE(line.find("[#####...............]  25% epoch 0.50/2 step 960 "),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("/0"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 3m00s"), std::string::npos) << line;
  EXPECT_EQ(line.find("examples"), std::string::npos) << line;
  // Examples, when the coordinator counts them.
  r.set_examples_trained(491520);
  line = ProgressLine(r, 60, 20);
  EXPECT_NE(line.find("step 960 491520 examples loss"), std::string::npos)
      << line;
  // epochs unset: one epoch.
  r.mutable_spec()->mutable_data()->clear_epochs();
  line = ProgressLine(r, 60, 20);
  EXPECT_NE(line.find(" 50% epoch 0.50/1 step 960"), std::string::npos) << line;
  // Ended by max_steps, total unknown: no fraction to show.
  r.mutable_spec()->mutable_data()->set_max_steps(5000);
  line = ProgressLine(r, 60, 20);
  EXPECT_NE(line.find("[....................] epoch 0.50 step 960 "),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find('%'), std::string::npos) << line;
  EXPECT_EQ(line.find("ETA"), std::string::npos) << line;
}

TEST(Report, FormatDuration) {
  EXPECT_EQ(FormatDuration(5), "5s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(Report, SparseTablesPerShard) {
  EXPECT_EQ(FormatSparseTables({}), "");
  ShardStatus no_tables;
  EXPECT_EQ(FormatSparseTables({no_tables}), "");

  // Shards answer in any order; lines go by table, then shard index.
  ShardStatus s1, s0;
  s1.set_shard_index(1);
  s0.set_shard_index(0);
  for (ShardStatus* s : {&s1, &s0}) {
    SparseTableStatus* emb = s->add_sparse_tables();
    emb->set_name("emb");
    emb->set_rows(1000 + s->shard_index());
    emb->set_capacity(5000);
    emb->set_bytes(3 << 20);
    emb->set_evictions(7 + s->shard_index());
    emb->set_admissions(11);
    emb->set_rows_pushed(400);
    emb->set_rows_pulled(900);
    emb->set_dropped_gradients(13);
    emb->set_rejected_gradients(2);
  }
  SparseTableStatus* wide = s0.add_sparse_tables();
  wide->set_name("wide");
  wide->set_rows(5);
  const std::string text = FormatSparseTables({s1, s0});
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << text;
  EXPECT_EQ(lines[0].find("sparse"), 0u);
  for (const char* column : {"rows", "capacity", "MiB", "evicted", "admitted",
                             "dropped", "rejected"}) {
    EXPECT_NE(lines[0].find(column), std::string::npos) << column;
  }
  auto words = [](const std::string& line) {
    std::vector<std::string> w;
    std::istringstream s(line);
    for (std::string x; s >> x;) w.push_back(x);
    return w;
  };
  EXPECT_EQ(words(lines[1]),
            (std::vector<std::string>{"emb", "0", "1000", "5000", "3.0", "7",
                                      "11", "400", "900", "13", "2"}));
  EXPECT_EQ(words(lines[2]),
            (std::vector<std::string>{"emb", "1", "1001", "5000", "3.0", "8",
                                      "11", "400", "900", "13", "2"}));
  EXPECT_EQ(words(lines[3]),
            (std::vector<std::string>{"wide", "0", "5", "-", "0.0", "0", "0",
                                      "0", "0", "0", "0"}));
}

TEST(Report, WritesPngAndSvg) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot not installed (tools/setup.sh installs it)";
  }
  const std::string prefix = testing::TempDir() + "/cmp";
  JobData a = TwoWorkerJob();
  JobData b = TwoWorkerJob();
  b.record.set_job_id("job-2");
  b.record.mutable_spec()->set_name("fmnist-asp");
  ASSERT_TRUE(WritePlots({a, b}, {&AccuracyMetric(), 0.85}, prefix).ok());
  for (const char* ext : {".png", ".svg"}) {
    EXPECT_GT(std::filesystem::file_size(prefix + ext), 1000u) << ext;
  }
  // What replots them stays; gnuplot's empty log does not.
  for (const std::string& file : {prefix + ".gp", prefix + "-job_2-acc.dat",
                                  prefix + "-job_2-loss.dat"}) {
    EXPECT_TRUE(std::filesystem::exists(file)) << file;
  }
  EXPECT_FALSE(std::filesystem::exists(prefix + ".gnuplot.log"));
}

// A long job of two workers as reported (`full`) and as a coordinator
// keeping `cap` points per series gives it (`thinned`).
struct LongJob {
  JobData full, thinned;
};

LongJob LongTwoWorkerJob(int cap) {
  LongJob j;
  coordinator::MetricSeriesSet series(cap);
  auto add = [&](MetricPoint p) {
    series.Add(p);
    j.full.points.push_back(std::move(p));
  };
  for (int64_t step = 1; step <= 4000; ++step) {
    const double epoch = step / 1000.0;
    const int64_t t = step * 100;
    for (int64_t member : {1, 2}) {
      add(Point("train_loss", 1.0 / step + 0.01 * member, step, epoch, t,
                member));
      add(Point("examples_per_sec", 1000 * member + (step % 7) * 10, step,
                epoch, t, member));
      add(Point("staleness", step % 3, step, epoch, t, member));
    }
    if (step % 20 == 0) {
      // AUC peaks at 0.81 at step 1000 and ends at 0.79.
      const double auc = step == 1000 ? 0.81 : 0.79 - 0.1 / (step / 20);
      add(Point("test_auc", auc, step, epoch, t, 1));
    }
  }
  j.full.record.set_job_id("job-1");
  j.full.record.set_state(SUCCEEDED);
  j.thinned.record = j.full.record;
  j.thinned.points = series.Points();
  j.thinned.record.set_metric_points_reported(series.reported());
  j.thinned.record.set_metric_points_kept(series.size());
  return j;
}

TEST(Report, ThinnedSeriesSummariseAsReported) {
  const LongJob j = LongTwoWorkerJob(64);
  ASSERT_LT(j.thinned.points.size(), j.full.points.size() / 10);
  const TestMetricInfo& auc = *FindTestMetric("auc");
  const JobSummary full = Summarize(j.full, auc, 0.8);
  const JobSummary thinned = Summarize(j.thinned, auc, 0.8);
  EXPECT_DOUBLE_EQ(full.values.final_value, thinned.values.final_value);
  EXPECT_DOUBLE_EQ(thinned.values.best_value, 0.81) << "the peak is kept";
  EXPECT_EQ(thinned.values.evaluations, full.values.evaluations);
  EXPECT_EQ(thinned.values.evaluations, 200);
  EXPECT_NEAR(thinned.examples_per_sec, full.examples_per_sec,
              1e-9 * full.examples_per_sec);
  EXPECT_NEAR(thinned.mean_staleness, full.mean_staleness, 1e-9);
  // The target was met once, at step 1000: a merged point around it says so.
  EXPECT_EQ(full.steps_to_target, 1000);
  ASSERT_GT(thinned.steps_to_target, 0);
  EXPECT_NEAR(thinned.steps_to_target, 1000, 4000 / 64 * 20);
  EXPECT_EQ(FormatThinnedSeries(j.full.record), "");
  EXPECT_EQ(FormatThinnedSeries(j.thinned.record),
            absl::StrCat(j.full.points.size(), " metric points reported, ",
                         j.thinned.points.size(),
                         " kept: older points of long series merged "
                         "(coordinator --max_points_per_series)"));
}

TEST(Report, PlotsOfThinnedSeries) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot not installed (tools/setup.sh installs it)";
  }
  const LongJob j = LongTwoWorkerJob(64);
  JobData full = j.full;
  full.record.set_job_id("job-2");
  const std::string prefix = testing::TempDir() + "/thinned";
  ASSERT_TRUE(
      WritePlots({j.thinned, full}, {FindTestMetric("auc"), 0.8}, prefix).ok());
  EXPECT_GT(std::filesystem::file_size(prefix + ".png"), 1000u);
  // The loss curve: 0.1-epoch bins, each the mean of the points in it,
  // weighted by what they stand for.
  auto lines = [](const std::string& file) {
    std::ifstream in(file);
    std::vector<std::vector<double>> rows;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::vector<double> row;
      double v;
      while (fields >> v) row.push_back(v);
      rows.push_back(row);
    }
    return rows;
  };
  const auto thinned = lines(prefix + "-job_1-loss.dat");
  const auto reported = lines(prefix + "-job_2-loss.dat");
  ASSERT_FALSE(reported.empty());
  // A merged point sits in the bin of its mean epoch; where merged points
  // span more than a bin (here 128 points, 0.128 epochs) some bins stay
  // empty. The newest bins are as reported.
  ASSERT_FALSE(thinned.empty());
  EXPECT_LE(thinned.size(), reported.size());
  EXPECT_GE(thinned.size(), reported.size() / 2);
  for (const std::vector<double>& bin : thinned) {
    bool found = false;
    for (const std::vector<double>& r : reported) found |= r[1] == bin[1];
    EXPECT_TRUE(found) << "epoch " << bin[1];
  }
  EXPECT_EQ(thinned.back(), reported.back());
  EXPECT_EQ(lines(prefix + "-job_1-auc.dat").back(),
            lines(prefix + "-job_2-auc.dat").back());
}

TEST(Report, DataProgressCountsTrainedAndSkippedExamples) {
  JobRecord r;
  EXPECT_EQ(FormatDataProgress(r), "") << "a job without data plans";
  r.set_examples_total(60000);
  r.set_examples_trained(57600);
  EXPECT_EQ(FormatDataProgress(r), "57600/60000 examples trained (96.0%)");
  r.set_examples_skipped(2400);
  EXPECT_EQ(FormatDataProgress(r),
            "57600/60000 examples trained (96.0%), 2400 skipped");
}

}  // namespace
}  // namespace ps::psctl
