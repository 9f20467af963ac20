#include "server/shard/replica_entry.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/status.h"
#include "server/shard/shard_log.h"

namespace ps::server {
namespace {

void CopySparse(const std::vector<SparseRowsView>& views, bool with_rows,
                google::protobuf::RepeatedPtrField<SparseRows>* out) {
  for (const SparseRowsView& v : views) {
    SparseRows* r = out->Add();
    r->set_table(v.table);
    r->set_dtype(v.dtype);
    r->set_num_rows(v.num_rows);
    r->set_dim(v.dim);
    r->set_keys(std::string(reinterpret_cast<const char*>(v.keys.data()),
                            v.keys.size() * sizeof(uint64_t)));
    if (with_rows) r->set_rows(std::string(v.rows));
  }
}

}  // namespace

PushRequest PushEntryOf(const PushArgs& args) {
  PushRequest r;
  r.set_job_id(std::string(args.job_id));
  if (args.shard >= 0) r.set_shard(args.shard);
  r.set_worker_id(args.worker_id);
  r.set_seq(args.seq);
  r.set_clock(args.clock);
  r.set_base_version(args.base_version);
  r.set_end_of_step(args.end_of_step);
  r.set_chunks_final(args.chunks_final);
  for (const PushChunk& c : args.chunks) {
    ChunkPayload* p = r.add_chunks();
    p->set_chunk_id(c.chunk_id);
    p->set_dtype(c.dtype);
    p->set_num_elements(c.num_elements);
    p->set_indices(std::string(c.indices));
    if (c.segments.empty()) {
      p->set_data(std::string(c.data));
    } else {
      std::string* data = p->mutable_data();
      for (absl::string_view s : c.segments) data->append(s.data(), s.size());
    }
  }
  CopySparse(args.sparse, /*with_rows=*/true, r.mutable_sparse());
  return r;
}

PullRequest PullEntryOf(const PullArgs& args) {
  PullRequest r;
  r.set_job_id(std::string(args.job_id));
  if (args.shard >= 0) r.set_shard(args.shard);
  r.set_worker_id(args.worker_id);
  r.set_clock(args.clock);
  r.set_min_version(args.min_version);
  r.set_sparse_only(true);
  CopySparse(args.sparse, /*with_rows=*/false, r.mutable_sparse());
  return r;
}

PushArgs PushArgsOf(const PushRequest& request,
                    std::deque<std::vector<uint64_t>>* keys) {
  PushArgs args;
  args.job_id = request.job_id();
  args.shard = request.has_shard() ? request.shard() : -1;
  args.worker_id = request.worker_id();
  args.seq = request.seq();
  args.clock = request.clock();
  args.base_version = request.base_version();
  args.end_of_step = request.end_of_step();
  args.chunks_final = request.chunks_final();
  for (const ChunkPayload& p : request.chunks()) {
    PushChunk c;
    c.chunk_id = p.chunk_id();
    c.dtype = p.dtype() == DTYPE_UNSPECIFIED ? FLOAT32 : p.dtype();
    c.num_elements = p.num_elements();
    c.data = p.data();
    c.indices = p.indices();
    args.chunks.push_back(std::move(c));
  }
  args.sparse = ViewsOfSparseRows(request.sparse(), keys);
  return args;
}

PullArgs PullArgsOf(const PullRequest& request,
                    std::deque<std::vector<uint64_t>>* keys) {
  PullArgs args;
  args.job_id = request.job_id();
  args.shard = request.has_shard() ? request.shard() : -1;
  args.worker_id = request.worker_id();
  args.clock = request.clock();
  args.min_version = request.min_version();
  args.sparse_only = request.sparse_only();
  args.sparse = ViewsOfSparseRows(request.sparse(), keys);
  return args;
}

ReplicaApplier::ReplicaApplier(ShardStore* store, int64_t epoch,
                               prometheus::Counter* mismatch_counter)
    : store_(store),
      epoch_(epoch),
      mismatch_counter_(mismatch_counter),
      thread_([this] { Run(); }) {}

ReplicaApplier::~ReplicaApplier() { Stop(); }

void ReplicaApplier::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopped_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<ReplicateResponse> ReplicaApplier::Apply(
    const ReplicateRequest& request) {
  absl::MutexLock l(&mu_);
  if (request.replica_epoch() != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica of shard ", request.shard(), " of job '", request.job_id(),
        "' follows the primary of epoch ", epoch_, ", not ",
        request.replica_epoch(),
        request.replica_epoch() < epoch_ ? " (that primary was deposed)"
                                         : " (the coordinator sets it up "
                                           "first)"));
  }
  if (request.has_image() && request.image().index() > image_index_) {
    // A state transfer: once what is held is applied, the image replaces
    // it (whatever this copy held: the primary sends one only to a backup
    // it builds), and the entries after it follow. A resend of the image
    // installed last is skipped.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopped_ || applied_ == held_;
    };
    mu_.Await(absl::Condition(&idle));
    if (stopped_) return absl::UnavailableError("the replica stopped");
    PS_RETURN_IF_ERROR(store_->Install(request.job_id(), request.image()));
    image_index_ = request.image().index();
    held_ = applied_ = image_index_;
    ShardLog(absl::StrCat("shard ", request.shard(), " of job '",
                          request.job_id(),
                          "': backup state installed at entry ", image_index_,
                          " (version ", request.image().version(), ")"));
  }
  for (const ReplicaEntry& entry : request.entries()) {
    if (entry.index() <= held_) continue;  // a resend
    if (entry.index() != held_ + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "replica of shard ", request.shard(), " of job '", request.job_id(),
          "' holds entries up to ", held_, "; got entry ", entry.index()));
    }
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopped_ || queued_bytes_ < kMaxQueuedBytes;
    };
    mu_.Await(absl::Condition(&room));
    if (stopped_) return absl::UnavailableError("the replica stopped");
    queue_.push_back(entry);
    queued_bytes_ += entry.ByteSizeLong();
    held_ = entry.index();
  }
  ReplicateResponse response;
  response.set_applied_index(held_);
  return response;
}

void ReplicaApplier::Run() {
  while (true) {
    ReplicaEntry entry;
    {
      absl::MutexLock l(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopped_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&work));
      if (stopped_) return;
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    const size_t bytes = entry.ByteSizeLong();
    ApplyOne(entry);
    absl::MutexLock l(&mu_);
    queued_bytes_ -= std::min(queued_bytes_, bytes);
    applied_ = entry.index();
  }
}

void ReplicaApplier::Drain() {
  absl::MutexLock l(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || applied_ == held_;
  };
  mu_.Await(absl::Condition(&done));
}

void ReplicaApplier::ApplyOne(const ReplicaEntry& entry) {
  // The primary's call could go through, so this one does at once: a
  // deadline only bounds a wait that would mean the copies differ.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::deque<std::vector<uint64_t>> keys;
  absl::Status result;
  switch (entry.change_case()) {
    case ReplicaEntry::kPush:
      result = store_->Push(PushArgsOf(entry.push(), &keys), deadline).status();
      break;
    case ReplicaEntry::kPull: {
      thread_local std::string scratch;
      auto rows = [&](size_t, DType dtype, int32_t dim,
                      int64_t num_rows) -> char* {
        scratch.resize(static_cast<size_t>(num_rows) * dim * DTypeSize(dtype));
        return scratch.data();
      };
      const SparseSink row_sink = rows;
      result = store_
                   ->PullWithRows(
                       PullArgsOf(entry.pull(), &keys), deadline,
                       [](const Chunk&, absl::Span<const float>,
                          const WeightsRef&) {},
                       &row_sink)
                   .status();
      break;
    }
    case ReplicaEntry::kMembership:
      result = store_->UpdateMembership(entry.membership()).status();
      break;
    default:
      result = absl::InvalidArgumentError("the entry holds no change");
  }
  if (static_cast<int>(result.code()) != entry.code()) {
    if (mismatch_counter_ != nullptr) mismatch_counter_->Increment();
    absl::MutexLock l(&mu_);
    ++mismatches_;
    ShardLog(absl::StrCat("replica entry ", entry.index(),
                          " answered differently here (", result.ToString(),
                          ") than on the primary (code ", entry.code(), ")"));
  }
}

int64_t ReplicaApplier::held_index() const {
  absl::MutexLock l(&mu_);
  return held_;
}

int64_t ReplicaApplier::mismatches() const {
  absl::MutexLock l(&mu_);
  return mismatches_;
}

}  // namespace ps::server
