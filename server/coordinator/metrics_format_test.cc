#include "server/coordinator/metrics_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "nlohmann/json.hpp"

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
  points.push_back(
      Point("train_loss", std::numeric_limits<double>::infinity(), 4));
  const std::string json = FormatMetricsJson("job-\"1", points);
  EXPECT_EQ(json,
            "{\"job_id\":\"job-\\\"1\",\"series\":{"
            "\"test_accuracy\":[{\"step\":2,\"epoch\":0.5,\"time_ms\":1002,"
            "\"member_id\":3,\"value\":0.5,\"incarnation\":0}],"
            "\"train_loss\":[{\"step\":1,\"epoch\":0.5,\"time_ms\":1001,"
            "\"member_id\":3,\"value\":2.25,\"incarnation\":0},"
            "{\"step\":3,\"epoch\":0.5,\"time_ms\":1003,\"member_id\":3,"
            "\"value\":null,\"incarnation\":0},"
            "{\"step\":4,\"epoch\":0.5,\"time_ms\":1004,\"member_id\":3,"
            "\"value\":null,\"incarnation\":0}]}}\n");
  // And it reads back as the same document.
  const nlohmann::json doc = nlohmann::json::parse(json);
  EXPECT_EQ(doc["job_id"], "job-\"1");
  EXPECT_EQ(doc["series"]["train_loss"].size(), 3u);
  EXPECT_TRUE(doc["series"]["train_loss"][1]["value"].is_null());
}

TEST(MetricsFormat, JsonShowsMergedPoints) {
  MetricPoint p = Point("train_loss", 2.5, 4);
  p.set_merged(4);
  p.set_min_value(2);
  p.set_max_value(3);
  EXPECT_EQ(FormatMetricsJson("j", {p}),
            "{\"job_id\":\"j\",\"series\":{"
            "\"train_loss\":[{\"step\":4,\"epoch\":0.5,\"time_ms\":1004,"
            "\"member_id\":3,\"value\":2.5,\"incarnation\":0,"
            "\"merged\":4,\"min_value\":2.0,\"max_value\":3.0}]}}\n");
}

// Names and ids come from workers and users: whatever bytes they hold, the
// output parses and gives them back (bytes that are not UTF-8 replaced).
TEST(MetricsFormat, JsonEscapesAnyName) {
  struct Case {
    std::string name;  // as sent
    std::string read;  // as a JSON parser reads it back
  };
  const std::vector<Case> cases = {
      {"quote\"back\\slash", "quote\"back\\slash"},
      {"new\nline\ttab\r", "new\nline\ttab\r"},
      {std::string("nul\0bell\x07", 9), std::string("nul\0bell\x07", 9)},
      {"</script><b>", "</script><b>"},
      {"utf8 \xc3\xa9\xe2\x82\xac", "utf8 \xc3\xa9\xe2\x82\xac"},
      {"bad \xff\xfe", "bad \xef\xbf\xbd\xef\xbf\xbd"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.read);
    const std::string json = FormatMetricsJson(c.name, {Point(c.name, 1.0, 1)});
    EXPECT_EQ(json.find('\n'), json.size() - 1) << json;
    const nlohmann::json doc =
        nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc.is_discarded()) << json;
    EXPECT_EQ(doc["job_id"], c.read);
    ASSERT_TRUE(doc["series"].contains(c.read)) << json;
    EXPECT_EQ(doc["series"][c.read][0]["value"], 1.0);
  }
}

TEST(MetricsFormat, JsonNumbersReadBackExactly) {
  const std::vector<double> values = {0.1, 1.0 / 3, 1e-300, -2.5e17,
                                      0.123456789012345678};
  std::vector<MetricPoint> points;
  for (size_t i = 0; i < values.size(); ++i) {
    points.push_back(Point("v", values[i], static_cast<int64_t>(i)));
  }
  points[0].set_step(int64_t{1} << 53);
  const nlohmann::json doc =
      nlohmann::json::parse(FormatMetricsJson("j", points));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(doc["series"]["v"][i]["value"].get<double>(), values[i]);
  }
  EXPECT_EQ(doc["series"]["v"][0]["step"].get<int64_t>(), int64_t{1} << 53);
}

TEST(MetricsFormat, EmptyAndUnknownFormat) {
  EXPECT_EQ(FormatMetricsJson("j", {}), "{\"job_id\":\"j\",\"series\":{}}\n");
  EXPECT_EQ(*FormatMetrics("CSV", "j", {}),
            "job_id,name,step,epoch,time_ms,member_id,value,incarnation\n");
  auto bad = FormatMetrics("xml", "j", {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("format"), std::string::npos);
}

}  // namespace
}  // namespace ps::coordinator
