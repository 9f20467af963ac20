// The coordinator's notion of time, injected so tests can move it by hand.
#ifndef PS_SERVER_COORDINATOR_CLOCK_H_
#define PS_SERVER_COORDINATOR_CLOCK_H_

#include <cstdint>
#include <memory>

#include "absl/time/clock.h"

namespace ps::coordinator {

// Wall time in Unix milliseconds. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;
};

// The real clock.
class SystemClock : public Clock {
 public:
  int64_t NowMs() const override { return absl::ToUnixMillis(absl::Now()); }
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_CLOCK_H_
