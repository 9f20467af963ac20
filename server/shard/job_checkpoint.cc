#include "server/shard/job_checkpoint.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/status.h"
#include "server/shard/shard_log.h"

namespace ps::server {

CheckpointData SnapshotJob(Job& job, int64_t version) {
  CheckpointData data;
  data.job_id = job.id;
  data.spec = job.spec;
  data.shard_index = job.shard_index;
  data.num_shards = job.num_shards;
  data.version = version;
  for (const auto& table : job.tables) table->Snapshot(version, &data);
  return data;
}

bool IsCheckpointDue(Job& job, absl::Time now) {
  const CheckpointSpec& c = job.spec.checkpoint();
  absl::MutexLock jl(&job.mu);
  const bool by_version =
      c.every_versions() > 0 && job.model() != ConsistencySpec::BSP &&
      job.version - job.last_checkpoint_version >= c.every_versions();
  const bool by_time =
      c.every_seconds() > 0 && job.version != job.last_checkpoint_version &&
      now - job.last_checkpoint_time >= absl::Seconds(c.every_seconds());
  return by_version || by_time;
}

std::string JobCheckpoints::JobDir(absl::string_view job_id) const {
  return absl::StrCat(data_dir_, "/", job_id);
}

bool JobCheckpoints::HasJobDir(absl::string_view job_id) const {
  return fs_->IsDirectory(JobDir(job_id));
}

absl::StatusOr<CheckpointResponse> JobCheckpoints::WriteNow(Job& job) {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        "checkpoints need a data directory (--data_dir)");
  }
  CheckpointData data;
  {
    absl::WriterMutexLock al(&job.apply_mu);
    int64_t version;
    {
      absl::MutexLock jl(&job.mu);
      version = job.version;
    }
    data = SnapshotJob(job, version);
  }
  return Write(job, data);
}

absl::StatusOr<CheckpointResponse> JobCheckpoints::Write(
    Job& job, const CheckpointData& data) {
  absl::MutexLock ckl(&job.checkpoint_mu);
  // Disk I/O with no data-path lock held.
  PS_ASSIGN_OR_RETURN(
      std::string path,
      WriteCheckpoint(fs_, JobDir(job.id), data, job.spec.checkpoint().keep()));
  {
    absl::MutexLock jl(&job.mu);
    job.last_checkpoint_version =
        std::max(job.last_checkpoint_version, data.version);
    job.last_checkpoint_time = clock_->Now();
  }
  CheckpointResponse response;
  response.set_path(path);
  response.set_version(data.version);
  return response;
}

absl::Status JobCheckpoints::WritePending(Job& job) {
  if (!enabled()) return absl::OkStatus();
  for (;;) {
    std::shared_ptr<CheckpointData> data;
    {
      absl::MutexLock sl(&job.snapshot_mu);
      if (job.aligned_snapshots.empty()) return absl::OkStatus();
      data = std::move(job.aligned_snapshots.front());
      job.aligned_snapshots.pop_front();
    }
    PS_RETURN_IF_ERROR(Write(job, *data).status());
  }
}

namespace {

// The candidates for a restore, newest first.
std::vector<CheckpointSet> RestoreCandidates(FileSystem* fs,
                                             const std::string& dir,
                                             const Job& job) {
  std::vector<CheckpointSet> sets = ListCheckpointSets(fs, dir);
  // With a data directory per server, only this shard's own files are here:
  // in the same layout they cover its chunks on their own.
  for (const CheckpointSet& own :
       ListOwnCheckpoints(fs, dir, job.num_shards, job.shard_index)) {
    bool known = false;
    for (const CheckpointSet& set : sets) {
      known |= set.version == own.version && !set.mixed;
    }
    if (!known) sets.push_back(own);
  }
  std::stable_sort(sets.begin(), sets.end(),
                   [](const CheckpointSet& a, const CheckpointSet& b) {
                     return a.version > b.version;
                   });
  return sets;
}

// The files of `set`, if all read and every table of the job accepts them.
absl::StatusOr<std::vector<CheckpointData>> ReadAcceptedSet(
    FileSystem* fs, const Job& job, const CheckpointSet& set) {
  std::vector<CheckpointData> files;
  for (const std::string& path : set.paths) {
    PS_ASSIGN_OR_RETURN(CheckpointData d, ReadCheckpoint(fs, path));
    files.push_back(std::move(d));
  }
  for (const auto& table : job.tables) {
    PS_RETURN_IF_ERROR(table->CheckRestore(files));
  }
  return files;
}

}  // namespace

absl::StatusOr<bool> JobCheckpoints::Restore(Job& job, int64_t max_version) {
  if (!enabled()) return false;
  for (const CheckpointSet& set : RestoreCandidates(fs_, JobDir(job.id), job)) {
    if (max_version > 0 && set.version > max_version) continue;
    absl::StatusOr<std::vector<CheckpointData>> files =
        ReadAcceptedSet(fs_, job, set);
    if (!files.ok()) {
      ShardLog(absl::StrCat("job ", job.id, ": refusing checkpoint version ",
                            set.version, ": ", files.status().message(),
                            "; falling back to the previous one"));
      continue;
    }
    {
      absl::WriterMutexLock al(&job.apply_mu);
      for (const auto& table : job.tables) table->Restore(*files);
    }
    absl::MutexLock jl(&job.mu);
    job.version = set.version;
    ShardLog(
        absl::StrCat("job ", job.id, ": restored checkpoint version ",
                     set.version, " written by ",
                     set.paths.size() == 1 && set.num_shards > 1
                         ? absl::StrCat("this shard (of ", set.num_shards, ")")
                         : absl::StrCat(set.num_shards, " shard(s)"),
                     set.mixed ? " (shards at different versions)" : ""));
    return true;
  }
  return false;
}

}  // namespace ps::server
