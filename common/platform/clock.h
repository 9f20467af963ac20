// Wall time, injected wherever a daemon stamps or compares times so that
// tests can move it by hand (common/platform/fake_clock.h). Never used for
// waiting: condition waits take absl deadlines from the real clock.
#ifndef PS_COMMON_PLATFORM_CLOCK_H_
#define PS_COMMON_PLATFORM_CLOCK_H_

#include <cstdint>

#include "absl/time/time.h"

namespace ps {

// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Now() in Unix milliseconds.
  int64_t NowMs() const { return absl::ToUnixMillis(Now()); }

  // The system clock: process-wide, never destroyed.
  static const Clock* Real();
};

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_CLOCK_H_
