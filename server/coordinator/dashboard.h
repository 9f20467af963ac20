// The coordinator's web dashboard, transport-neutral: a request (method,
// path, query, token) in, a response (HTTP status, content type, body) out.
// It serves the page (embedded in the binary), Debian's chart.js (read once
// at start) and a read-only JSON API over the core: the same messages the
// gRPC API returns (and psctl reads), printed by protobuf's JSON printer.
// dashboard_server.h puts it behind an HTTP(S) port; docs/metrics.md lists
// the endpoints.
//
//   GET /                              the page
//   GET /static/dashboard.js           its script
//   GET /static/chart.js               chart.js
//   GET /api/members                   ListMembersResponse
//   GET /api/jobs                      ListJobsResponse
//   GET /api/jobs/ID                   JobRecord
//   GET /api/jobs/ID/metrics           GetMetricsResponse; ?names=a,b
//                                      ?include_superseded=true|false
//                                      ?max_points=N (each series thinned
//                                      to N evenly spaced points)
//                                      ?format=csv|json (the text psctl
//                                      metrics prints)
//   GET /api/jobs/ID/events            GetEventsResponse
//   GET /api/jobs/ID/explain           ExplainJobResponse
//
// Errors are JSON {"error": {"code": "NOT_FOUND", "message": "..."}} with
// the HTTP status of the code: 400 (a malformed query: an unknown
// parameter, a bad value), 401 (no or wrong token), 404 (unknown job or
// path), 405 (a method other than GET or HEAD), 503 (shutting down), 500.
// Nothing the dashboard serves changes the cluster.
#ifndef PS_SERVER_COORDINATOR_DASHBOARD_H_
#define PS_SERVER_COORDINATOR_DASHBOARD_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/coordinator/coordinator.h"

namespace ps::coordinator {

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";  // decoded, without the query
  // Decoded query parameters; a name may repeat.
  std::multimap<std::string, std::string> query;
  // The token the client sent: the X-PS-Token header, else an
  // "Authorization: Bearer" header, else the `token` query parameter (how a
  // person opens the page), else the ps_token cookie. The transport fills
  // it; `token_from_query` says it came from the query.
  std::string token;
  bool token_from_query = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra headers, e.g. {"Set-Cookie", ...} or {"Allow", "GET, HEAD"}.
  std::vector<std::pair<std::string, std::string>> headers;
};

struct DashboardOptions {
  // The cluster token; empty: no authentication (as the gRPC API).
  std::string token;
  // Debian's libjs-chart.js (tools/setup.sh installs it).
  std::string chart_js_path = "/usr/share/javascript/chart.js/chart.min.js";
  // The page is served over HTTPS: the token cookie gets `Secure`.
  bool secure = false;
};

// Thread-safe (immutable after Create; the core is thread-safe). Does not
// own the core, which must outlive it.
class Dashboard {
 public:
  // Reads chart.js; NOT_FOUND naming the file and the package when it is
  // missing.
  static absl::StatusOr<std::unique_ptr<Dashboard>> Create(
      Coordinator* core, DashboardOptions options);

  HttpResponse Handle(const HttpRequest& request) const;

 private:
  Dashboard(Coordinator* core, DashboardOptions options, std::string chart_js)
      : core_(core),
        options_(std::move(options)),
        chart_js_(std::move(chart_js)) {}

  // Whether the request carries the token; the error response otherwise.
  absl::Status CheckToken(const HttpRequest& request) const;
  absl::StatusOr<HttpResponse> Route(const HttpRequest& request) const;
  absl::StatusOr<HttpResponse> JobRoute(const HttpRequest& request,
                                        const std::string& job_id,
                                        const std::string& what) const;

  Coordinator* const core_;
  const DashboardOptions options_;
  const std::string chart_js_;
};

// The HTTP status for a Status code (OK: 200).
int HttpStatusOf(absl::StatusCode code);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_DASHBOARD_H_
