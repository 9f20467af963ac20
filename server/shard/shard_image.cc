#include "server/shard/shard_image.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/wire/checkpoint.h"
#include "server/shard/job_checkpoint.h"
#include "server/shard/sparse_table.h"

namespace ps::server {
namespace {

bool IsSparse(const Job& job, const Table* table) {
  return std::find(job.sparse_tables.begin(), job.sparse_tables.end(), table) !=
         job.sparse_tables.end();
}

// FAILED_PRECONDITION while a push is in flight or (BSP) the open step
// has something staged.
absl::Status CheckQuiet(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
  const bool bsp = job.model() == ConsistencySpec::BSP;
  for (const auto& [id, w] : job.workers) {
    if (!w.seq.Idle() || (bsp && w.pushed_step >= job.version)) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", job.shard_index, " of job '", job.id,
                       "': member ", id, " has a push in step ", job.version,
                       " (an image waits for the step's close)"));
    }
  }
  if (bsp && (job.closing || !job.completed.empty())) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", job.shard_index, " of job '", job.id, "': step ",
                     job.version, " is open"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardImage> ImageOf(Job& job) {
  {
    // First without stopping the pulls: mid-step, the usual answer.
    absl::MutexLock jl(&job.mu);
    PS_RETURN_IF_ERROR(CheckQuiet(job));
  }
  absl::WriterMutexLock al(&job.apply_mu);
  ShardImage image;
  int64_t version = 0;
  {
    absl::MutexLock jl(&job.mu);
    PS_RETURN_IF_ERROR(CheckQuiet(job));
    version = job.version;
    image.set_version(job.version);
    image.set_membership_epoch(job.membership_epoch);
    image.set_last_checkpoint_version(job.last_checkpoint_version);
    image.set_early_step(job.early_step);
    for (const std::vector<int64_t>& parts : job.early_applied) {
      image.add_early_applied()->mutable_steps()->Add(parts.begin(),
                                                      parts.end());
    }
    std::vector<int64_t> ids;
    for (const auto& [id, w] : job.workers) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (int64_t id : ids) {
      const WorkerState& w = job.workers.at(id);
      ShardImage::Worker* out = image.add_workers();
      out->set_id(id);
      out->set_active(w.active);
      out->set_clock(w.clock);
      out->set_last_push_ms(w.last_push_ms);
      out->set_pushed_step(w.pushed_step);
      out->set_seq_contiguous(w.seq.contiguous());
      out->set_joins(w.joins);
      for (uint64_t s : w.seq.DoneAbove()) out->add_seq_done(s);
    }
  }
  // The tables as a checkpoint has them, then what it leaves out of the
  // sparse ones (in the same row order: nothing changes them while
  // apply_mu is held and the caller keeps pushes out), without the job's
  // mutex (table.h's lock order).
  image.set_tables(EncodeCheckpoint(SnapshotJob(job, version)));
  for (SparseTable* t : job.sparse_tables) {
    t->ImageExtras(image.add_sparse_tables());
  }
  return image;
}

absl::Status InstallImage(Job& job, const ShardImage& image) {
  PS_ASSIGN_OR_RETURN(
      CheckpointData data,
      DecodeCheckpoint(image.tables(),
                       absl::StrCat("the image of shard ", job.shard_index,
                                    " of job '", job.id, "'")));
  if (data.shard_index != job.shard_index ||
      data.num_shards != job.num_shards ||
      image.early_applied_size() != static_cast<int>(job.tables.size()) ||
      image.sparse_tables_size() !=
          static_cast<int>(job.sparse_tables.size()) ||
      data.sparse_tables.size() != job.sparse_tables.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the image of shard ", data.shard_index, " of ",
                     data.num_shards, " does not fit shard ", job.shard_index,
                     " of ", job.num_shards, " of job '", job.id, "'"));
  }
  absl::WriterMutexLock al(&job.apply_mu);
  int sparse = 0;
  for (const auto& table : job.tables) {
    if (!IsSparse(job, table.get())) {
      PS_RETURN_IF_ERROR(table->CheckRestore({data}));
      table->Restore({data});
      continue;
    }
    PS_RETURN_IF_ERROR(
        static_cast<SparseTable*>(table.get())
            ->Install(data.sparse_tables[sparse], image.sparse_tables(sparse)));
    ++sparse;
  }
  absl::MutexLock jl(&job.mu);
  job.version = image.version();
  job.membership_epoch = image.membership_epoch();
  job.last_checkpoint_version = image.last_checkpoint_version();
  job.early_step = image.early_step();
  for (size_t t = 0; t < job.tables.size(); ++t) {
    const auto& steps = image.early_applied(static_cast<int>(t)).steps();
    if (steps.size() != static_cast<int>(job.early_applied[t].size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the image of job '", job.id, "' has ", steps.size(),
          " parts of table ", t, ", the job ", job.early_applied[t].size()));
    }
    job.early_applied[t].assign(steps.begin(), steps.end());
  }
  job.completed.clear();
  job.workers.clear();
  for (const ShardImage::Worker& in : image.workers()) {
    WorkerState& w = job.workers[in.id()];
    w.active = in.active();
    w.clock = in.clock();
    w.last_push_ms = in.last_push_ms();
    w.pushed_step = in.pushed_step();
    w.joins = in.joins();
    w.seq = SeqTracker::Of(in.seq_contiguous(),
                           {in.seq_done().begin(), in.seq_done().end()});
  }
  if (job.metrics.version != nullptr) {
    job.metrics.version->Set(static_cast<double>(job.version));
  }
  return absl::OkStatus();
}

}  // namespace ps::server
