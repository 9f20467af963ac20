// A clock tests move by hand (testonly). Thread-safe.
#ifndef PS_COMMON_PLATFORM_FAKE_CLOCK_H_
#define PS_COMMON_PLATFORM_FAKE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "common/platform/clock.h"

namespace ps {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1700000000000) : now_ms_(now_ms) {}
  absl::Time Now() const override {
    return absl::FromUnixMillis(now_ms_.load());
  }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }
  void Advance(absl::Duration d) { now_ms_ += absl::ToInt64Milliseconds(d); }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_FAKE_CLOCK_H_
