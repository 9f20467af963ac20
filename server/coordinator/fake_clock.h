// A clock tests move by hand (testonly).
#ifndef PS_SERVER_COORDINATOR_FAKE_CLOCK_H_
#define PS_SERVER_COORDINATOR_FAKE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "server/coordinator/clock.h"

namespace ps::coordinator {

class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1700000000000) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_FAKE_CLOCK_H_
