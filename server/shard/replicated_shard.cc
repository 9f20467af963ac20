#include "server/shard/replicated_shard.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/platform/status.h"
#include "server/shard/replica_entry.h"
#include "server/shard/shard_log.h"

namespace ps::server {
namespace {

// A sender's batch: entries up to this many bytes (at least one entry).
constexpr size_t kMaxBatchBytes = 32 << 20;
// How long one Replicate call may take before it is tried again.
constexpr absl::Duration kSendTimeout = absl::Seconds(5);

}  // namespace

ReplicatedShard::ReplicatedShard(
    ShardStore* store, std::string job_id, int shard, int64_t epoch,
    std::vector<std::unique_ptr<ReplicaLink>> backups, bool transfer)
    : store_(store), job_id_(std::move(job_id)), shard_(shard), epoch_(epoch) {
  absl::MutexLock turn(&turn_);
  {
    absl::MutexLock l(&mu_);
    for (auto& link : backups) AddBackupLocked(std::move(link), transfer);
  }
  TakeImage();
}

void ReplicatedShard::AddBackupLocked(std::unique_ptr<ReplicaLink> link,
                                      bool building) {
  auto b = std::make_unique<Backup>();
  b->link = std::move(link);
  if (building) {
    b->stage = Backup::kWaitImage;
    wants_image_ = true;
  }
  Backup* raw = b.get();
  backups_.push_back(std::move(b));
  raw->sender = std::thread([this, raw] { Send(raw); });
}

void ReplicatedShard::TakeImage() {
  {
    absl::MutexLock l(&mu_);
    if (!wants_image_ || stopped_) return;
  }
  // Under the turn nothing changes the shard; BSP refuses mid-step, and
  // the next change (the step's close among them) tries again.
  const absl::Time start = absl::Now();
  absl::StatusOr<ShardImage> image = store_->Image(job_id_);
  if (!image.ok()) return;
  const absl::Duration took = absl::Now() - start;
  absl::MutexLock l(&mu_);
  image->set_index(applied_);
  auto shared = std::make_shared<const ShardImage>(*std::move(image));
  for (auto& b : backups_) {
    if (b->removed || b->stage != Backup::kWaitImage) continue;
    b->stage = Backup::kSendImage;
    b->image = shared;
    ShardLog(absl::StrCat(
        "shard ", shard_, " of job '", job_id_, "': state transfer to backup ",
        b->link->address(), " from entry ", applied_, " (version ",
        shared->version(), ", ", shared->ByteSizeLong(), " bytes, taken in ",
        absl::FormatDuration(took), " while the shard waited)"));
  }
  wants_image_ = false;
}

ReplicatedShard::~ReplicatedShard() { Stop(); }

void ReplicatedShard::Stop() {
  std::vector<std::thread> senders;
  {
    absl::MutexLock l(&mu_);
    stopped_ = true;
    for (auto& b : backups_) {
      if (b->sender.joinable()) senders.push_back(std::move(b->sender));
    }
  }
  for (std::thread& t : senders) t.join();
}

int64_t ReplicatedShard::AckedLocked() const {
  int64_t acked = applied_;
  for (const auto& b : backups_) {
    if (!b->removed && b->stage >= Backup::kCatchUp) {
      acked = std::min(acked, b->acked);
    }
  }
  return acked;
}

int64_t ReplicatedShard::NeededLocked() const {
  int64_t needed = AckedLocked();
  for (const auto& b : backups_) {
    if (!b->removed && b->stage == Backup::kSendImage) {
      needed = std::min(needed, std::max(b->acked, b->image->index()));
    }
  }
  return needed;
}

void ReplicatedShard::TrimLocked() {
  const int64_t needed = NeededLocked();
  while (!log_.empty() && first_index_ <= needed) {
    log_.pop_front();
    ++first_index_;
  }
}

int64_t ReplicatedShard::Append(ReplicaEntry entry) {
  absl::MutexLock l(&mu_);
  entry.set_index(applied_ + 1);
  applied_ = entry.index();
  log_.push_back(std::make_shared<const ReplicaEntry>(std::move(entry)));
  TrimLocked();  // nothing to keep without backups
  return applied_;
}

absl::Status ReplicatedShard::AwaitAcked(int64_t index, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto held = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || AckedLocked() >= index;
  };
  const bool done = mu_.AwaitWithDeadline(absl::Condition(&held), deadline);
  if (stopped_) {
    return absl::UnavailableError(absl::StrCat(
        "shard ", shard_, " of job '", job_id_, "' stopped serving here"));
  }
  if (done) return absl::OkStatus();
  std::vector<std::string> behind;
  for (const auto& b : backups_) {
    if (b->removed || b->acked >= index) continue;
    behind.push_back(absl::StrCat(
        b->link->address(), " holds entries up to ", b->acked,
        b->last_error.empty() ? "" : absl::StrCat(" (", b->last_error, ")")));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("shard ", shard_, " of job '", job_id_,
                   "': not yet held by every backup (entry ", index,
                   "): ", absl::StrJoin(behind, "; ")));
}

absl::StatusOr<PushResult> ReplicatedShard::Push(const PushArgs& args,
                                                 absl::Time deadline) {
  // A BSP end of step waiting for the worker's earlier pushes waits here,
  // outside the turn those pushes need; each appended change may be one.
  while (true) {
    int64_t seen;
    {
      absl::MutexLock l(&mu_);
      if (stopped_) break;
      seen = applied_;
    }
    if (!store_->PushMayWait(args)) break;
    absl::MutexLock l(&mu_);
    auto moved = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopped_ || applied_ != seen;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&moved), deadline)) break;
  }
  absl::StatusOr<PushResult> result;
  int64_t index;
  {
    absl::MutexLock turn(&turn_);
    result = store_->Push(args, deadline);
    ReplicaEntry entry;
    *entry.mutable_push() = PushEntryOf(args);
    entry.set_code(static_cast<int>(result.status().code()));
    index = Append(std::move(entry));
    TakeImage();
  }
  PS_RETURN_IF_ERROR(AwaitAcked(index, deadline));
  return result;
}

absl::StatusOr<PullResult> ReplicatedShard::PullWithRows(
    const PullArgs& args, absl::Time deadline, ChunkSink sink,
    const SparseSink* rows) {
  if (deadline <= absl::Now()) {
    // The answer waits for the backups: never on the caller's thread
    // (parameter_service.cc runs it again on its wait pool).
    return absl::DeadlineExceededError(
        "a replicated shard's pull waits for its backups");
  }
  absl::StatusOr<PullResult> result;
  int64_t index;
  if (args.sparse.empty()) {
    result = store_->PullWithRows(args, deadline, sink, rows);
    if (!result.ok()) return result;
    absl::MutexLock l(&mu_);
    index = applied_;
  } else {
    // Reading rows changes the shard: first wait for the pull's condition
    // (versions and clocks only move forward) outside the turn, with the
    // same call reading nothing, then read under the turn; should the
    // condition not hold there after all, the turn is given back at once.
    PullArgs probe = args;
    probe.version_only = true;
    while (true) {
      PS_RETURN_IF_ERROR(
          store_->PullWithRows(probe, deadline, sink, rows).status());
      absl::MutexLock turn(&turn_);
      const absl::Time now = absl::Now();
      result = store_->PullWithRows(args, std::min(deadline, now), sink, rows);
      if (result.status().code() == absl::StatusCode::kDeadlineExceeded &&
          now < deadline) {
        continue;
      }
      if (!result.ok()) return result;  // nothing read, nothing changed
      ReplicaEntry entry;
      *entry.mutable_pull() = PullEntryOf(args);
      index = Append(std::move(entry));
      TakeImage();
      break;
    }
  }
  PS_RETURN_IF_ERROR(AwaitAcked(index, deadline));
  return result;
}

absl::StatusOr<UpdateMembershipResponse> ReplicatedShard::UpdateMembership(
    const UpdateMembershipRequest& request) {
  absl::StatusOr<UpdateMembershipResponse> result;
  int64_t index;
  {
    absl::MutexLock turn(&turn_);
    result = store_->UpdateMembership(request);
    ReplicaEntry entry;
    *entry.mutable_membership() = request;
    entry.set_code(static_cast<int>(result.status().code()));
    index = Append(std::move(entry));
    TakeImage();
  }
  PS_RETURN_IF_ERROR(AwaitAcked(index, absl::Now() + absl::Seconds(30)));
  return result;
}

void ReplicatedShard::SetBackups(const std::vector<std::string>& addresses,
                                 const ReplicaLinkFactory& links) {
  absl::MutexLock turn(&turn_);
  {
    absl::MutexLock l(&mu_);
    std::vector<std::string> held;
    for (auto& b : backups_) {
      if (b->removed) continue;
      if (std::find(addresses.begin(), addresses.end(), b->link->address()) !=
          addresses.end()) {
        held.push_back(b->link->address());
        continue;
      }
      b->removed = true;
      ShardLog(absl::StrCat("shard ", shard_, " of job '", job_id_,
                            "': backup ", b->link->address(),
                            " dropped (entries up to ", b->acked, " of ",
                            applied_, ")"));
    }
    if (!stopped_) {
      for (const std::string& address : addresses) {
        if (std::find(held.begin(), held.end(), address) != held.end()) {
          continue;
        }
        ShardLog(absl::StrCat("shard ", shard_, " of job '", job_id_,
                              "': new backup ", address,
                              " (built by a state transfer)"));
        AddBackupLocked(links(address), /*building=*/true);
      }
    }
    TrimLocked();
  }
  TakeImage();
}

int64_t ReplicatedShard::applied_index() const {
  absl::MutexLock l(&mu_);
  return applied_;
}

std::vector<BackupStatus> ReplicatedShard::Backups() const {
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  std::vector<BackupStatus> out;
  for (const auto& b : backups_) {
    if (b->removed) continue;
    out.push_back({b->link->address(), b->acked, b->last_error,
                   b->stage != Backup::kInSync,
                   std::max(absl::ZeroDuration(), now - b->unanswered_since)});
  }
  return out;
}

void ReplicatedShard::Send(Backup* b) {
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    std::vector<EntryRef> batch;
    std::shared_ptr<const ShardImage> image;
    {
      absl::MutexLock l(&mu_);
      auto work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopped_ || b->removed ||
               (b->stage != Backup::kWaitImage &&
                (b->acked < applied_ || b->image != nullptr));
      };
      mu_.Await(absl::Condition(&work));
      if (stopped_ || b->removed) return;
      image = b->image;
      const int64_t from =
          image != nullptr ? std::max(b->acked, image->index()) : b->acked;
      size_t bytes = image != nullptr ? image->ByteSizeLong() : 0;
      if (b->unanswered_since == absl::InfiniteFuture()) {
        b->unanswered_since = absl::Now();
      }
      for (int64_t i = std::max(from + 1, first_index_);
           i <= applied_ && (batch.empty() || bytes < kMaxBatchBytes); ++i) {
        batch.push_back(log_[i - first_index_]);
        bytes += batch.back()->ByteSizeLong();
      }
    }
    ReplicateRequest request;
    request.set_job_id(job_id_);
    request.set_shard(shard_);
    request.set_replica_epoch(epoch_);
    if (image != nullptr) *request.mutable_image() = *image;
    for (const EntryRef& e : batch) *request.add_entries() = *e;
    absl::StatusOr<ReplicateResponse> r =
        b->link->Send(request, absl::Now() + kSendTimeout);
    {
      absl::MutexLock l(&mu_);
      if (r.ok()) {
        b->unanswered_since = absl::InfiniteFuture();
        b->acked = std::max(b->acked, r->applied_index());
        if (b->stage == Backup::kSendImage && b->acked >= b->image->index()) {
          // Answers wait for it from now on; those given before did not.
          b->stage = Backup::kCatchUp;
          b->image.reset();
          b->join = applied_;
        }
        if (b->stage == Backup::kCatchUp && b->acked >= b->join) {
          b->stage = Backup::kInSync;
          ShardLog(absl::StrCat("shard ", shard_, " of job '", job_id_,
                                "': backup ", b->link->address(),
                                " is in sync at entry ", b->acked,
                                " (state transfer done)"));
        }
        if (!b->last_error.empty()) {
          ShardLog(absl::StrCat("shard ", shard_, " of job '", job_id_,
                                "': backup ", b->link->address(),
                                " answers again"));
        }
        b->last_error.clear();
        backoff = absl::Milliseconds(20);
        TrimLocked();
        continue;
      }
      const std::string error = r.status().ToString();
      if (error != b->last_error) {
        ShardLog(absl::StrCat("shard ", shard_, " of job '", job_id_,
                              "': backup ", b->link->address(), ": ", error,
                              " (answers wait for it)"));
      }
      b->last_error = error;
      if (stopped_ || b->removed) return;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

}  // namespace ps::server
