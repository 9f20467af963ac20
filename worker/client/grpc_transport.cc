#include "worker/client/grpc_transport.h"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// One shard's connections to one address. Replaced whole when the shard
// moves; an attempt holds the one it started on until its call is under
// way (the call then holds its channel).
struct ShardConnections {
  std::string address;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  mutable std::atomic<uint32_t> next{0};  // round robin
};

class GrpcTransport final : public Transport {
 public:
  explicit GrpcTransport(const GrpcTransportOptions& options)
      : options_(options) {}

  absl::Status Connect() {
    std::vector<std::shared_ptr<const ShardConnections>> shards;
    for (const std::string& address : options_.server_addresses) {
      PS_ASSIGN_OR_RETURN(auto shard, ConnectTo(address));
      shards.push_back(std::move(shard));
    }
    absl::MutexLock l(&mu_);
    shards_ = std::move(shards);
    return absl::OkStatus();
  }

  int num_shards() const override {
    return static_cast<int>(options_.server_addresses.size());
  }
  std::string address(int shard) const override {
    return Shard(shard)->address;
  }

  absl::Status SetAddresses(
      const std::vector<std::string>& addresses) override {
    if (static_cast<int>(addresses.size()) != num_shards()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gRPC transport: ", addresses.size(), " addresses for ",
                       num_shards(), " shards"));
    }
    // Connected outside the lock (MakeChannel may read TLS files), and
    // swapped in only once every moved shard's connections are made.
    std::vector<std::shared_ptr<const ShardConnections>> moved(
        addresses.size());
    for (size_t s = 0; s < addresses.size(); ++s) {
      if (addresses[s].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("gRPC transport: no address for shard ", s));
      }
      if (address(static_cast<int>(s)) == addresses[s]) continue;
      PS_ASSIGN_OR_RETURN(moved[s], ConnectTo(addresses[s]));
    }
    absl::MutexLock l(&mu_);
    for (size_t s = 0; s < moved.size(); ++s) {
      if (moved[s] != nullptr) shards_[s] = std::move(moved[s]);
    }
    return absl::OkStatus();
  }

  std::shared_ptr<Attempt> NewAttempt() override {
    auto attempt = std::make_shared<GrpcAttempt>();
    PrepareContext(&attempt->context, options_.call_timeout, options_.token);
    return attempt;
  }

  void Start(Attempt& attempt, int shard, Rpc rpc,
             const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
             std::shared_ptr<Listener> listener) override {
    // (Kept until UnaryCall returns: a move may replace it meanwhile.)
    const std::shared_ptr<const ShardConnections> c = Shard(shard);
    const uint32_t n = c->next.fetch_add(1);
    grpc::GenericStub* stub = c->stubs[n % c->stubs.size()].get();
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
  absl::StatusOr<std::shared_ptr<const ShardConnections>> ConnectTo(
      const std::string& address) const {
    auto shard = std::make_shared<ShardConnections>();
    shard->address = address;
    for (int c = 0; c < options_.connections_per_shard; ++c) {
      ChannelOptions copts;
      copts.tls = options_.tls;
      copts.max_message_bytes = options_.max_message_bytes;
      copts.connection_id = c + 1;
      PS_ASSIGN_OR_RETURN(auto channel, MakeChannel(address, copts));
      shard->stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    return std::shared_ptr<const ShardConnections>(std::move(shard));
  }

  std::shared_ptr<const ShardConnections> Shard(int shard) const {
    absl::ReaderMutexLock l(&mu_);
    return shards_[shard];
  }

  const GrpcTransportOptions options_;
  mutable absl::Mutex mu_;
  // By shard index.
  std::vector<std::shared_ptr<const ShardConnections>> shards_
      ABSL_GUARDED_BY(mu_);
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
