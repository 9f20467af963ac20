// The parameter client's call engine: sends the messages of an operation to
// their shards over a Transport, each with its retries, and completes the
// operation's ticket as they end. Transport-neutral and message-neutral:
// the dense tensor calls (dense_messages.h) are one kind of Message; another
// kind (rows of a sparse table) reuses the same retries, cancellation and
// tickets.
//
// Each attempt has the transport's deadline; attempts failing with
// UNAVAILABLE or DEADLINE_EXCEEDED are retried with exponential backoff
// (RetryPolicy: up to max_attempts, while the next attempt would start
// within total_deadline of the first), re-encoding the same Message, so a
// push keeps its sequence number and the server applies it once; each
// attempt goes to its shard's address of the moment (SetAddresses). Other
// errors, and errors of Message::OnResponse, end the call at once. The
// final error names the method, the shard, its address and the attempt.
#ifndef PS_WORKER_CLIENT_CALL_ENGINE_H_
#define PS_WORKER_CLIENT_CALL_ENGINE_H_

#include <grpcpp/support/byte_buffer.h>

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/clock.h"
#include "common/platform/rpc.h"
#include "worker/client/ticket.h"
#include "worker/client/transport.h"

namespace ps::client {

// One message of an operation, as the engine sends it: encoded again for
// every attempt, its answer taken in once. Called by one thread at a time.
class Message {
 public:
  virtual ~Message() = default;
  // The request of one attempt.
  virtual grpc::ByteBuffer Encode() = 0;
  // The answer of the attempt that succeeded. An error ends the call with
  // it (not retried).
  virtual absl::Status OnResponse(const grpc::ByteBuffer& response) = 0;
  // Once the call has ended, after its ticket was completed, with the
  // call's final status. Runs on a transport thread or the send thread, so
  // it must not block; it may Send() follow-up messages with
  // Origin::kCallback.
  virtual void OnEnd(const absl::Status& status) { (void)status; }
};

struct CallEngineOptions {
  RetryPolicy retry;
  // Start calls sent from the caller's thread on a thread of the engine's
  // (ParameterClientOptions::send_thread).
  bool send_thread = false;
};

// Where Send is called from.
enum class Origin {
  // A caller's thread: the call starts on the send thread if there is one,
  // and finished attempts are released here.
  kCaller,
  // A transport thread (Message::OnEnd): the call starts at once.
  kCallback,
};

// Thread-safe. The destructor waits for the calls still in flight (each
// bounded by its retry deadline), then destroys the transport.
class CallEngine {
 public:
  CallEngine(std::unique_ptr<Transport> transport, CallEngineOptions options,
             const Clock* clock = Clock::Real());
  ~CallEngine();
  CallEngine(const CallEngine&) = delete;
  CallEngine& operator=(const CallEngine&) = delete;

  // Sends `message` to shard `shard` as `rpc`; its end completes one of
  // `ticket`'s messages (which the caller has Add()ed).
  void Send(const std::shared_ptr<TicketState>& ticket, int shard, Rpc rpc,
            std::unique_ptr<Message> message, Origin origin);

  // Moves shard i to addresses[i] (a failover; Transport::SetAddresses,
  // whose errors it returns, leaving every shard where it was). No call is
  // dropped: those to a shard that moved start their next attempt on the
  // new address at once, a running attempt being cancelled for it and one
  // waiting out its backoff woken, as a retry (same message: a push keeps
  // its sequence number). Calls running concurrently with it go to the old
  // address or the new one, and are retried on the new one if they fail.
  absl::Status SetAddresses(const std::vector<std::string>& addresses);

  // Cancels every call still in flight (and those queued or waiting to be
  // retried; their tickets complete with CANCELLED) and returns once none
  // is left. Calls sent after it returns work as usual.
  void CancelInFlight();

 private:
  struct Call;

  void Start(std::shared_ptr<Call> call);
  void Done(std::shared_ptr<Call> call, absl::Status status);
  void Finish(const std::shared_ptr<Call>& call, const absl::Status& s);
  void Retire(const std::shared_ptr<Call>& call);
  void ReapAttempts();
  void SendLoop();

  const std::unique_ptr<Transport> transport_;
  const CallEngineOptions options_;
  const Clock* const clock_;

  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // The calls counted in in_flight_; their attempt and timer change under
  // mu_. While cancelling_ > 0 (CancelInFlight), calls end instead of
  // starting or being retried.
  absl::flat_hash_set<Call*> live_ ABSL_GUARDED_BY(mu_);
  int cancelling_ ABSL_GUARDED_BY(mu_) = 0;
  // Attempts that have ended, released on a caller's thread (ReapAttempts)
  // or in the destructor, never on a transport thread.
  std::vector<std::shared_ptr<Transport::Attempt>> finished_
      ABSL_GUARDED_BY(mu_);

  absl::Mutex send_mu_;
  std::deque<std::shared_ptr<Call>> send_queue_ ABSL_GUARDED_BY(send_mu_);
  bool send_stop_ ABSL_GUARDED_BY(send_mu_) = false;
  std::thread sender_;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_CALL_ENGINE_H_
