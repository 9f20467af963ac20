// The call engine over a fake transport: retries and their backoff, the
// codes it does not retry, the limits of retrying, cancellation, the send
// thread, and the order of a call's end. The fake clock drives the backoff
// times; timers go off when the test fires them.
#include "worker/client/call_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "worker/client/fake_transport.h"

namespace ps::client {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

// What the test messages saw, shared with the test.
struct Log {
  std::atomic<int> encodes{0};
  std::atomic<int> responses{0};
  std::atomic<int> ends{0};
  std::atomic<bool> ticket_done_at_end{false};
  absl::Status end_status;
  std::thread::id encode_thread;
};

// A Pull whose request is `name`; its answer passes `response_error`.
class TestMessage final : public Message {
 public:
  TestMessage(Log* log, std::string name, std::shared_ptr<TicketState> ticket,
              absl::Status response_error = absl::OkStatus(),
              std::function<void(const absl::Status&)> on_end = nullptr)
      : log_(log),
        name_(std::move(name)),
        ticket_(std::move(ticket)),
        response_error_(std::move(response_error)),
        on_end_(std::move(on_end)) {}

  grpc::ByteBuffer Encode() override {
    ++log_->encodes;
    log_->encode_thread = std::this_thread::get_id();
    PullRequest request;
    request.set_job_id(name_);
    return FakeTransport::Encode(request);
  }
  absl::Status OnResponse(const grpc::ByteBuffer&) override {
    ++log_->responses;
    return response_error_;
  }
  void OnEnd(const absl::Status& status) override {
    log_->ticket_done_at_end = Ticket(ticket_).Done();
    log_->end_status = status;
    ++log_->ends;
    if (on_end_) on_end_(status);
  }

 private:
  Log* const log_;
  const std::string name_;
  const std::shared_ptr<TicketState> ticket_;
  const absl::Status response_error_;
  const std::function<void(const absl::Status&)> on_end_;
};

FakeReply Ok(const FakeRequest&) { return {absl::OkStatus(), {}}; }

auto Fail(absl::Status s) {
  return [s](const FakeRequest&) { return FakeReply{s, {}}; };
}

struct Rig {
  explicit Rig(RetryPolicy retry = {}, bool send_thread = false,
               int shards = 2) {
    auto t = std::make_unique<FakeTransport>(shards);
    transport = t.get();
    engine = std::make_unique<CallEngine>(
        std::move(t), CallEngineOptions{retry, send_thread}, &clock);
  }
  // Ends what a failed assertion left in flight (else the engine's
  // destructor would wait for it).
  ~Rig() { engine->CancelInFlight(); }
  // Sends one message to `shard` with a ticket of its own.
  Ticket Send(int shard, std::string name = "m",
              absl::Status response_error = absl::OkStatus()) {
    auto ticket = std::make_shared<TicketState>();
    ticket->Add(1);
    engine->Send(ticket, shard, Rpc::kPull,
                 std::make_unique<TestMessage>(&log, std::move(name), ticket,
                                               std::move(response_error)),
                 Origin::kCaller);
    return Ticket(ticket);
  }

  FakeClock clock;
  Log log;
  FakeTransport* transport = nullptr;
  std::unique_ptr<CallEngine> engine;
};

RetryPolicy Policy() {
  RetryPolicy p;
  p.max_attempts = 5;
  p.initial_backoff = absl::Milliseconds(50);
  p.multiplier = 2.0;
  p.max_backoff = absl::Milliseconds(150);
  p.total_deadline = absl::Seconds(30);
  return p;
}

// UNAVAILABLE and DEADLINE_EXCEEDED are retried after a backoff that grows
// by the multiplier up to max_backoff; every attempt sends the message
// again, to the same shard; the call succeeds with the attempt that does.
TEST(CallEngine, RetriesTransientErrorsWithGrowingBackoff) {
  Rig rig(Policy());
  Ticket t = rig.Send(1, "again");
  const std::vector<absl::Status> failures = {
      absl::UnavailableError("down"), absl::DeadlineExceededError("slow"),
      absl::UnavailableError("down"), absl::UnavailableError("down")};
  const std::vector<int64_t> backoff_ms = {50, 100, 150, 150};
  for (size_t i = 0; i < failures.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(rig.transport->Waiting().size(), 1u);
    FakeRequest r = rig.transport->Answer(Fail(failures[i]));
    EXPECT_EQ(r.shard, 1);
    EXPECT_EQ(r.pull.job_id(), "again");
    EXPECT_TRUE(rig.transport->Waiting().empty());  // waiting for the timer
    EXPECT_FALSE(t.Done());
    ASSERT_EQ(rig.transport->PendingTimers(),
              (std::vector<absl::Time>{rig.clock.Now() +
                                       absl::Milliseconds(backoff_ms[i])}));
    rig.clock.Advance(absl::Milliseconds(backoff_ms[i]));
    EXPECT_EQ(rig.transport->FireTimers(), 1);
  }
  rig.transport->Answer(Ok);
  EXPECT_TRUE(t.Wait(kWait).ok()) << t.Wait(kWait);
  EXPECT_EQ(rig.log.encodes, 5);
  EXPECT_EQ(rig.log.responses, 1);
  EXPECT_EQ(rig.transport->started(), 5);
}

// Every other code ends the call at its first attempt, with no timer, and
// the error names the method, the shard, its address and the attempt.
TEST(CallEngine, DoesNotRetryOtherCodes) {
  const std::vector<absl::Status> errors = {
      absl::InvalidArgumentError("bad"), absl::FailedPreconditionError("no"),
      absl::NotFoundError("job"),        absl::ResourceExhaustedError("big"),
      absl::AbortedError("stale"),       absl::InternalError("bug"),
      absl::UnauthenticatedError("tok"), absl::PermissionDeniedError("no"),
      absl::CancelledError("gone"),      absl::OutOfRangeError("far"),
      absl::UnimplementedError("old"),   absl::DataLossError("crc"),
      absl::UnknownError("?"),
  };
  for (const absl::Status& error : errors) {
    SCOPED_TRACE(error.ToString());
    Rig rig(Policy());
    Ticket t = rig.Send(1);
    rig.transport->Answer(Fail(error));
    EXPECT_TRUE(rig.transport->PendingTimers().empty());
    ASSERT_TRUE(t.Done());
    absl::Status s = t.Wait(kWait);
    EXPECT_EQ(s.code(), error.code());
    EXPECT_NE(s.message().find(error.message()), std::string::npos) << s;
    EXPECT_NE(s.message().find("/ps.ParameterService/Pull to shard 1 "
                               "(fake-shard-1), attempt 1"),
              std::string::npos)
        << s;
    EXPECT_EQ(rig.transport->started(), 1);
    EXPECT_EQ(rig.log.ends, 1);
  }
}

// Retrying stops after max_attempts, and when the next attempt would
// start past total_deadline from the first; the last error is reported
// with its attempt.
TEST(CallEngine, RetriesAreBoundedByAttemptsAndDeadline) {
  RetryPolicy few = Policy();
  few.max_attempts = 3;
  {
    Rig rig(few);
    Ticket t = rig.Send(0);
    for (int i = 0; i < 2; ++i) {
      rig.transport->Answer(Fail(absl::UnavailableError("down")));
      ASSERT_EQ(rig.transport->FireTimers(), 1);
    }
    rig.transport->Answer(Fail(absl::UnavailableError("down")));
    EXPECT_TRUE(rig.transport->PendingTimers().empty());
    absl::Status s = t.Wait(kWait);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("attempt 3"), std::string::npos) << s;
  }
  RetryPolicy short_deadline = Policy();
  short_deadline.total_deadline = absl::Milliseconds(500);
  {
    Rig rig(short_deadline);
    Ticket t = rig.Send(0);
    rig.transport->Answer(Fail(absl::UnavailableError("down")));
    rig.clock.Advance(absl::Milliseconds(50));
    ASSERT_EQ(rig.transport->FireTimers(), 1);
    // The next attempt would start 100 ms after this answer: at 500 ms from
    // the first, which is not within the deadline.
    rig.clock.Advance(absl::Milliseconds(350));
    rig.transport->Answer(Fail(absl::DeadlineExceededError("slow")));
    EXPECT_TRUE(rig.transport->PendingTimers().empty());
    absl::Status s = t.Wait(kWait);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(s.message().find("attempt 2"), std::string::npos) << s;
  }
}

// An error in taking the answer in ends the call with it (not retried).
TEST(CallEngine, AResponseErrorIsNotRetried) {
  Rig rig(Policy());
  Ticket t = rig.Send(0, "m", absl::InternalError("malformed answer"));
  rig.transport->Answer(Ok);
  EXPECT_TRUE(rig.transport->PendingTimers().empty());
  EXPECT_EQ(t.Wait(kWait).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(rig.log.encodes, 1);
}

// OnEnd runs once the ticket is complete, with the final status, and may
// send follow-up messages, which start at once.
TEST(CallEngine, OnEndRunsAfterTheTicketAndMaySendMore) {
  for (bool send_thread : {false, true}) {
    SCOPED_TRACE(send_thread ? "send thread" : "caller's thread");
    Rig rig(Policy(), send_thread);
    auto first = std::make_shared<TicketState>();
    auto second = std::make_shared<TicketState>();
    first->Add(1);
    second->Add(1);
    Log follow_log;
    CallEngine* engine = rig.engine.get();
    auto on_end = [&](const absl::Status& s) {
      if (!s.ok()) return;
      engine->Send(second, 1, Rpc::kPull,
                   std::make_unique<TestMessage>(&follow_log, "follow", second),
                   Origin::kCallback);
    };
    rig.engine->Send(first, 0, Rpc::kPull,
                     std::make_unique<TestMessage>(&rig.log, "first", first,
                                                   absl::OkStatus(), on_end),
                     Origin::kCaller);
    ASSERT_TRUE(rig.transport->WaitForAttempts(1));
    rig.transport->Answer(Ok);
    EXPECT_TRUE(rig.log.ticket_done_at_end);
    EXPECT_TRUE(rig.log.end_status.ok());
    // The follow-up was started inside the answer, not queued.
    std::vector<FakeRequest> waiting = rig.transport->Waiting();
    ASSERT_EQ(waiting.size(), 1u);
    EXPECT_EQ(waiting[0].pull.job_id(), "follow");
    EXPECT_EQ(waiting[0].shard, 1);
    EXPECT_EQ(follow_log.encode_thread, std::this_thread::get_id());
    rig.transport->Answer(Ok);
    EXPECT_TRUE(Ticket(second).Wait(kWait).ok());
    EXPECT_TRUE(Ticket(first).Wait(kWait).ok());
  }
}

// With a send thread, calls sent from the caller's thread start on it, in
// the order they were sent.
TEST(CallEngine, SendThreadStartsCallsInOrder) {
  Rig rig(Policy(), /*send_thread=*/true);
  std::vector<Ticket> tickets;
  for (int i = 0; i < 5; ++i) {
    tickets.push_back(rig.Send(i % 2, absl::StrCat("m", i)));
  }
  ASSERT_TRUE(rig.transport->WaitForAttempts(5));
  EXPECT_NE(rig.log.encode_thread, std::this_thread::get_id());
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  ASSERT_EQ(waiting.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(waiting[i].pull.job_id(), absl::StrCat("m", i));
    EXPECT_EQ(waiting[i].shard, i % 2);
  }
  EXPECT_EQ(rig.transport->AnswerAll(Ok), 5);
  for (const Ticket& t : tickets) EXPECT_TRUE(t.Wait(kWait).ok());
}

// CancelInFlight ends calls waiting for an answer and calls waiting for
// their backoff, with CANCELLED, and returns once none is left; calls sent
// afterwards work as before.
TEST(CallEngine, CancelInFlightEndsRunningAndRetryingCalls) {
  for (bool send_thread : {false, true}) {
    SCOPED_TRACE(send_thread ? "send thread" : "caller's thread");
    Rig rig(Policy(), send_thread);
    Ticket running = rig.Send(0, "running");
    Ticket retrying = rig.Send(1, "retrying");
    ASSERT_TRUE(rig.transport->WaitForAttempts(2));
    // The second one fails once and waits for its timer.
    std::vector<FakeRequest> waiting = rig.transport->Waiting();
    ASSERT_EQ(waiting[0].pull.job_id(), "running");
    rig.transport->Answer(Fail(absl::UnavailableError("down")));  // "running"
    ASSERT_EQ(rig.transport->FireTimers(), 1);
    ASSERT_TRUE(rig.transport->WaitForAttempts(2));
    rig.transport->Answer(Fail(absl::UnavailableError("down")));  // "retrying"
    ASSERT_EQ(rig.transport->PendingTimers().size(), 1u);
    ASSERT_EQ(rig.transport->Waiting().size(), 1u);

    rig.engine->CancelInFlight();
    ASSERT_TRUE(running.Done());
    ASSERT_TRUE(retrying.Done());
    EXPECT_EQ(running.Wait(kWait).code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(retrying.Wait(kWait).code(), absl::StatusCode::kCancelled);
    EXPECT_TRUE(rig.transport->PendingTimers().empty());
    EXPECT_TRUE(rig.transport->Waiting().empty());
    EXPECT_EQ(rig.transport->cancelled(), 1);  // the running attempt

    Ticket after = rig.Send(0, "after");
    ASSERT_TRUE(rig.transport->WaitForAttempts(1));
    rig.transport->Answer(Ok);
    EXPECT_TRUE(after.Wait(kWait).ok());
  }
}

// A transient error that comes back while CancelInFlight runs (here: the
// cancelled attempt reports UNAVAILABLE) is not retried: the call ends with
// it, and no timer is left.
TEST(CallEngine, NoRetryIsScheduledWhileCancelling) {
  Rig rig(Policy());
  Ticket t = rig.Send(0);
  ASSERT_TRUE(rig.transport->WaitForAttempts(1));
  rig.transport->set_cancel_status(absl::UnavailableError("connection lost"));
  rig.engine->CancelInFlight();
  ASSERT_TRUE(t.Done());
  absl::Status s = t.Wait(kWait);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("attempt 1"), std::string::npos) << s;
  EXPECT_TRUE(rig.transport->PendingTimers().empty());
  EXPECT_EQ(rig.transport->started(), 1);
}

// A call cancelled before its attempt reaches the transport (queued for the
// send thread, or retried by a timer that CancelInFlight set off) ends with
// CANCELLED without being sent.
TEST(CallEngine, CallsCancelledBeforeTheyStartAreNotSent) {
  Rig rig(Policy());
  Ticket t = rig.Send(1);
  rig.transport->Answer(Fail(absl::UnavailableError("down")));
  ASSERT_EQ(rig.transport->PendingTimers().size(), 1u);
  rig.engine->CancelInFlight();
  EXPECT_EQ(t.Wait(kWait).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(rig.transport->started(), 1);  // the retry never went out
  EXPECT_NE(t.Wait(kWait).message().find("cancelled (the caller stopped)"),
            std::string::npos)
      << t.Wait(kWait);
}

// A shard that moves (a failover) takes its calls along: a running attempt
// is cancelled and its message sent again to the new address at once, as
// is a call that was waiting out its backoff; calls to the other shards go
// on undisturbed, and a wrong count of addresses moves nothing.
TEST(CallEngine, AMovedShardsCallsGoOnAtItsNewAddress) {
  Rig rig(Policy(), false, 3);
  EXPECT_EQ(rig.engine->SetAddresses({"new-0"}).code(),
            absl::StatusCode::kInvalidArgument);
  Ticket backing_off = rig.Send(1, "backing off");
  rig.transport->Answer(Fail(absl::UnavailableError("down")));
  ASSERT_EQ(rig.transport->PendingTimers().size(), 1u);
  Ticket running = rig.Send(0, "running");
  Ticket other = rig.Send(2, "other");
  ASSERT_EQ(rig.transport->Waiting().size(), 2u);
  EXPECT_EQ(rig.transport->Waiting()[0].address, "fake-shard-0");

  ASSERT_TRUE(
      rig.engine->SetAddresses({"new-0", "new-1", "fake-shard-2"}).ok());
  EXPECT_TRUE(rig.transport->PendingTimers().empty());  // no backoff left
  std::map<std::string, std::string> address_of;
  for (const FakeRequest& r : rig.transport->Waiting()) {
    address_of[r.pull.job_id()] = r.address;
  }
  EXPECT_EQ(address_of,
            (std::map<std::string, std::string>{{"backing off", "new-1"},
                                                {"running", "new-0"},
                                                {"other", "fake-shard-2"}}));
  EXPECT_EQ(rig.transport->cancelled(), 1);  // "running" at fake-shard-0
  EXPECT_EQ(rig.log.encodes, 5);
  EXPECT_EQ(rig.transport->AnswerAll(Ok), 3);
  for (Ticket* t : {&backing_off, &running, &other}) {
    EXPECT_TRUE(t->Wait(kWait).ok()) << t->Wait(kWait);
  }
  EXPECT_EQ(rig.log.responses, 3);
  EXPECT_EQ(rig.transport->started(), 5);
}

}  // namespace
}  // namespace ps::client
