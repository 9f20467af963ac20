// Replicated shards: the changes a primary sends its backups
// (ReplicaEntry, proto/parameter_service.proto), made from a push's or
// pull's arguments and read back into them, and a backup's side: the
// entries applied in order to the shard store that holds its copy.
#ifndef PS_SERVER_SHARD_REPLICA_ENTRY_H_
#define PS_SERVER_SHARD_REPLICA_ENTRY_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/push_pull.h"
#include "server/shard/shard_store.h"

namespace ps::server {

// A copy of `args` that owns its bytes (the chunks' segments gathered).
PushRequest PushEntryOf(const PushArgs& args);

// A pull's change to the shard: the rows its sparse keys read (created if
// new, their recency moved); its chunks change nothing and are left out.
PullRequest PullEntryOf(const PullArgs& args);

// Arguments viewing `request` (which must outlive them); `keys` holds the
// sparse keys copied so that they are aligned.
PushArgs PushArgsOf(const PushRequest& request,
                    std::deque<std::vector<uint64_t>>* keys);
PullArgs PullArgsOf(const PullRequest& request,
                    std::deque<std::vector<uint64_t>>* keys);

// A backup of one shard of one job: applies its primary's entries to
// `store` in index order, each through the same ShardStore call the
// primary made, so that it holds what the primary holds: weights,
// optimizer slots, rows, versions, clocks and sequence numbers.
// Thread-safe (one Replicate at a time applies).
class ReplicaApplier {
 public:
  ReplicaApplier(ShardStore* store, int64_t epoch)
      : store_(store), epoch_(epoch) {}

  // Applies the entries above applied_index(), which must follow it
  // without a gap (FAILED_PRECONDITION otherwise); refuses a primary of an
  // older epoch (FAILED_PRECONDITION: it was deposed). An entry whose
  // result differs from the primary's is counted (mismatches()) and logged.
  absl::StatusOr<ReplicateResponse> Apply(const ReplicateRequest& request);

  // A promotion or a new primary: entries of `epoch` start at index 1.
  void SetEpoch(int64_t epoch);

  int64_t applied_index() const;
  int64_t epoch() const;
  int64_t mismatches() const;

 private:
  absl::Status ApplyOne(const ReplicaEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ShardStore* const store_;
  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_);
  int64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_REPLICA_ENTRY_H_
