#include "server/coordinator/metrics_format.h"

#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace ps::coordinator {
namespace {

std::string CsvNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.9g", v);
}

std::string CsvField(absl::string_view s) {
  if (s.find_first_of(",\"\n\r") == absl::string_view::npos) {
    return std::string(s);
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

// NaN and Inf become null: JSON has neither.
nlohmann::ordered_json JsonNumber(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

}  // namespace

std::string FormatMetricsCsv(absl::string_view job_id,
                             absl::Span<const MetricPoint> points) {
  std::string out =
      "job_id,name,step,epoch,time_ms,member_id,value,incarnation\n";
  const std::string id = CsvField(job_id);
  for (const MetricPoint& p : points) {
    absl::StrAppend(&out, id, ",", CsvField(p.name()), ",", p.step(), ",",
                    CsvNumber(p.epoch()), ",", p.time_ms(), ",", p.member_id(),
                    ",", CsvNumber(p.value()), ",", p.incarnation(), "\n");
  }
  return out;
}

std::string FormatMetricsJson(absl::string_view job_id,
                              absl::Span<const MetricPoint> points) {
  // Series in name order; a point's fields in the order documented.
  std::map<std::string, std::vector<const MetricPoint*>> by_name;
  for (const MetricPoint& p : points) by_name[p.name()].push_back(&p);
  nlohmann::ordered_json series = nlohmann::ordered_json::object();
  for (const auto& [name, list] : by_name) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const MetricPoint* p : list) {
      nlohmann::ordered_json point = {{"step", p->step()},
                                      {"epoch", JsonNumber(p->epoch())},
                                      {"time_ms", p->time_ms()},
                                      {"member_id", p->member_id()},
                                      {"value", JsonNumber(p->value())},
                                      {"incarnation", p->incarnation()}};
      if (p->merged() > 1) {
        point["merged"] = p->merged();
        point["min_value"] = JsonNumber(p->min_value());
        point["max_value"] = JsonNumber(p->max_value());
      }
      out.push_back(std::move(point));
    }
    series[name] = std::move(out);
  }
  nlohmann::ordered_json doc = {{"job_id", std::string(job_id)},
                                {"series", std::move(series)}};
  // Names and ids a worker sent that are not UTF-8 are replaced (U+FFFD),
  // not a throw.
  return doc.dump(-1, ' ', false,
                  nlohmann::ordered_json::error_handler_t::replace) +
         "\n";
}

absl::StatusOr<std::string> FormatMetrics(
    absl::string_view format, absl::string_view job_id,
    absl::Span<const MetricPoint> points) {
  const std::string f = absl::AsciiStrToLower(format);
  if (f == "csv") return FormatMetricsCsv(job_id, points);
  if (f == "json") return FormatMetricsJson(job_id, points);
  return absl::InvalidArgumentError(absl::StrCat(
      "format: must be \"csv\" or \"json\", got \"", format, "\""));
}

}  // namespace ps::coordinator
