// Replicated shards, the primary's side: one shard of one job whose every
// change is sent, in the order it was made, to the backups, and whose
// answers wait until every backup holds what they reflect.
//
// Order. The changes of a shard go through one turn: a push (or a pull
// that reads sparse rows, or a membership update) runs on the shard store
// and is appended to the log while it holds the turn, so the log's order
// is the order the store made them in, and a backup that applies the log
// in order through the same calls (ReplicaApplier, replica_entry.h) makes
// the same state bit for bit (BSP sums gradients in worker order whatever
// the arrival order; ASP/SSP apply in the log's order). A BSP end of step
// that must first wait for the worker's earlier pushes waits before it
// takes the turn, so the turn is never held across a wait for another
// call's progress.
//
// Acknowledgement. A push, a pull and a membership update are answered
// only once every backup holds every entry the shard had applied when the
// answer was made (acked index >= that index): a worker is never told of a
// change, nor reads weights, that a failover could lose. A backup that does
// not answer holds those answers back (never acknowledged in its place)
// until the coordinator removes it (SetBackups): when its server is found
// dead, or when this primary reports it unanswered for longer than the
// coordinator's --backup_timeout_ms (a link cut between the two).
//
// Each backup has a sender thread that sends the entries it does not hold
// yet, in batches, one call in flight, retrying (with backoff) until the
// backup holds them or is removed.
//
// State transfer. A backup added to a running shard (SetBackups with a new
// address, or the backups a promoted primary is given) starts from an
// image of the shard (shard_image.h), taken under the turn between two
// changes -- under BSP at the first step close -- and then gets the
// entries after it. Answers do not wait for it until it holds the image;
// from then on they do, and once it also holds every entry applied at
// that moment (all that was answered without it) it is in sync. Until
// then it is "building" (ShardStatus.Backup.building), and the
// coordinator does not promote it.
#ifndef PS_SERVER_SHARD_REPLICATED_SHARD_H_
#define PS_SERVER_SHARD_REPLICATED_SHARD_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/push_pull.h"
#include "server/shard/shard_store.h"

namespace ps::server {

// A primary's connection to one backup (gRPC in ps_server, the backup's
// ReplicaApplier directly in tests).
class ReplicaLink {
 public:
  virtual ~ReplicaLink() = default;
  virtual absl::StatusOr<ReplicateResponse> Send(
      const ReplicateRequest& request, absl::Time deadline) = 0;
  virtual const std::string& address() const = 0;
};

using ReplicaLinkFactory =
    std::function<std::unique_ptr<ReplicaLink>(const std::string& address)>;

struct BackupStatus {
  std::string address;
  int64_t acked_index = 0;
  std::string last_error;  // empty while it answers
  bool building = false;   // a state transfer not yet caught up
  // Since the oldest call the backup has not answered yet was sent (zero
  // while it answers; a failed call is not an answer).
  absl::Duration unanswered;
};

class ReplicatedShard {
 public:
  // `store` holds the shard (set up already) and outlives this object.
  // `backups` start where this shard is (a job's start, all at its
  // initial state) unless `transfer`: then each first gets an image (a
  // promoted backup's remaining backups followed another primary).
  ReplicatedShard(ShardStore* store, std::string job_id, int shard,
                  int64_t epoch,
                  std::vector<std::unique_ptr<ReplicaLink>> backups,
                  bool transfer = false);
  ~ReplicatedShard();  // Stop()

  // ShardStore's calls for this shard, replicated as the file comment says.
  absl::StatusOr<PushResult> Push(const PushArgs& args, absl::Time deadline);
  absl::StatusOr<PullResult> PullWithRows(const PullArgs& args,
                                          absl::Time deadline, ChunkSink sink,
                                          const SparseSink* rows);
  absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const UpdateMembershipRequest& request);

  // The coordinator's backups from now on: those not at `addresses` are
  // dropped (answers stop waiting for them), and those new here are added
  // through `links`, each built by a state transfer.
  void SetBackups(const std::vector<std::string>& addresses,
                  const ReplicaLinkFactory& links);

  // Releases every waiting answer with UNAVAILABLE and stops the senders.
  void Stop();

  int64_t epoch() const { return epoch_; }
  int64_t applied_index() const;
  std::vector<BackupStatus> Backups() const;

 private:
  struct Backup {
    std::unique_ptr<ReplicaLink> link;
    int64_t acked = 0;
    bool removed = false;
    // A state transfer's stages, as the file comment says: waiting for
    // an image to be taken, sending it (with every call until held),
    // catching up to `join` (answers wait for it), in sync.
    enum Stage { kWaitImage, kSendImage, kCatchUp, kInSync };
    Stage stage = kInSync;
    std::shared_ptr<const ShardImage> image;
    int64_t join = 0;
    std::string last_error;
    // When the first call since its last answer was sent; InfiniteFuture
    // while it answers.
    absl::Time unanswered_since = absl::InfiniteFuture();
    std::thread sender;
  };
  using EntryRef = std::shared_ptr<const ReplicaEntry>;

  // Appends `entry` (its index set here) under the turn.
  int64_t Append(ReplicaEntry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(turn_);
  // Under the turn: gives the building backups waiting for one an image of
  // the shard, if it can be taken now (BSP: between steps).
  void TakeImage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(turn_);
  void AddBackupLocked(std::unique_ptr<ReplicaLink> link, bool building)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until every backup holds entries up to `index`: OK, or
  // UNAVAILABLE (stopped), DEADLINE_EXCEEDED naming what is missing.
  absl::Status AwaitAcked(int64_t index, absl::Time deadline);
  int64_t AckedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first entry some backup may still need.
  int64_t NeededLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(Backup* backup);

  ShardStore* const store_;
  const std::string job_id_;
  const int shard_;
  const int64_t epoch_;

  // Held while a change runs on the store and is appended (the log order).
  absl::Mutex turn_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  int64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  // Entries first_index_, first_index_ + 1, ...: those some backup may
  // still need.
  std::deque<EntryRef> log_ ABSL_GUARDED_BY(mu_);
  int64_t first_index_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::unique_ptr<Backup>> backups_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // A building backup waits for an image (TakeImage).
  bool wants_image_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_REPLICATED_SHARD_H_
