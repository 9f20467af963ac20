// The gRPC face of the coordinator: decodes each request, checks the cluster
// token, calls the transport-neutral core and converts its Status.
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace ps::coordinator {

struct CoordinatorServiceOptions {
  // Every call must carry this token (kTokenMetadataKey); empty: no check.
  std::string token;
  // WatchJob sends the record on every change and at least this often.
  absl::Duration watch_interval = absl::Seconds(1);
};

// Does not own `core`, which must outlive the service. Thread-safe.
std::unique_ptr<CoordinatorService::Service> MakeCoordinatorService(
    Coordinator* core, CoordinatorServiceOptions options);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
