#include "server/shard/replica_link.h"

#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/platform/status.h"
#include "proto/parameter_service.grpc.pb.h"

namespace ps::server {
namespace {

class GrpcReplicaLink final : public ReplicaLink {
 public:
  GrpcReplicaLink(std::string address, ChannelOptions options,
                  std::string token)
      : address_(std::move(address)),
        options_(std::move(options)),
        token_(std::move(token)) {}

  absl::StatusOr<ReplicateResponse> Send(const ReplicateRequest& request,
                                         absl::Time deadline) override {
    ParameterService::Stub* stub = nullptr;
    {
      absl::MutexLock l(&mu_);
      if (stub_ == nullptr) {
        PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                            MakeChannel(address_, options_));
        stub_ = ParameterService::NewStub(channel);
      }
      stub = stub_.get();
    }
    grpc::ClientContext context;
    PrepareContext(&context, deadline - absl::Now(), token_);
    ReplicateResponse response;
    grpc::Status s = stub->Replicate(&context, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  }
  const std::string& address() const override { return address_; }

 private:
  const std::string address_;
  const ChannelOptions options_;
  const std::string token_;
  absl::Mutex mu_;
  std::unique_ptr<ParameterService::Stub> stub_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

ReplicaLinkFactory GrpcReplicaLinks(ChannelOptions options, std::string token) {
  return [options = std::move(options), token = std::move(token)](
             const std::string& address) -> std::unique_ptr<ReplicaLink> {
    return std::make_unique<GrpcReplicaLink>(address, options, token);
  };
}

}  // namespace ps::server
