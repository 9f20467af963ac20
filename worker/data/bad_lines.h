// Counts a reader's bad lines, keeps the first few with their file:line and
// reason, and turns too many into an error the worker reports.
#ifndef PS_WORKER_DATA_BAD_LINES_H_
#define PS_WORKER_DATA_BAD_LINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ps::worker::data {

struct BadLinePolicy {
  // The largest tolerated fraction of bad lines. 0: the first bad line is an
  // error. 1: never an error (bad lines are still counted and sampled).
  double max_fraction = 0.001;
  // While fewer lines than this have been read, the fraction is taken of
  // min_lines instead, so that one bad line early in a file is not already
  // "100%": with the defaults, the 2nd bad line among the first 1000 lines
  // is an error, and later ones once they pass 0.1% of the lines read. At
  // the end of the data the fraction of the lines read decides.
  int64_t min_lines = 1000;
  // Up to this many bad lines are never an error, whatever the fraction
  // (so that one bad line in a tiny file can pass).
  int64_t min_bad_lines = 0;
  // How many "file:line: reason" samples to keep.
  int max_samples = 20;
};

absl::Status ValidateBadLinePolicy(const BadLinePolicy& policy);

// Not thread-safe.
class BadLineCounter {
 public:
  BadLineCounter(BadLinePolicy policy, std::string what)
      : policy_(policy), what_(std::move(what)) {}

  void AddLine() { ++lines_; }
  // Counts a bad line (which must also have been counted by AddLine).
  void AddBad() { ++bad_; }
  // Whether the next bad line's location is still wanted as a sample
  // (finding a line number can cost a pass over the file's start).
  bool WantsSample() const {
    return static_cast<int>(samples_.size()) < policy_.max_samples;
  }
  void AddSample(std::string location_and_reason) {
    if (WantsSample()) samples_.push_back(std::move(location_and_reason));
  }

  // INVALID_ARGUMENT once the bad lines pass the policy's fraction (see
  // BadLinePolicy; `at_end` says the data is exhausted), naming `what`, the
  // counts and the samples.
  absl::Status Check(bool at_end) const;

  int64_t lines() const { return lines_; }
  int64_t bad() const { return bad_; }
  const std::vector<std::string>& samples() const { return samples_; }

 private:
  const BadLinePolicy policy_;
  const std::string what_;
  int64_t lines_ = 0;
  int64_t bad_ = 0;
  std::vector<std::string> samples_;
};

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_BAD_LINES_H_
