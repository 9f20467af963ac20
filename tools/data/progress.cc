#include "tools/data/progress.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps::data_tools {

Progress::Progress(std::string what, int64_t total, bool enabled)
    : what_(std::move(what)),
      total_(total),
      enabled_(enabled),
      start_(absl::Now()),
      last_(start_) {}

void Progress::MaybePrint(int64_t done) {
  const absl::Time now = absl::Now();
  if (now - last_ < absl::Seconds(2)) return;
  last_ = now;
  Print(done);
}

void Progress::Finish(int64_t done) {
  if (enabled_ && printed_) Print(done);
}

void Progress::Print(int64_t done) {
  printed_ = true;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  fprintf(stderr, "%s: %lld / %lld lines (%.1f%%), %.2f M lines/s\n",
          what_.c_str(), static_cast<long long>(done),
          static_cast<long long>(total_),
          total_ > 0 ? 100.0 * done / total_ : 100.0,
          seconds > 0 ? done / seconds / 1e6 : 0.0);
}

}  // namespace ps::data_tools
