#include "server/coordinator/dashboard_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps::coordinator {
namespace {

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or "".
std::string CookieValue(const std::string& header, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

HttpRequest ToRequest(const httplib::Request& req) {
  HttpRequest r;
  r.method = req.method;
  r.path = req.path;
  for (const auto& [name, value] : req.params) r.query.emplace(name, value);
  const std::string authorization = req.get_header_value("Authorization");
  absl::string_view bearer = authorization;
  if (req.has_header("X-PS-Token")) {
    r.token = req.get_header_value("X-PS-Token");
  } else if (absl::ConsumePrefix(&bearer, "Bearer ")) {
    r.token = std::string(absl::StripAsciiWhitespace(bearer));
  } else if (req.has_param("token")) {
    // Before the cookie: a page opened with a new token (a cluster started
    // again on the same port) replaces the old cookie.
    r.token = req.get_param_value("token");
    r.token_from_query = true;
  } else {
    r.token = CookieValue(req.get_header_value("Cookie"), "ps_token");
  }
  return r;
}

class HttplibDashboardServer : public DashboardServer {
 public:
  HttplibDashboardServer(std::unique_ptr<httplib::Server> server,
                         std::string host, int port, bool https)
      : server_(std::move(server)),
        host_(host == "0.0.0.0" || host.empty() ? "127.0.0.1"
                                                : std::move(host)),
        port_(port),
        https_(https) {
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // stop() before the loop runs would be lost (cpp-httplib 0.11 has no
    // wait_until_ready): wait, bounded, until it accepts.
    for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  ~HttplibDashboardServer() override {
    server_->stop();
    thread_.join();
  }

  int port() const override { return port_; }
  std::string url() const override {
    return absl::StrCat(https_ ? "https" : "http", "://", host_, ":", port_,
                        "/");
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  const std::string host_;
  const int port_;
  const bool https_;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    const Dashboard* dashboard, const DashboardServerOptions& options) {
  std::unique_ptr<httplib::Server> server;
  const bool https = !options.tls.cert_file.empty();
  if (https) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options.tls.cert_file.c_str(), options.tls.key_file.c_str(),
        options.tls.ca_file.empty() ? nullptr : options.tls.ca_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dashboard: cannot load TLS certificate ", options.tls.cert_file,
          " / key ", options.tls.key_file,
          options.tls.ca_file.empty() ? "" : " / CA " + options.tls.ca_file));
    }
    server = std::move(ssl);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  // Slow or stuck clients cannot hold a thread for long; the API takes no
  // request bodies.
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets
  // a second process bind the same port and take half of its connections.
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->set_read_timeout(5, 0);
  server->set_write_timeout(10, 0);
  server->set_keep_alive_max_count(100);
  server->set_payload_max_length(64 * 1024);
  server->set_pre_routing_handler(
      [dashboard](const httplib::Request& req, httplib::Response& res) {
        HttpResponse r = dashboard->Handle(ToRequest(req));
        res.status = r.status;
        for (auto& [name, value] : r.headers) res.set_header(name, value);
        res.set_content(std::move(r.body), r.content_type.c_str());
        return httplib::Server::HandlerResponse::Handled;
      });
  int port = options.port;
  if (port == 0) {
    port = server->bind_to_any_port(options.host);
    if (port <= 0) port = 0;
  } else if (!server->bind_to_port(options.host, port)) {
    port = 0;
  }
  if (port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "dashboard: cannot listen on ", options.host, ":", options.port));
  }
  return std::unique_ptr<DashboardServer>(
      new HttplibDashboardServer(std::move(server), options.host, port, https));
}

}  // namespace ps::coordinator
