#include "worker/client/ticket.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace ps::client {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

std::shared_ptr<TicketState> Pending(
    int messages, absl::Duration spin = absl::ZeroDuration()) {
  auto state = std::make_shared<TicketState>(spin);
  state->Add(messages);
  return state;
}

TEST(Ticket, DefaultIsDoneAndOk) {
  Ticket t;
  EXPECT_TRUE(t.Done());
  EXPECT_TRUE(t.Wait(absl::ZeroDuration()).ok());
  EXPECT_EQ(t.version(), 0);
  EXPECT_EQ(t.min_clock(), 0);
  EXPECT_EQ(t.duplicates(), 0);
  EXPECT_EQ(t.dropped(), 0);
}

// Wait is bounded: DEADLINE_EXCEEDED while messages are in flight (saying
// how many), and the same ticket completes once the last one ends.
TEST(Ticket, WaitIsBoundedAndCanBeRepeated) {
  auto state = Pending(2);
  Ticket t(state);
  absl::Status s = t.Wait(absl::ZeroDuration());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("2 RPCs in flight"), std::string::npos) << s;
  EXPECT_EQ(t.Wait(absl::Milliseconds(5)).code(),
            absl::StatusCode::kDeadlineExceeded);
  state->Complete(absl::OkStatus());
  EXPECT_FALSE(t.Done());
  state->Complete(absl::OkStatus());
  EXPECT_TRUE(t.Done());
  EXPECT_TRUE(t.Wait(absl::ZeroDuration()).ok());
}

// A waiter on another thread wakes when the last message ends.
TEST(Ticket, WaitWakesWhenTheLastMessageEnds) {
  for (absl::Duration spin : {absl::ZeroDuration(), absl::Seconds(5)}) {
    SCOPED_TRACE(absl::StrCat("spin ", absl::FormatDuration(spin)));
    auto state = Pending(1, spin);
    Ticket t(state);
    absl::Notification waiting;
    absl::Status waited = absl::UnknownError("not waited");
    std::thread waiter([&] {
      waiting.Notify();
      waited = t.Wait(kWait);
    });
    waiting.WaitForNotification();
    state->RecordVersions(4, 2);
    state->Complete(absl::OkStatus());
    waiter.join();
    EXPECT_TRUE(waited.ok()) << waited;
    EXPECT_EQ(t.version(), 4);
  }
}

// The operation's status is its first error; later errors and successes do
// not replace it.
TEST(Ticket, FirstErrorIsTheOperations) {
  auto state = Pending(4);
  Ticket t(state);
  state->Complete(absl::OkStatus());
  state->Complete(absl::UnavailableError("shard 1 down"));
  state->Complete(absl::InternalError("later"));
  state->Complete(absl::OkStatus());
  absl::Status s = t.Wait(kWait);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "shard 1 down");
}

// An operation that starts no message (bad arguments) is done at once with
// its error.
TEST(Ticket, FailWithoutMessagesIsDone) {
  auto state = std::make_shared<TicketState>();
  state->Fail(absl::InvalidArgumentError("bad tensor"));
  Ticket t(state);
  EXPECT_TRUE(t.Done());
  EXPECT_EQ(t.Wait(absl::ZeroDuration()).code(),
            absl::StatusCode::kInvalidArgument);
}

// version and min_clock are the lowest any message reported; kNone is no
// report; nothing reported reads as 0.
TEST(Ticket, VersionAndMinClockAreTheLowestReported) {
  struct Case {
    const char* name;
    std::vector<std::pair<int64_t, int64_t>> reports;  // version, min clock
    int64_t version, min_clock;
  };
  const int64_t kNone = TicketState::kNone;
  const std::vector<Case> cases = {
      {"none", {}, 0, 0},
      {"one", {{5, 7}}, 5, 7},
      {"lowest of each", {{5, 7}, {3, 9}, {8, 6}}, 3, 6},
      {"version only", {{5, kNone}, {4, kNone}}, 4, 0},
      {"min clock only", {{kNone, 3}}, 0, 3},
      {"mixed", {{kNone, 3}, {9, kNone}, {7, 4}}, 7, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto state = Pending(1);
    for (auto [v, m] : c.reports) state->RecordVersions(v, m);
    state->Complete(absl::OkStatus());
    Ticket t(state);
    EXPECT_EQ(t.version(), c.version);
    EXPECT_EQ(t.min_clock(), c.min_clock);
  }
}

TEST(Ticket, PushesCountDuplicatesAndDropped) {
  auto state = Pending(4);
  state->RecordPush(6, false, false);
  state->RecordPush(5, true, false);
  state->RecordPush(7, true, false);
  state->RecordPush(8, false, true);
  for (int i = 0; i < 4; ++i) state->Complete(absl::OkStatus());
  Ticket t(state);
  EXPECT_EQ(t.version(), 5);
  EXPECT_EQ(t.duplicates(), 2);
  EXPECT_EQ(t.dropped(), 1);
}

// WaitForChunks returns once its chunks are in, while the rest of the pull
// is still on the way; it is bounded; and a pull that ends without them
// gives its error, or INTERNAL when it had none.
TEST(Ticket, WaitForChunksSeesPartsAsTheyArrive) {
  auto state = Pending(2);
  Ticket t(state);
  const std::vector<int64_t> first = {0, 1, 2}, second = {7, 3};
  EXPECT_EQ(t.WaitForChunks(first, absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  state->MarkArrived(first);
  state->Complete(absl::OkStatus());
  EXPECT_TRUE(t.WaitForChunks(first, absl::ZeroDuration()).ok());
  EXPECT_TRUE(t.WaitForChunks({}, absl::ZeroDuration()).ok());
  EXPECT_EQ(t.WaitForChunks(second, absl::Milliseconds(5)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(t.Done());
  state->MarkArrived({3});
  EXPECT_EQ(t.WaitForChunks(second, absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  state->MarkArrived({7});
  EXPECT_TRUE(t.WaitForChunks(second, absl::ZeroDuration()).ok());
  state->Complete(absl::OkStatus());
  EXPECT_TRUE(t.Wait(absl::ZeroDuration()).ok());

  // Ended without chunk 9: with the pull's error, or INTERNAL.
  auto failed = Pending(1);
  failed->Complete(absl::UnavailableError("shard 0"));
  EXPECT_EQ(Ticket(failed).WaitForChunks({9}, kWait).code(),
            absl::StatusCode::kUnavailable);
  auto short_pull = Pending(1);
  short_pull->MarkArrived({1});
  short_pull->Complete(absl::OkStatus());
  EXPECT_EQ(Ticket(short_pull).WaitForChunks({1, 9}, kWait).code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE(Ticket(short_pull).WaitForChunks({1}, kWait).ok());
  // Negative ids never arrive.
  EXPECT_EQ(Ticket(short_pull).WaitForChunks({-1}, kWait).code(),
            absl::StatusCode::kInternal);
}

// With a spin longer than the timeout, waits keep their timeout (they do
// not poll for the whole spin).
TEST(Ticket, SpinningWaitsKeepTheirTimeout) {
  auto state = Pending(1, absl::Seconds(30));
  Ticket t(state);
  const absl::Time start = absl::Now();
  EXPECT_EQ(t.Wait(absl::Milliseconds(10)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(t.WaitForChunks({0}, absl::Milliseconds(10)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A spinning waiter sees a result that is already there at once.
  state->MarkArrived({0});
  EXPECT_TRUE(t.WaitForChunks({0}, absl::ZeroDuration()).ok());
  state->Complete(absl::OkStatus());
  EXPECT_TRUE(t.Wait(absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace ps::client
