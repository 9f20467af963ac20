// Tickets: the outcome of one asynchronous operation of the parameter client
// (possibly many messages to many shards), with a bounded wait.
//
// A TicketState is shared by the Ticket the caller holds and the messages of
// its operation; it is freed with the last of them, so nothing in flight
// stays behind once an operation is done (no tracker that grows).
#ifndef PS_WORKER_CLIENT_TICKET_H_
#define PS_WORKER_CLIENT_TICKET_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ps::client {

// What the messages of one operation report into. Thread-safe.
class TicketState {
 public:
  // A value not reported (the lowest of nothing).
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

  // `spin`: how long waits poll before they sleep
  // (ParameterClientOptions::wait_spin).
  explicit TicketState(absl::Duration spin = absl::ZeroDuration())
      : spin_(spin) {}

  // `n` more messages belong to the operation (before they can complete).
  void Add(int n);
  // One message ended with `s`; the first error is the operation's.
  void Complete(const absl::Status& s);
  // Fails an operation that starts no message (bad arguments).
  void Fail(const absl::Status& s);

  // Lowers the operation's version and min clock to these (kNone: not
  // reported).
  void RecordVersions(int64_t version, int64_t min_clock);
  // A push's answer: its version, and whether it was a duplicate or dropped.
  void RecordPush(int64_t version, bool duplicate, bool dropped);
  // Pulls: chunks `ids` have been written into the caller's tensors.
  void MarkArrived(absl::Span<const int64_t> ids);

 private:
  friend class Ticket;

  bool Arrived(int64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return id >= 0 && id < static_cast<int64_t>(arrived_.size()) &&
           arrived_[id];
  }
  // Before a blocking wait: polls `ready` (which needs `mu_`) each time the
  // state changes, until it holds, spin_ has passed or `deadline` has come.
  template <typename Ready>
  void Spin(Ready ready, absl::Time deadline);

  mutable absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = kNone;
  int64_t min_clock_ ABSL_GUARDED_BY(mu_) = kNone;
  int64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // Pulls: by chunk id, whether it has been written into the tensors.
  std::vector<bool> arrived_ ABSL_GUARDED_BY(mu_);
  const absl::Duration spin_;
  // Bumped on every change a waiter may be waiting for, so that a spinning
  // waiter takes the lock only when there is something new to see.
  std::atomic<uint64_t> changes_{0};
};

// The outcome of one asynchronous operation (possibly many RPCs). Copies
// share the operation. Thread-safe.
class Ticket {
 public:
  Ticket();  // done and OK
  explicit Ticket(std::shared_ptr<TicketState> state);

  // Waits up to `timeout`. Returns the operation's status once done (the
  // first error of its RPCs), or DEADLINE_EXCEEDED if it is still running;
  // it keeps running then and may be waited on again.
  absl::Status Wait(absl::Duration timeout) const;
  bool Done() const;

  // Once done: pull: the lowest shard version of the weights received;
  // push: the lowest shard version reported after the push.
  int64_t version() const;
  // Once done: the slowest worker's clock the shards reported (pulls).
  int64_t min_clock() const;
  // Pulls: waits up to `timeout` until the chunks `ids` have been written
  // into the caller's tensors (a pull's parts arrive one by one). OK once
  // they are; the operation's error if it ended without them;
  // DEADLINE_EXCEEDED if they are still on the way.
  absl::Status WaitForChunks(absl::Span<const int64_t> ids,
                             absl::Duration timeout) const;

  // Once done (pushes): messages the servers had already applied (retries)
  // and messages dropped as late by BSP backup-worker logic.
  int64_t duplicates() const;
  int64_t dropped() const;

 private:
  std::shared_ptr<TicketState> state_;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_TICKET_H_
