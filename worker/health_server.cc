#include "worker/health_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "proto/health.grpc.pb.h"

namespace ps::worker {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// grpc++'s default health service needs another synchronous service on the
// same server to be polled; the worker has none, so it answers Check itself.
class HealthService final : public grpc::health::v1::Health::Service {
 public:
  grpc::Status Check(grpc::ServerContext*, const HealthCheckRequest*,
                     HealthCheckResponse* response) override {
    response->set_status(serving_ ? HealthCheckResponse::SERVING
                                  : HealthCheckResponse::NOT_SERVING);
    return grpc::Status::OK;
  }
  void SetServing(bool serving) { serving_ = serving; }

 private:
  std::atomic<bool> serving_{false};
};

class HealthServerImpl final : public HealthServer {
 public:
  HealthServerImpl(std::unique_ptr<HealthService> service,
                   std::unique_ptr<grpc::Server> server, int port)
      : service_(std::move(service)), server_(std::move(server)), port_(port) {}
  ~HealthServerImpl() override { server_->Shutdown(); }

  int port() const override { return port_; }
  void SetServing(bool serving) override { service_->SetServing(serving); }

 private:
  std::unique_ptr<HealthService> service_;
  std::unique_ptr<grpc::Server> server_;
  const int port_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(
    const std::string& address) {
  auto service = std::make_unique<HealthService>();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the health service on ", address));
  }
  return std::unique_ptr<HealthServer>(
      new HealthServerImpl(std::move(service), std::move(server), port));
}

}  // namespace ps::worker
