// gRPC adapter of the shard core: ParameterService on top of a ShardStore.
//
// Push and Pull are served as raw byte buffers with the zero-copy codec of
// common/wire/payload_codec.h (same method names and messages as the proto
// service, so any protobuf client still works); the control RPCs are plain
// generated methods. Each method checks the cluster token, decodes, calls
// the core and converts its Status with ToGrpcStatus.
//
// Push and Pull run on gRPC's callback threads when they do not have to wait;
// a pull that must wait (BSP version, SSP bound) or a BSP end-of-step push
// whose earlier pushes have not all landed is handed to a small pool of wait
// threads, so that waiting never starves the callback threads. A push with
// then_pull (a worker's end of step) is answered, once applied, with the
// weights that pull asks for (waiting for them on the pull pool if needed),
// so that a BSP step costs one round trip. Pushed
// payloads are applied straight from the received slices; pulled fp32
// weights are sent from the shard's published buffers without a copy.
// Thread-safe.
#ifndef PS_SERVER_SHARD_PARAMETER_SERVICE_H_
#define PS_SERVER_SHARD_PARAMETER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "server/shard/shard_store.h"

namespace ps::server {

struct ParameterServiceOptions {
  std::string token;  // empty: no authentication
  // Largest response the server builds (a Pull of more chunks than fit is
  // refused with RESOURCE_EXHAUSTED; the client splits its pulls).
  int max_message_bytes = kDefaultMaxMessageBytes;
  // Threads that serve pulls and pushes which must wait; more are started
  // when all of them are waiting, up to max_wait_threads.
  int wait_threads = 8;
  int max_wait_threads = 256;
  // Longest a call waits in the core, whatever the client's deadline.
  absl::Duration max_wait = absl::Minutes(5);
};

class ParameterServiceAdapter {
 public:
  // `store` must outlive the adapter.
  static absl::StatusOr<std::unique_ptr<ParameterServiceAdapter>> Create(
      ShardStore* store, const ParameterServiceOptions& options);
  virtual ~ParameterServiceAdapter() = default;

  // Register with a grpc::ServerBuilder.
  virtual grpc::Service* service() = 0;

  // Stops the wait threads after running what they hold; call after the
  // server's Shutdown (the destructor also does).
  virtual void Stop() = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_PARAMETER_SERVICE_H_
