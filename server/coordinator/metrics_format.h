// Export of a job's metric series as CSV or JSON: the coordinator uses it for
// GetMetrics(format), and psctl may link it to format points it already has.
#ifndef PS_SERVER_COORDINATOR_METRICS_FORMAT_H_
#define PS_SERVER_COORDINATOR_METRICS_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/coordinator_service.pb.h"

namespace ps::coordinator {

// One line per point, in the order given, after the header
// "job_id,name,step,epoch,time_ms,member_id,value,incarnation" (a merged
// point's value, step, epoch and time are its means; only JSON tells it
// apart). Values print with 9 significant digits; NaN and Inf print as
// "nan", "inf", "-inf".
std::string FormatMetricsCsv(absl::string_view job_id,
                             absl::Span<const MetricPoint> points);

// {"job_id": "...", "series": {"<name>": [{"step": s, "epoch": e,
// "time_ms": t, "member_id": m, "value": v, "incarnation": i}, ...], ...}}:
// series in name order, points in the order given; a merged point
// (MetricPoint.merged > 1) also has "merged", "min_value" and "max_value".
// NaN and Inf become null (JSON has none). Printed by nlohmann-json on one
// line (numbers as the shortest text that reads back the same double;
// strings escaped by the library, bytes that are not UTF-8 replaced by
// U+FFFD), ending in a newline.
std::string FormatMetricsJson(absl::string_view job_id,
                              absl::Span<const MetricPoint> points);

// "csv" or "json" (case-insensitive); INVALID_ARGUMENT otherwise.
absl::StatusOr<std::string> FormatMetrics(absl::string_view format,
                                          absl::string_view job_id,
                                          absl::Span<const MetricPoint> points);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_METRICS_FORMAT_H_
