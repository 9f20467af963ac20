#include "worker/client/ticket.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::client {
namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

void TicketState::Add(int n) {
  absl::MutexLock l(&mu_);
  pending_ += n;
}

void TicketState::Complete(const absl::Status& s) {
  absl::MutexLock l(&mu_);
  if (!s.ok() && status_.ok()) status_ = s;
  --pending_;
  changes_.fetch_add(1, std::memory_order_release);
}

void TicketState::Fail(const absl::Status& s) {
  absl::MutexLock l(&mu_);
  if (status_.ok()) status_ = s;
  changes_.fetch_add(1, std::memory_order_release);
}

void TicketState::RecordVersions(int64_t version, int64_t min_clock) {
  absl::MutexLock l(&mu_);
  version_ = std::min(version_, version);
  min_clock_ = std::min(min_clock_, min_clock);
}

void TicketState::RecordPush(int64_t version, bool duplicate, bool dropped) {
  absl::MutexLock l(&mu_);
  version_ = std::min(version_, version);
  duplicates_ += duplicate ? 1 : 0;
  dropped_ += dropped ? 1 : 0;
}

void TicketState::MarkArrived(absl::Span<const int64_t> ids) {
  absl::MutexLock l(&mu_);
  for (int64_t id : ids) {
    if (id >= static_cast<int64_t>(arrived_.size())) arrived_.resize(id + 1);
    arrived_[id] = true;
  }
  changes_.fetch_add(1, std::memory_order_release);
}

template <typename Ready>
void TicketState::Spin(Ready ready, absl::Time deadline) {
  if (spin_ <= absl::ZeroDuration()) return;
  const absl::Time until = std::min(absl::Now() + spin_, deadline);
  uint64_t seen = changes_.load(std::memory_order_acquire);
  {
    absl::MutexLock l(&mu_);
    if (ready()) return;
  }
  while (absl::Now() < until) {
    for (int k = 0; k < 32; ++k) CpuRelax();
    const uint64_t now = changes_.load(std::memory_order_acquire);
    if (now == seen) continue;
    seen = now;
    absl::MutexLock l(&mu_);
    if (ready()) return;
  }
}

Ticket::Ticket() : state_(std::make_shared<TicketState>()) {}
Ticket::Ticket(std::shared_ptr<TicketState> state) : state_(std::move(state)) {}

absl::Status Ticket::Wait(absl::Duration timeout) const {
  TicketState& t = *state_;
  auto done = [&t]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu_) {
    return t.pending_ == 0;
  };
  const absl::Time deadline = absl::Now() + timeout;
  t.Spin(done, deadline);
  absl::MutexLock l(&t.mu_);
  if (!t.mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "operation still running after ", absl::FormatDuration(timeout), " (",
        t.pending_, " RPCs in flight)"));
  }
  return t.status_;
}

absl::Status Ticket::WaitForChunks(absl::Span<const int64_t> ids,
                                   absl::Duration timeout) const {
  TicketState& t = *state_;
  auto all_arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu_) {
    for (int64_t id : ids) {
      if (!t.Arrived(id)) return false;
    }
    return true;
  };
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu_) {
    return t.pending_ == 0 || all_arrived();
  };
  const absl::Time deadline = absl::Now() + timeout;
  t.Spin(ready, deadline);
  absl::MutexLock l(&t.mu_);
  if (!t.mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "chunks still on the way after ", absl::FormatDuration(timeout), " (",
        t.pending_, " RPCs in flight)"));
  }
  if (all_arrived()) return absl::OkStatus();
  if (!t.status_.ok()) return t.status_;
  return absl::InternalError("the pull ended without all of its chunks");
}

bool Ticket::Done() const {
  absl::MutexLock l(&state_->mu_);
  return state_->pending_ == 0;
}

int64_t Ticket::version() const {
  absl::MutexLock l(&state_->mu_);
  return state_->version_ == TicketState::kNone ? 0 : state_->version_;
}

int64_t Ticket::min_clock() const {
  absl::MutexLock l(&state_->mu_);
  return state_->min_clock_ == TicketState::kNone ? 0 : state_->min_clock_;
}

int64_t Ticket::duplicates() const {
  absl::MutexLock l(&state_->mu_);
  return state_->duplicates_;
}

int64_t Ticket::dropped() const {
  absl::MutexLock l(&state_->mu_);
  return state_->dropped_;
}

}  // namespace ps::client
