// Progress of a long generation on stderr: at most one line every two
// seconds, with the rate, so runs of 10^8 lines show they are alive.
#ifndef PS_TOOLS_DATA_PROGRESS_H_
#define PS_TOOLS_DATA_PROGRESS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace ps::data_tools {

class Progress {
 public:
  Progress(std::string what, int64_t total, bool enabled);

  // `done` of `total` lines so far. Cheap: looks at the clock every 64K.
  void Update(int64_t done) {
    if (enabled_ && (done & 0xffff) == 0) MaybePrint(done);
  }
  // The final line (when any progress was printed, or always if `always`).
  void Finish(int64_t done);

 private:
  void MaybePrint(int64_t done);
  void Print(int64_t done);

  const std::string what_;
  const int64_t total_;
  const bool enabled_;
  const absl::Time start_;
  absl::Time last_;
  bool printed_ = false;
};

}  // namespace ps::data_tools

#endif  // PS_TOOLS_DATA_PROGRESS_H_
