#include "server/shard/seq_tracker.h"

#include <algorithm>

namespace ps::server {

void SeqTracker::Finish(uint64_t s) {
  in_flight_.erase(s);
  if (s <= contiguous_) return;
  done_above_.insert(s);
  while (done_above_.erase(contiguous_ + 1) > 0) ++contiguous_;
  // A lost seq must not make the set grow forever.
  if (done_above_.size() > kMaxSparse) {
    uint64_t lowest = *std::min_element(done_above_.begin(), done_above_.end());
    contiguous_ = lowest - 1;
    while (done_above_.erase(contiguous_ + 1) > 0) ++contiguous_;
  }
}

std::vector<uint64_t> SeqTracker::DoneAbove() const {
  std::vector<uint64_t> out(done_above_.begin(), done_above_.end());
  std::sort(out.begin(), out.end());
  return out;
}

SeqTracker SeqTracker::Of(uint64_t contiguous,
                          const std::vector<uint64_t>& done) {
  SeqTracker t(contiguous);
  t.done_above_.insert(done.begin(), done.end());
  return t;
}

}  // namespace ps::server
