// The standard gRPC health service (grpc.health.v1.Health) for ps_worker,
// which otherwise serves no RPCs: Kubernetes probes and `grpc_health_probe`
// ask it. SERVING while the worker's heartbeats reach the coordinator,
// NOT_SERVING otherwise.
#ifndef PS_WORKER_HEALTH_SERVER_H_
#define PS_WORKER_HEALTH_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ps::worker {

// Owns a gRPC server with only the health service. Thread-safe.
class HealthServer {
 public:
  // Listens on `address` ("0.0.0.0:8081"; port 0 picks a free one).
  // UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(
      const std::string& address);
  virtual ~HealthServer() = default;

  virtual int port() const = 0;
  virtual void SetServing(bool serving) = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_HEALTH_SERVER_H_
