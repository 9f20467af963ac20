// How the coordinator talks to parameter-server shards: an interface, so the
// core's tests fake the shards, and a gRPC implementation.
#ifndef PS_SERVER_COORDINATOR_SHARD_CLIENT_H_
#define PS_SERVER_COORDINATOR_SHARD_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "proto/parameter_service.pb.h"

namespace ps::coordinator {

// Calls on the shard at `address`. Implementations are thread-safe; each
// call is bounded by a deadline and returns the shard's error (or
// UNAVAILABLE / DEADLINE_EXCEEDED when it cannot be reached).
class ShardClient {
 public:
  virtual ~ShardClient() = default;
  virtual absl::StatusOr<SetupJobResponse> SetupJob(
      const std::string& address, const SetupJobRequest& request) = 0;
  virtual absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const std::string& address, const UpdateMembershipRequest& request) = 0;
  virtual absl::Status TeardownJob(const std::string& address,
                                   const TeardownJobRequest& request) = 0;
  virtual absl::StatusOr<ShardStatus> GetShardStatus(
      const std::string& address, const GetShardStatusRequest& request) = 0;
};

struct GrpcShardClientOptions {
  std::string token;  // the cluster token sent on every call
  TlsOptions tls;
  absl::Duration setup_timeout = absl::Seconds(30);  // SetupJob, Teardown
  absl::Duration call_timeout = absl::Seconds(5);    // everything else
};

// A ShardClient over gRPC; channels are cached per address.
std::unique_ptr<ShardClient> MakeGrpcShardClient(
    GrpcShardClientOptions options);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_SHARD_CLIENT_H_
