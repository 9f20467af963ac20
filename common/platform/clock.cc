#include "common/platform/clock.h"

#include "absl/time/clock.h"

namespace ps {
namespace {

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

const Clock* Clock::Real() {
  static const Clock* const clock = new SystemClock;
  return clock;
}

}  // namespace ps
