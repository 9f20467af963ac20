#include "server/coordinator/metrics_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace ps::coordinator {
namespace {

MetricPoint Point(const std::string& name, double value, int64_t step) {
  MetricPoint p;
  p.set_name(name);
  p.set_value(value);
  p.set_step(step);
  p.set_epoch(0.5);
  p.set_time_ms(1000 + step);
  p.set_member_id(3);
  return p;
}

TEST(MetricsFormat, Csv) {
  std::vector<MetricPoint> points = {Point("train_loss", 2.25, 1),
                                     Point("test_accuracy", 0.5, 2)};
  points[1].set_incarnation(1);
  EXPECT_EQ(FormatMetricsCsv("job-1", points),
            "job_id,name,step,epoch,time_ms,member_id,value,incarnation\n"
            "job-1,train_loss,1,0.5,1001,3,2.25,0\n"
            "job-1,test_accuracy,2,0.5,1002,3,0.5,1\n");
}

TEST(MetricsFormat, JsonGroupsSeriesAndNullsNonFinite) {
  std::vector<MetricPoint> points = {
      Point("train_loss", 2.25, 1), Point("test_accuracy", 0.5, 2),
      Point("train_loss", std::numeric_limits<double>::quiet_NaN(), 3)};
  const std::string json = FormatMetricsJson("job-\"1", points);
  EXPECT_EQ(
      json,
      "{\"job_id\": \"job-\\\"1\", \"series\": {\n"
      "  \"test_accuracy\": [{\"step\": 2, \"epoch\": 0.5, \"time_ms\": "
      "1002, \"member_id\": 3, \"value\": 0.5, \"incarnation\": 0}], \n"
      "  \"train_loss\": [{\"step\": 1, \"epoch\": 0.5, \"time_ms\": "
      "1001, \"member_id\": 3, \"value\": 2.25, \"incarnation\": 0}, "
      "{\"step\": 3, \"epoch\": 0.5, \"time_ms\": 1003, \"member_id\": 3, "
      "\"value\": null, \"incarnation\": 0}]\n}}\n");
}

TEST(MetricsFormat, JsonShowsMergedPoints) {
  MetricPoint p = Point("train_loss", 2.5, 4);
  p.set_merged(4);
  p.set_min_value(2);
  p.set_max_value(3);
  EXPECT_EQ(FormatMetricsJson("j", {p}),
            "{\"job_id\": \"j\", \"series\": {\n"
            "  \"train_loss\": [{\"step\": 4, \"epoch\": 0.5, \"time_ms\": "
            "1004, \"member_id\": 3, \"value\": 2.5, \"incarnation\": 0, "
            "\"merged\": 4, \"min_value\": 2, \"max_value\": 3}]\n}}\n");
}

TEST(MetricsFormat, EmptyAndUnknownFormat) {
  EXPECT_EQ(FormatMetricsJson("j", {}),
            "{\"job_id\": \"j\", \"series\": {}}\n");
  EXPECT_EQ(*FormatMetrics("CSV", "j", {}),
            "job_id,name,step,epoch,time_ms,member_id,value,incarnation\n");
  auto bad = FormatMetrics("xml", "j", {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("format"), std::string::npos);
}

}  // namespace
}  // namespace ps::coordinator
