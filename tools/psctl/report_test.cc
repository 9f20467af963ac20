#include "tools/psctl/report.h"

#include <gtest/gtest.h>

#include <filesystem>

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
  EXPECT_DOUBLE_EQ(s.final_accuracy, 0.85);
  EXPECT_DOUBLE_EQ(s.best_accuracy, 0.86);
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
  const std::string table = FormatComparison({s}, 0.95);
  EXPECT_NE(table.find("never"), std::string::npos) << table;
  EXPECT_NE(table.find("t@0.95"), std::string::npos) << table;
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

TEST(Report, FormatDuration) {
  EXPECT_EQ(FormatDuration(5), "5s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "?");
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
  ASSERT_TRUE(WritePlots({a, b}, prefix).ok());
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

}  // namespace
}  // namespace ps::psctl
