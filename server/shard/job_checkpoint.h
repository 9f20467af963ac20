// A job's checkpoints on a shard: snapshots of its tables at one version,
// written to <data_dir>/<job_id>/ (common/wire/checkpoint.h: by tensor range,
// so they restore onto any number of shards), and restores of the newest
// checkpoint every table accepts.
#ifndef PS_SERVER_SHARD_JOB_CHECKPOINT_H_
#define PS_SERVER_SHARD_JOB_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "common/platform/file_system.h"
#include "common/wire/checkpoint.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/job.h"

namespace ps::server {

// The job's state at `version`: every table's Table::Snapshot.
CheckpointData SnapshotJob(Job& job, int64_t version)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.apply_mu);

// Whether a periodic checkpoint of `job` is due at `now`: every_versions
// versions (ASP/SSP; BSP jobs checkpoint at the multiples, aligned_snapshots)
// or every_seconds since the last one, if the version moved.
bool IsCheckpointDue(Job& job, absl::Time now) ABSL_LOCKS_EXCLUDED(job.mu);

// Writes and restores the checkpoints of the jobs of one shard.
// Thread-safe: writers of one job are serialised by its checkpoint_mu, and
// no data-path lock is held during disk I/O.
class JobCheckpoints {
 public:
  // `data_dir` empty: writes are refused (FAILED_PRECONDITION) and nothing
  // is ever restored. Files go through `fs`; `clock` stamps the time of the
  // last checkpoint. Neither is owned.
  JobCheckpoints(std::string data_dir, FileSystem* fs, const Clock* clock)
      : data_dir_(std::move(data_dir)), fs_(fs), clock_(clock) {}

  bool enabled() const { return !data_dir_.empty(); }
  std::string JobDir(absl::string_view job_id) const;
  // Whether the job has a directory of checkpoints here.
  bool HasJobDir(absl::string_view job_id) const;

  // Snapshots the job at its current version and writes it.
  absl::StatusOr<CheckpointResponse> WriteNow(Job& job);

  // Writes `data` (a snapshot of `job`) and records it as the job's last
  // checkpoint. Takes job.checkpoint_mu.
  absl::StatusOr<CheckpointResponse> Write(Job& job,
                                           const CheckpointData& data);

  // Writes the job's aligned_snapshots, oldest first; the first error.
  absl::Status WritePending(Job& job);

  // Loads the newest checkpoint at or below max_version (0: any) that every
  // table of the job accepts (Table::CheckRestore), falling back past the
  // unreadable, foreign and incomplete ones, and sets the job's version to
  // it. False if none was found. Candidates: the complete sets of the
  // job's directory, and this shard's own files (a server with a data
  // directory of its own sees only those).
  absl::StatusOr<bool> Restore(Job& job, int64_t max_version);

 private:
  const std::string data_dir_;
  FileSystem* const fs_;
  const Clock* const clock_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_JOB_CHECKPOINT_H_
