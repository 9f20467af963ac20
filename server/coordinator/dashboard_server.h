// The dashboard (dashboard.h) on an HTTP or HTTPS port, served by
// cpp-httplib's thread pool. Requests are read with timeouts and bounded in
// size; nothing a client sends can change the cluster (the API is GET only).
#ifndef PS_SERVER_COORDINATOR_DASHBOARD_SERVER_H_
#define PS_SERVER_COORDINATOR_DASHBOARD_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/platform/rpc.h"
#include "server/coordinator/dashboard.h"

namespace ps::coordinator {

struct DashboardServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free one (see port())
  // HTTPS with tls.cert_file and tls.key_file; with tls.ca_file too,
  // clients must present a certificate the CA signed (as the gRPC port).
  TlsOptions tls;
};

// Owns its listening thread; the destructor stops it and waits for the
// requests in flight. Does not own the dashboard, which must outlive it.
class DashboardServer {
 public:
  // UNAVAILABLE when the port cannot be bound, INVALID_ARGUMENT when the
  // TLS files cannot be loaded.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(
      const Dashboard* dashboard, const DashboardServerOptions& options);

  virtual ~DashboardServer() = default;
  virtual int port() const = 0;
  // "http://127.0.0.1:PORT/" or https.
  virtual std::string url() const = 0;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_DASHBOARD_SERVER_H_
