// The admission filter of a sparse table (proto/config.proto, AdmissionSpec):
// a count-min sketch of how many pushes carried each key, so that a key gets
// a row of its own only once it has been seen min_count times. Bounded
// memory: sketch_depth x sketch_width 16-bit saturating counters (8 MiB at
// the defaults), whatever the number of keys; the sketch over-counts, so a
// key may be admitted early, never late. min_count above 65535 counts as
// 65535.
//
// Thread-safe and lock-free (relaxed atomic counters): two pushes of the same
// key at once both count.
#ifndef PS_SERVER_SHARD_ADMISSION_FILTER_H_
#define PS_SERVER_SHARD_ADMISSION_FILTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/config.pb.h"

namespace ps::server {

class AdmissionFilter {
 public:
  // `spec` normalised (width and depth set).
  explicit AdmissionFilter(const AdmissionSpec& spec);

  // Counts one sighting of `key`; whether its count has reached min_count.
  bool Count(uint64_t key);
  // Whether `key`'s count has reached min_count, without counting.
  bool Admitted(uint64_t key) const;

  // The counters as bytes (little-endian uint16s, row by row), and back:
  // false if `counters` is not the size of this filter's.
  std::string Counters() const;
  bool LoadCounters(absl::string_view counters);

  int64_t bytes() const {
    return static_cast<int64_t>(sizeof(uint16_t)) * width_ * depth_;
  }

 private:
  size_t Index(int row, uint64_t key) const;

  const uint32_t min_count_;
  const uint64_t width_;
  const int depth_;
  std::unique_ptr<std::atomic<uint16_t>[]> counters_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_ADMISSION_FILTER_H_
