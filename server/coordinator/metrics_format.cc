#include "server/coordinator/metrics_format.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps::coordinator {
namespace {

std::string Number(double v, bool json) {
  if (std::isnan(v)) return json ? "null" : "nan";
  if (std::isinf(v)) return json ? "null" : (v > 0 ? "inf" : "-inf");
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

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace

std::string FormatMetricsCsv(absl::string_view job_id,
                             absl::Span<const MetricPoint> points) {
  std::string out =
      "job_id,name,step,epoch,time_ms,member_id,value,incarnation\n";
  const std::string id = CsvField(job_id);
  for (const MetricPoint& p : points) {
    absl::StrAppend(&out, id, ",", CsvField(p.name()), ",", p.step(), ",",
                    Number(p.epoch(), false), ",", p.time_ms(), ",",
                    p.member_id(), ",", Number(p.value(), false), ",",
                    p.incarnation(), "\n");
  }
  return out;
}

std::string FormatMetricsJson(absl::string_view job_id,
                              absl::Span<const MetricPoint> points) {
  std::map<std::string, std::vector<const MetricPoint*>> series;
  for (const MetricPoint& p : points) series[p.name()].push_back(&p);
  std::string out =
      absl::StrCat("{\"job_id\": ", JsonString(job_id), ", \"series\": {");
  bool first_series = true;
  for (const auto& [name, list] : series) {
    absl::StrAppend(&out, first_series ? "" : ", ", "\n  ", JsonString(name),
                    ": [");
    first_series = false;
    bool first = true;
    for (const MetricPoint* p : list) {
      absl::StrAppend(&out, first ? "" : ", ", "{\"step\": ", p->step(),
                      ", \"epoch\": ", Number(p->epoch(), true),
                      ", \"time_ms\": ", p->time_ms(),
                      ", \"member_id\": ", p->member_id(),
                      ", \"value\": ", Number(p->value(), true),
                      ", \"incarnation\": ", p->incarnation());
      if (p->merged() > 1) {
        absl::StrAppend(&out, ", \"merged\": ", p->merged(),
                        ", \"min_value\": ", Number(p->min_value(), true),
                        ", \"max_value\": ", Number(p->max_value(), true));
      }
      out += "}";
      first = false;
    }
    out += "]";
  }
  out += first_series ? "}}\n" : "\n}}\n";
  return out;
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
