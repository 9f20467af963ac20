// The seam between the parameter client's call engine (retries, backoff,
// cancellation, tickets: call_engine.h) and the wire. The gRPC
// implementation (grpc_transport.h) sends each attempt as one unary call over
// one of several connections per shard; tests put a fake behind it
// (fake_transport.h) and answer attempts and fire backoff timers by hand.
//
// Requests and responses are grpc::ByteBuffers because that is what the
// zero-copy payload codec (common/wire/payload_codec.h) writes and reads: a
// request's payload slices point at the caller's tensor memory, and answers
// are decoded straight from the received slices. No transport copies them.
#ifndef PS_WORKER_CLIENT_TRANSPORT_H_
#define PS_WORKER_CLIENT_TRANSPORT_H_

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ps::client {

// The data-plane RPCs of proto/parameter_service.proto.
enum class Rpc { kPush, kPull };

// The RPC's full method name, which errors name.
inline const char* RpcMethod(Rpc rpc) {
  return rpc == Rpc::kPush ? "/ps.ParameterService/Push"
                           : "/ps.ParameterService/Pull";
}

// Implementations are thread-safe.
class Transport {
 public:
  // What a transport reports to: the end of an attempt, or a timer that
  // went off. Each report is made once, on any thread, possibly before the
  // Start / StartTimer call that asked for it has returned.
  class Listener {
   public:
    virtual ~Listener() = default;
    // The attempt ended: OK with the response written, or its error (an
    // RPC error as common/platform/status.h converts it; CANCELLED once
    // cancelled).
    virtual void AttemptDone(absl::Status status) = 0;
    // The timer's time has come, or it was cancelled.
    virtual void TimerFired() = 0;
  };

  // One attempt of one RPC (its deadline counts from NewAttempt), made
  // before it starts so that it can be cancelled at any moment.
  class Attempt {
   public:
    virtual ~Attempt() = default;
    // Ends the attempt soon with CANCELLED if it is still running; an
    // attempt cancelled before it starts ends as it starts.
    virtual void Cancel() = 0;
  };

  class Timer {
   public:
    virtual ~Timer() = default;
    // Makes the timer go off now if it has not yet.
    virtual void Cancel() = 0;
  };

  virtual ~Transport() = default;

  virtual int num_shards() const = 0;
  // The shard's current address, for error messages.
  virtual std::string address(int shard) const = 0;

  // Points shard i at addresses[i] (a failover moved it to another
  // server): attempts started from now on go there; those running stay on
  // their connection until they end. INVALID_ARGUMENT for a count other
  // than num_shards() or an empty address; a connection's error (TLS files)
  // leaves every shard where it was.
  virtual absl::Status SetAddresses(
      const std::vector<std::string>& addresses) = 0;

  virtual std::shared_ptr<Attempt> NewAttempt() = 0;

  // Sends `*request` as `rpc` to shard `shard` under `attempt` and writes
  // the answer into `*response`; both must stay alive until
  // listener->AttemptDone runs. The transport holds `listener` until then.
  // Attempt objects may need to be destroyed outside the transport's
  // reporting threads (gRPC 1.51: grpc_transport.h).
  virtual void Start(Attempt& attempt, int shard, Rpc rpc,
                     const grpc::ByteBuffer* request,
                     grpc::ByteBuffer* response,
                     std::shared_ptr<Listener> listener) = 0;

  // Calls listener->TimerFired() at `when`, or sooner when
  // cancelled. The transport gives its reference to `listener` up once it
  // has reported.
  virtual std::shared_ptr<Timer> StartTimer(
      absl::Time when, std::shared_ptr<Listener> listener) = 0;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_TRANSPORT_H_
