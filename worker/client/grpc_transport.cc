#include "worker/client/grpc_transport.h"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <utility>

#include "absl/base/call_once.h"
#include "common/platform/status.h"

namespace ps::client {
namespace {

class GrpcAttempt final : public Transport::Attempt {
 public:
  void Cancel() override { context.TryCancel(); }
  grpc::ClientContext context;
};

class GrpcTimer final : public Transport::Timer {
 public:
  void Cancel() override { alarm.Cancel(); }
  grpc::Alarm alarm;
};

class GrpcTransport final : public Transport {
 public:
  explicit GrpcTransport(const GrpcTransportOptions& options)
      : options_(options), next_stub_(options.server_addresses.size()) {}

  absl::Status Connect() {
    for (const std::string& address : options_.server_addresses) {
      std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
      for (int c = 0; c < options_.connections_per_shard; ++c) {
        ChannelOptions copts;
        copts.tls = options_.tls;
        copts.max_message_bytes = options_.max_message_bytes;
        copts.connection_id = c + 1;
        PS_ASSIGN_OR_RETURN(auto channel, MakeChannel(address, copts));
        stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
      }
      stubs_.push_back(std::move(stubs));
    }
    return absl::OkStatus();
  }

  int num_shards() const override {
    return static_cast<int>(options_.server_addresses.size());
  }
  const std::string& address(int shard) const override {
    return options_.server_addresses[shard];
  }

  std::shared_ptr<Attempt> NewAttempt() override {
    auto attempt = std::make_shared<GrpcAttempt>();
    PrepareContext(&attempt->context, options_.call_timeout, options_.token);
    return attempt;
  }

  void Start(Attempt& attempt, int shard, Rpc rpc,
             const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
             std::shared_ptr<Listener> listener) override {
    const uint32_t n = next_stub_[shard].fetch_add(1);
    grpc::GenericStub* stub = stubs_[shard][n % stubs_[shard].size()].get();
    stub->UnaryCall(&static_cast<GrpcAttempt&>(attempt).context, RpcMethod(rpc),
                    grpc::StubOptions(), request, response,
                    [listener = std::move(listener)](grpc::Status status) {
                      listener->AttemptDone(FromGrpcStatus(status));
                    });
  }

  std::shared_ptr<Timer> StartTimer(
      absl::Time when, std::shared_ptr<Listener> listener) override {
    auto timer = std::make_shared<GrpcTimer>();
    // The callback gives its reference up when it runs: the listener (a
    // call) holds the timer, which holds the callback, so keeping it would
    // make a cycle that outlives the call (LeakSanitizer found it).
    timer->alarm.Set(absl::ToChronoTime(when),
                     [listener = std::move(listener)](bool) mutable {
                       std::shared_ptr<Listener> l = std::move(listener);
                       l->TimerFired();
                     });
    return timer;
  }

 private:
  const GrpcTransportOptions options_;
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs_;
  std::vector<std::atomic<uint32_t>> next_stub_;  // per shard, round robin
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NewGrpcTransport(
    const GrpcTransportOptions& options) {
  if (options.connections_per_shard < 1) {
    return absl::InvalidArgumentError(
        "gRPC transport: connections_per_shard >= 1 is required");
  }
  // gRPC 1.51 runs callback RPCs on a process-wide completion queue that
  // is torn down when the last channel goes and rebuilt with the next one;
  // that teardown races with callbacks still draining (a double free in
  // grpc_cq_internal_unref seen when clients come and go in parallel). One
  // channel kept for the life of the process keeps that queue up. Created
  // once, never destroyed on purpose.
  // (volatile: the store stays, so leak checkers see the channel as live.)
  [[maybe_unused]] static std::shared_ptr<
      grpc::Channel>* volatile keep_callback_cq_alive = nullptr;
  static absl::once_flag once;
  absl::call_once(once, [] {
    keep_callback_cq_alive = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  });
  auto transport = std::make_unique<GrpcTransport>(options);
  PS_RETURN_IF_ERROR(transport->Connect());
  return transport;
}

}  // namespace ps::client
