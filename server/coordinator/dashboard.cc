#include "server/coordinator/dashboard.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/spec/config.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/dashboard_assets.h"
#include "server/coordinator/metrics_format.h"

namespace ps::coordinator {
namespace {

constexpr char kJson[] = "application/json";

HttpResponse ErrorResponse(const absl::Status& status) {
  HttpResponse r;
  r.status = HttpStatusOf(status.code());
  nlohmann::json body = {{"error",
                          {{"code", absl::StatusCodeToString(status.code())},
                           {"message", std::string(status.message())}}}};
  // A message may quote a peer's bytes: invalid UTF-8 is replaced, not a
  // throw.
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  r.body += "\n";
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"ps\"");
  }
  return r;
}

absl::StatusOr<HttpResponse> JsonResponse(
    const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  HttpResponse r;
  auto s =
      google::protobuf::util::MessageToJsonString(message, &r.body, options);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print JSON: ", s.ToString()));
  }
  r.body += "\n";
  return r;
}

HttpResponse Asset(absl::string_view content_type, absl::string_view body) {
  HttpResponse r;
  r.content_type = std::string(content_type);
  r.body = std::string(body);
  return r;
}

// INVALID_ARGUMENT for a parameter outside `allowed` (the token may come
// with any request) or one given twice.
absl::Status CheckQuery(const HttpRequest& request,
                        const std::set<std::string>& allowed,
                        const std::set<std::string>& repeatable = {}) {
  for (auto it = request.query.begin(); it != request.query.end();
       it = request.query.upper_bound(it->first)) {
    const std::string& name = it->first;
    if (name == "token") continue;
    if (allowed.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown query parameter \"", name, "\" for ", request.path,
          allowed.empty() ? " (it takes none)"
                          : absl::StrCat(" (allowed: ",
                                         absl::StrJoin(allowed, ", "), ")")));
    }
    if (repeatable.count(name) == 0 && request.query.count(name) > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter \"", name, "\" given more than once"));
    }
  }
  return absl::OkStatus();
}

std::string QueryValue(const HttpRequest& request, const std::string& name) {
  auto it = request.query.find(name);
  return it == request.query.end() ? "" : it->second;
}

absl::StatusOr<bool> ParseBool(const std::string& name,
                               const std::string& value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0" || v.empty()) return false;
  return absl::InvalidArgumentError(
      absl::StrCat("query parameter \"", name,
                   "\": must be true or false, got \"", value, "\""));
}

constexpr int kMinMaxPoints = 2;

// Keeps at most `max_points` evenly spaced points of each series (a name
// from one worker in one incarnation), its first and last among them, in
// their order: a page polling a long job draws the same curves from a
// bounded answer.
void Thin(int max_points, GetMetricsResponse* metrics) {
  using Key = std::tuple<std::string, int64_t, int64_t>;
  std::map<Key, std::vector<int>> series;
  for (int i = 0; i < metrics->points_size(); ++i) {
    const MetricPoint& p = metrics->points(i);
    series[{p.name(), p.member_id(), p.incarnation()}].push_back(i);
  }
  std::vector<bool> keep(metrics->points_size(), false);
  for (const auto& [key, indices] : series) {
    const size_t n = indices.size();
    const size_t m = std::min(n, static_cast<size_t>(max_points));
    for (size_t k = 0; k < m; ++k) {
      // k = 0 and k = m - 1 give the first and the last point.
      keep[indices[m == 1 ? 0 : k * (n - 1) / (m - 1)]] = true;
    }
  }
  GetMetricsResponse thinned;
  for (int i = 0; i < metrics->points_size(); ++i) {
    if (keep[i]) *thinned.add_points() = std::move(*metrics->mutable_points(i));
  }
  *metrics = std::move(thinned);
}

// A cookie value needs no quoting when it is made of these.
bool CookieSafe(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
        c != '_' && c != '.' && c != '~') {
      return false;
    }
  }
  return !s.empty();
}

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

absl::StatusOr<std::unique_ptr<Dashboard>> Dashboard::Create(
    Coordinator* core, DashboardOptions options) {
  absl::StatusOr<std::string> chart_js = ReadFile(options.chart_js_path);
  if (!chart_js.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "dashboard: cannot read chart.js at ", options.chart_js_path, " (",
        chart_js.status().message(),
        "); install Debian's libjs-chart.js (tools/setup.sh does)"));
  }
  return std::unique_ptr<Dashboard>(
      new Dashboard(core, std::move(options), *std::move(chart_js)));
}

absl::Status Dashboard::CheckToken(const HttpRequest& request) const {
  if (options_.token.empty()) return absl::OkStatus();
  if (request.token.empty()) {
    return absl::UnauthenticatedError(
        "missing cluster token: open the page as /?token=TOKEN, or send the "
        "X-PS-Token header");
  }
  if (!ConstantTimeEquals(request.token, options_.token)) {
    return absl::UnauthenticatedError("wrong cluster token");
  }
  return absl::OkStatus();
}

HttpResponse Dashboard::Handle(const HttpRequest& request) const {
  if (request.method != "GET") {
    HttpResponse r = ErrorResponse(absl::UnimplementedError(
        absl::StrCat("method ", request.method,
                     " not allowed: the dashboard is read-only")));
    r.status = 405;
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  if (absl::Status s = CheckToken(request); !s.ok()) return ErrorResponse(s);
  absl::StatusOr<HttpResponse> r = Route(request);
  if (!r.ok()) return ErrorResponse(r.status());
  r->headers.emplace_back("Cache-Control", "no-store");
  r->headers.emplace_back("X-Content-Type-Options", "nosniff");
  // The page's own requests (its script, chart.js, the API) carry the
  // token as a cookie once it was opened with ?token=.
  if (request.token_from_query && CookieSafe(options_.token)) {
    r->headers.emplace_back("Set-Cookie",
                            absl::StrCat("ps_token=", options_.token,
                                         "; Path=/; HttpOnly; SameSite=Strict",
                                         options_.secure ? "; Secure" : ""));
  }
  return *std::move(r);
}

absl::StatusOr<HttpResponse> Dashboard::Route(
    const HttpRequest& request) const {
  const std::string& path = request.path;
  if (path == "/" || path == "/index.html") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {"job", "compare"}));
    HttpResponse r = Asset("text/html; charset=utf-8", kDashboardHtml);
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'self'; style-src 'self' "
                           "'unsafe-inline'; img-src 'self' data:");
    return r;
  }
  if (path == "/static/dashboard.js") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    return Asset("text/javascript; charset=utf-8", kDashboardJs);
  }
  if (path == "/static/chart.js") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    return Asset("text/javascript; charset=utf-8", chart_js_);
  }
  if (path == "/api/members") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    return JsonResponse(core_->ListMembers());
  }
  if (path == "/api/jobs" || path == "/api/jobs/") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    return JsonResponse(core_->ListJobs());
  }
  constexpr absl::string_view kJobs = "/api/jobs/";
  if (absl::StartsWith(path, kJobs)) {
    std::vector<std::string> parts =
        absl::StrSplit(absl::string_view(path).substr(kJobs.size()), '/');
    if (!parts.empty() && !parts[0].empty() && parts.size() <= 2) {
      return JobRoute(request, parts[0], parts.size() == 2 ? parts[1] : "");
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "no such page: ", path,
      " (the API: /api/members, /api/jobs, /api/jobs/ID[/metrics|/events|"
      "/explain])"));
}

absl::StatusOr<HttpResponse> Dashboard::JobRoute(
    const HttpRequest& request, const std::string& job_id,
    const std::string& what) const {
  if (what.empty()) {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    PS_ASSIGN_OR_RETURN(JobRecord record, core_->GetJob(job_id));
    return JsonResponse(record);
  }
  if (what == "metrics") {
    PS_RETURN_IF_ERROR(CheckQuery(
        request, {"names", "include_superseded", "format", "max_points"},
        {"names"}));
    GetMetricsRequest get;
    get.set_job_id(job_id);
    for (auto [it, end] = request.query.equal_range("names"); it != end; ++it) {
      for (absl::string_view name :
           absl::StrSplit(it->second, ',', absl::SkipEmpty())) {
        get.add_names(std::string(name));
      }
    }
    PS_ASSIGN_OR_RETURN(bool superseded,
                        ParseBool("include_superseded",
                                  QueryValue(request, "include_superseded")));
    get.set_include_superseded(superseded);
    const std::string format = QueryValue(request, "format");
    get.set_format(format);
    int max_points = 0;
    if (const std::string v = QueryValue(request, "max_points"); !v.empty()) {
      if (!absl::SimpleAtoi(v, &max_points) || max_points < kMinMaxPoints) {
        return absl::InvalidArgumentError(absl::StrCat(
            "query parameter \"max_points\": must be an integer >= ",
            kMinMaxPoints, ", got \"", v, "\""));
      }
      if (!format.empty()) {
        return absl::InvalidArgumentError(
            "max_points thins the JSON API's points; format gives every one");
      }
    }
    PS_ASSIGN_OR_RETURN(GetMetricsResponse metrics, core_->GetMetrics(get));
    if (max_points > 0) Thin(max_points, &metrics);
    if (format.empty()) return JsonResponse(metrics);
    HttpResponse r;
    r.content_type = absl::AsciiStrToLower(format) == "csv"
                         ? "text/csv; charset=utf-8"
                         : kJson;
    r.body = metrics.text();
    return r;
  }
  if (what == "events") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    PS_ASSIGN_OR_RETURN(GetEventsResponse events, core_->GetEvents(job_id));
    return JsonResponse(events);
  }
  if (what == "explain") {
    PS_RETURN_IF_ERROR(CheckQuery(request, {}));
    PS_ASSIGN_OR_RETURN(ExplainJobResponse explain, core_->ExplainJob(job_id));
    return JsonResponse(explain);
  }
  return absl::NotFoundError(
      absl::StrCat("no such page: ", request.path,
                   " (a job has /metrics, /events and /explain)"));
}

}  // namespace ps::coordinator
