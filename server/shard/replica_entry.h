// Replicated shards: the changes a primary sends its backups
// (ReplicaEntry, proto/parameter_service.proto), made from a push's or
// pull's arguments and read back into them, and a backup's side: the
// entries applied in order to the shard store that holds its copy.
#ifndef PS_SERVER_SHARD_REPLICA_ENTRY_H_
#define PS_SERVER_SHARD_REPLICA_ENTRY_H_

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/metrics.h"
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

// A backup of one shard of one job: takes its primary's entries in index
// order and applies them to `store` on a thread of its own, each through
// the same ShardStore call the primary made, so that it holds what the
// primary holds: weights, optimizer slots, rows, versions, clocks and
// sequence numbers. An entry is acknowledged once it is held here (queued
// in memory, in order), not once applied: the primary's answers wait for
// the transfer, not for this copy's apply, which runs beside the primary's
// next ones. A promotion first waits for every held entry to be applied
// (Drain). Thread-safe.
class ReplicaApplier {
 public:
  // `mismatch_counter` (may be null) counts what mismatches() does, for
  // the server's metrics.
  ReplicaApplier(ShardStore* store, int64_t epoch,
                 prometheus::Counter* mismatch_counter = nullptr);
  ~ReplicaApplier();  // Stop()

  // Holds the entries above held_index(), which must follow it without a
  // gap (FAILED_PRECONDITION otherwise); a request with an image (a state
  // transfer) first makes the store that state (ShardStore::Install) and
  // holds entries up to its index; refuses a primary of another
  // epoch (FAILED_PRECONDITION: an older one was deposed). Waits while the
  // entries not yet applied pass kMaxQueuedBytes (the primary then waits
  // too). An entry whose result here differs from the primary's is counted
  // (mismatches(), and the counter given to the constructor) and logged.
  absl::StatusOr<ReplicateResponse> Apply(const ReplicateRequest& request);

  // Waits until every held entry is applied.
  void Drain();
  // Stops applying (what is queued is dropped) and joins the thread.
  void Stop();

  int64_t held_index() const;
  int64_t epoch() const { return epoch_; }
  int64_t mismatches() const;

  static constexpr size_t kMaxQueuedBytes = size_t{256} << 20;

 private:
  void Run();
  // One entry through the store; the result checked against the primary's.
  void ApplyOne(const ReplicaEntry& entry);

  ShardStore* const store_;
  const int64_t epoch_;
  prometheus::Counter* const mismatch_counter_;
  mutable absl::Mutex mu_;
  std::deque<ReplicaEntry> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  // The index of the image installed last (a state transfer); -1: none.
  int64_t image_index_ ABSL_GUARDED_BY(mu_) = -1;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_REPLICA_ENTRY_H_
