#include "worker/client/call_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::client {

// One message with its retries. Owned by shared_ptr copies held by the
// transport while an attempt or a backoff timer is pending, and by the send
// queue.
struct CallEngine::Call final : Transport::Listener,
                                std::enable_shared_from_this<Call> {
  CallEngine* engine = nullptr;
  std::shared_ptr<TicketState> ticket;
  int shard = 0;
  Rpc rpc = Rpc::kPush;
  std::unique_ptr<Message> message;
  // The running attempt and the backoff timer (under engine->mu_).
  std::shared_ptr<Transport::Attempt> attempt;
  std::shared_ptr<Transport::Timer> timer;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  int attempts = 0;
  // The running attempt was cancelled because the shard moved (under
  // engine->mu_): it is retried at once, whatever it ends with.
  bool moved = false;
  absl::Time first_start;
  absl::Duration backoff;

  void AttemptDone(absl::Status status) override {
    engine->Done(shared_from_this(), std::move(status));
  }
  void TimerFired() override { engine->Start(shared_from_this()); }
};

CallEngine::CallEngine(std::unique_ptr<Transport> transport,
                       CallEngineOptions options, const Clock* clock)
    : transport_(std::move(transport)),
      options_(std::move(options)),
      clock_(clock) {
  if (options_.send_thread) sender_ = std::thread([this] { SendLoop(); });
}

CallEngine::~CallEngine() {
  std::vector<std::shared_ptr<Transport::Attempt>> finished;
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &in_flight_));
    finished.swap(finished_);
  }
  if (sender_.joinable()) {
    {
      absl::MutexLock l(&send_mu_);
      send_stop_ = true;
    }
    sender_.join();
  }
}

void CallEngine::Send(const std::shared_ptr<TicketState>& ticket, int shard,
                      Rpc rpc, std::unique_ptr<Message> message,
                      Origin origin) {
  if (origin == Origin::kCaller) ReapAttempts();
  auto call = std::make_shared<Call>();
  call->engine = this;
  call->ticket = ticket;
  call->shard = shard;
  call->rpc = rpc;
  call->message = std::move(message);
  call->first_start = clock_->Now();
  call->backoff = options_.retry.initial_backoff;
  {
    absl::MutexLock l(&mu_);
    ++in_flight_;
    live_.insert(call.get());
  }
  if (origin == Origin::kCallback || !options_.send_thread) {
    Start(std::move(call));
    return;
  }
  absl::MutexLock l(&send_mu_);
  send_queue_.push_back(std::move(call));
}

void CallEngine::Start(std::shared_ptr<Call> call) {
  ++call->attempts;
  Retire(call);  // the previous attempt's
  std::shared_ptr<Transport::Attempt> attempt = transport_->NewAttempt();
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    cancelled = cancelling_ > 0;
    // (A Cancel between here and Start cancels it as it starts.)
    if (!cancelled) call->attempt = attempt;
    call->moved = false;
  }
  if (cancelled) {
    Finish(call, absl::CancelledError(absl::StrCat(
                     RpcMethod(call->rpc), " to shard ", call->shard,
                     ": cancelled (the caller stopped)")));
    return;
  }
  call->request = call->message->Encode();
  call->response.Clear();
  Transport::Attempt& a = *attempt;
  const int shard = call->shard;
  const Rpc rpc = call->rpc;
  const grpc::ByteBuffer* request = &call->request;
  grpc::ByteBuffer* response = &call->response;
  transport_->Start(a, shard, rpc, request, response, std::move(call));
}

void CallEngine::CancelInFlight() {
  std::vector<std::shared_ptr<Transport::Attempt>> attempts;
  std::vector<std::shared_ptr<Transport::Timer>> timers;
  {
    absl::MutexLock l(&mu_);
    ++cancelling_;
    for (Call* call : live_) {
      if (call->attempt != nullptr) attempts.push_back(call->attempt);
      if (call->timer != nullptr) timers.push_back(call->timer);
    }
  }
  // Outside the lock: the transport may report the calls' ends (which take
  // it) before these return. A call that starts or retries meanwhile sees
  // cancelling_ and ends; queued ones end when the send thread starts them.
  for (const auto& attempt : attempts) attempt->Cancel();
  for (const auto& timer : timers) timer->Cancel();
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
  --cancelling_;
}

absl::Status CallEngine::SetAddresses(
    const std::vector<std::string>& addresses) {
  std::vector<bool> moved(transport_->num_shards(), false);
  for (size_t s = 0; s < addresses.size() && s < moved.size(); ++s) {
    moved[s] = transport_->address(static_cast<int>(s)) != addresses[s];
  }
  PS_RETURN_IF_ERROR(transport_->SetAddresses(addresses));
  std::vector<std::shared_ptr<Transport::Attempt>> attempts;
  std::vector<std::shared_ptr<Transport::Timer>> timers;
  {
    absl::MutexLock l(&mu_);
    for (Call* call : live_) {
      if (!moved[call->shard]) continue;
      if (call->attempt != nullptr) {
        call->moved = true;
        attempts.push_back(call->attempt);
      }
      if (call->timer != nullptr) timers.push_back(call->timer);
    }
  }
  // Outside the lock, as in CancelInFlight. An attempt that has ended
  // already is not cancelled again; one that started on the new address
  // meanwhile is cancelled and sent there again.
  for (const auto& attempt : attempts) attempt->Cancel();
  for (const auto& timer : timers) timer->Cancel();
  return absl::OkStatus();
}

void CallEngine::Done(std::shared_ptr<Call> call, absl::Status s) {
  if (s.ok()) {
    s = call->message->OnResponse(call->response);
    Finish(call, s);
    return;
  }
  bool moved;
  {
    absl::MutexLock l(&mu_);
    moved = std::exchange(call->moved, false) && cancelling_ == 0;
  }
  if (moved) {
    // Whatever the old address answered (CANCELLED, most often), the new
    // one has not been asked: no backoff.
    s = absl::UnavailableError(absl::StrCat("shard ", call->shard, " moved to ",
                                            transport_->address(call->shard),
                                            " (failover)"));
  }
  const RetryPolicy& retry = options_.retry;
  const absl::Time next =
      clock_->Now() + (moved ? absl::ZeroDuration() : call->backoff);
  if (IsRetryable(s) && call->attempts < retry.max_attempts &&
      next - call->first_start < retry.total_deadline) {
    bool retrying;
    {
      absl::MutexLock l(&mu_);
      retrying = cancelling_ == 0;
    }
    if (retrying && moved) {
      Start(std::move(call));
      return;
    }
    if (retrying) {
      call->backoff =
          std::min(call->backoff * retry.multiplier, retry.max_backoff);
      // Set outside the lock: the transport may report before StartTimer
      // returns, and Start() takes the lock. A CancelInFlight that begins
      // before the timer is recorded below is seen there; Start() ends the
      // call instead of starting it while one runs.
      std::shared_ptr<Transport::Timer> timer =
          transport_->StartTimer(next, call);
      absl::MutexLock l(&mu_);
      call->timer = std::move(timer);
      if (cancelling_ > 0) call->timer->Cancel();
      return;
    }
  }
  Finish(call, Annotate(s, absl::StrCat(RpcMethod(call->rpc), " to shard ",
                                        call->shard, " (",
                                        transport_->address(call->shard),
                                        "), attempt ", call->attempts)));
}

void CallEngine::Finish(const std::shared_ptr<Call>& call,
                        const absl::Status& s) {
  Retire(call);
  call->ticket->Complete(s);
  call->message->OnEnd(s);
  absl::MutexLock l(&mu_);
  live_.erase(call.get());
  --in_flight_;
}

// An attempt object destroyed inside the transport's report (gRPC 1.51's
// completion callback, when it held the last reference to the call) crashed
// gRPC with a double free in its callback completion queue, so finished
// attempts are destroyed on the callers' threads instead: on the next call
// or in the destructor.
void CallEngine::Retire(const std::shared_ptr<Call>& call) {
  absl::MutexLock l(&mu_);
  if (call->attempt == nullptr) return;
  finished_.push_back(std::move(call->attempt));
}

// Keeps the newest few, whose reports may still be unwinding.
void CallEngine::ReapAttempts() {
  constexpr size_t kKeep = 64;
  std::vector<std::shared_ptr<Transport::Attempt>> finished;
  absl::MutexLock l(&mu_);
  if (finished_.size() < 2 * kKeep) return;
  const size_t n = finished_.size() - kKeep;
  finished.assign(std::make_move_iterator(finished_.begin()),
                  std::make_move_iterator(finished_.begin() + n));
  finished_.erase(finished_.begin(), finished_.begin() + n);
  // Destroyed after the lock is released (declaration order).
}

// The send thread: starts queued calls in order.
void CallEngine::SendLoop() {
  std::vector<std::shared_ptr<Call>> batch;
  for (;;) {
    {
      absl::MutexLock l(&send_mu_);
      send_mu_.Await(absl::Condition(
          +[](CallEngine* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->send_mu_) {
            return e->send_stop_ || !e->send_queue_.empty();
          },
          this));
      if (send_queue_.empty()) return;
      batch.assign(std::make_move_iterator(send_queue_.begin()),
                   std::make_move_iterator(send_queue_.end()));
      send_queue_.clear();
    }
    for (std::shared_ptr<Call>& call : batch) Start(std::move(call));
    batch.clear();
  }
}

}  // namespace ps::client
