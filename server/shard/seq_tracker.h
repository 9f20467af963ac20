// Exactly-once bookkeeping of one worker's push sequence numbers on one
// shard: a retried push (same number) is recognised and acknowledged
// without being applied again.
//
// Everything up to contiguous() is done, plus a sparse set above it, plus
// the numbers in flight (admitted, not yet finished). Bounded: gaps close as
// pushes complete (a rejected push uses its number up too), and a number
// that never arrives stops holding the set back once it passes kMaxSparse.
//
// Thread-compatible: the job's mutex guards it (server/shard/job.h).
#ifndef PS_SERVER_SHARD_SEQ_TRACKER_H_
#define PS_SERVER_SHARD_SEQ_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace ps::server {

class SeqTracker {
 public:
  // How many finished numbers above a gap are kept before the gap is given
  // up (the lowest of them becomes the new contiguous end).
  static constexpr size_t kMaxSparse = size_t{1} << 16;

  SeqTracker() = default;
  // Numbers of incarnation i start at SeqBase(i) + 1 (common/platform/rpc.h).
  explicit SeqTracker(uint64_t base) : contiguous_(base) {}

  // Whether `s` is done or in flight: a push numbered `s` is a duplicate.
  bool Seen(uint64_t s) const {
    return s <= contiguous_ || done_above_.contains(s) ||
           in_flight_.contains(s);
  }
  // Marks `s` as admitted and being applied.
  void Start(uint64_t s) { in_flight_.insert(s); }
  bool InFlight(uint64_t s) const { return in_flight_.contains(s); }
  // Marks `s` done (applied, dropped or rejected).
  void Finish(uint64_t s);

  // Every number up to this one is done.
  uint64_t contiguous() const { return contiguous_; }

  // A state transfer (shard_image.h): the numbers done above contiguous(),
  // ascending; whether none is in flight; a tracker made of both.
  std::vector<uint64_t> DoneAbove() const;
  bool Idle() const { return in_flight_.empty(); }
  static SeqTracker Of(uint64_t contiguous, const std::vector<uint64_t>& done);

 private:
  uint64_t contiguous_ = 0;
  absl::flat_hash_set<uint64_t> done_above_;
  absl::flat_hash_set<uint64_t> in_flight_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SEQ_TRACKER_H_
