#include "server/shard/admission_filter.h"

#include <algorithm>
#include <limits>

#include "common/wire/key_placement.h"

namespace ps::server {

AdmissionFilter::AdmissionFilter(const AdmissionSpec& spec)
    : min_count_(static_cast<uint32_t>(
          std::clamp<int64_t>(spec.min_count(), 1, 65535))),
      width_(static_cast<uint64_t>(std::max(1, spec.sketch_width()))),
      depth_(std::max(1, spec.sketch_depth())),
      counters_(new std::atomic<uint16_t>[width_ * depth_]) {
  for (uint64_t i = 0; i < width_ * depth_; ++i) {
    counters_[i].store(0, std::memory_order_relaxed);
  }
}

std::string AdmissionFilter::Counters() const {
  std::string out(width_ * depth_ * sizeof(uint16_t), '\0');
  for (uint64_t i = 0; i < width_ * depth_; ++i) {
    const uint16_t v = counters_[i].load(std::memory_order_relaxed);
    out[2 * i] = static_cast<char>(v & 0xFF);
    out[2 * i + 1] = static_cast<char>(v >> 8);
  }
  return out;
}

bool AdmissionFilter::LoadCounters(absl::string_view counters) {
  if (counters.size() != width_ * depth_ * sizeof(uint16_t)) return false;
  for (uint64_t i = 0; i < width_ * depth_; ++i) {
    const auto lo = static_cast<uint8_t>(counters[2 * i]);
    const auto hi = static_cast<uint8_t>(counters[2 * i + 1]);
    counters_[i].store(static_cast<uint16_t>(lo | (hi << 8)),
                       std::memory_order_relaxed);
  }
  return true;
}

size_t AdmissionFilter::Index(int row, uint64_t key) const {
  // One independent hash per row: Mix64 of the key under a salt per row
  // (independent of key_placement's and the row map's salts).
  const uint64_t h =
      Mix64(key ^ (0xA0761D6478BD642Full * static_cast<uint64_t>(row + 1)));
  // Multiply-shift onto [0, width): no modulo bias worth the name.
  const uint64_t slot =
      static_cast<uint64_t>((static_cast<unsigned __int128>(h) * width_) >> 64);
  return static_cast<size_t>(row) * width_ + slot;
}

bool AdmissionFilter::Count(uint64_t key) {
  uint32_t estimate = std::numeric_limits<uint32_t>::max();
  for (int row = 0; row < depth_; ++row) {
    std::atomic<uint16_t>& c = counters_[Index(row, key)];
    uint16_t v = c.load(std::memory_order_relaxed);
    while (v < std::numeric_limits<uint16_t>::max() &&
           !c.compare_exchange_weak(v, static_cast<uint16_t>(v + 1),
                                    std::memory_order_relaxed)) {
    }
    const uint32_t now = v < std::numeric_limits<uint16_t>::max() ? v + 1u : v;
    estimate = std::min(estimate, now);
  }
  return estimate >= min_count_;
}

bool AdmissionFilter::Admitted(uint64_t key) const {
  uint32_t estimate = std::numeric_limits<uint32_t>::max();
  for (int row = 0; row < depth_; ++row) {
    estimate = std::min<uint32_t>(
        estimate, counters_[Index(row, key)].load(std::memory_order_relaxed));
  }
  return estimate >= min_count_;
}

}  // namespace ps::server
