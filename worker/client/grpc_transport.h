// The parameter client's transport over gRPC: each attempt is one unary
// call of the generic (ByteBuffer) API with the callback interface, spread
// round-robin over several TCP connections per shard; backoff timers are
// grpc::Alarms. A shard that moves (SetAddresses) gets new connections; the
// old ones close once the attempts running on them have ended.
#ifndef PS_WORKER_CLIENT_GRPC_TRANSPORT_H_
#define PS_WORKER_CLIENT_GRPC_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "worker/client/transport.h"

namespace ps::client {

struct GrpcTransportOptions {
  std::vector<std::string> server_addresses;  // index = shard index
  std::string token;                          // cluster token (may be empty)
  TlsOptions tls;
  int max_message_bytes = kDefaultMaxMessageBytes;
  int connections_per_shard = 2;
  // Deadline of one attempt.
  absl::Duration call_timeout = absl::Seconds(30);
};

// Connects lazily. INVALID_ARGUMENT when connections_per_shard < 1; the TLS
// files' errors as MakeChannel reports them.
//
// Attempts (their grpc::ClientContext) must not be destroyed inside the
// completion callback that reports them: gRPC 1.51 then crashed with a
// double free in its callback completion queue (CallEngine releases them on
// callers' threads).
absl::StatusOr<std::unique_ptr<Transport>> NewGrpcTransport(
    const GrpcTransportOptions& options);

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_GRPC_TRANSPORT_H_
