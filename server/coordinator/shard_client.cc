#include "server/coordinator/shard_client.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/status.h"
#include "proto/parameter_service.grpc.pb.h"

namespace ps::coordinator {
namespace {

class GrpcShardClient : public ShardClient {
 public:
  explicit GrpcShardClient(GrpcShardClientOptions options)
      : options_(std::move(options)) {}

  absl::StatusOr<SetupJobResponse> SetupJob(
      const std::string& address, const SetupJobRequest& request) override {
    PS_ASSIGN_OR_RETURN(auto stub, Stub(address));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.setup_timeout, options_.token);
    SetupJobResponse response;
    PS_RETURN_IF_ERROR(Wrap(address, stub->SetupJob(&ctx, request, &response)));
    return response;
  }

  absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const std::string& address,
      const UpdateMembershipRequest& request) override {
    PS_ASSIGN_OR_RETURN(auto stub, Stub(address));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.call_timeout, options_.token);
    UpdateMembershipResponse response;
    PS_RETURN_IF_ERROR(
        Wrap(address, stub->UpdateMembership(&ctx, request, &response)));
    return response;
  }

  absl::Status TeardownJob(const std::string& address,
                           const TeardownJobRequest& request) override {
    PS_ASSIGN_OR_RETURN(auto stub, Stub(address));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.setup_timeout, options_.token);
    TeardownJobResponse response;
    return Wrap(address, stub->TeardownJob(&ctx, request, &response));
  }

  absl::StatusOr<ShardStatus> GetShardStatus(
      const std::string& address,
      const GetShardStatusRequest& request) override {
    PS_ASSIGN_OR_RETURN(auto stub, Stub(address));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.call_timeout, options_.token);
    ShardStatus response;
    PS_RETURN_IF_ERROR(
        Wrap(address, stub->GetShardStatus(&ctx, request, &response)));
    return response;
  }

 private:
  static absl::Status Wrap(const std::string& address,
                           const grpc::Status& status) {
    if (status.ok()) return absl::OkStatus();
    return Annotate(FromGrpcStatus(status), absl::StrCat("shard ", address));
  }

  absl::StatusOr<std::shared_ptr<ParameterService::Stub>> Stub(
      const std::string& address) {
    absl::MutexLock l(&mu_);
    auto it = stubs_.find(address);
    if (it != stubs_.end()) return it->second;
    ChannelOptions channel_options;
    channel_options.tls = options_.tls;
    PS_ASSIGN_OR_RETURN(auto channel, MakeChannel(address, channel_options));
    std::shared_ptr<ParameterService::Stub> stub =
        ParameterService::NewStub(channel);
    stubs_[address] = stub;
    return stub;
  }

  const GrpcShardClientOptions options_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ParameterService::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<ShardClient> MakeGrpcShardClient(
    GrpcShardClientOptions options) {
  return std::make_unique<GrpcShardClient>(std::move(options));
}

}  // namespace ps::coordinator
