// The coordinator's durable memory: every job's record, events and metric
// points on disk, so a restart loses nothing that was acknowledged.
//
// Layout under the data directory:
//   jobs/<job_id>/record.pb   the JobRecord, replaced atomically (write a
//                             temporary file, fsync, rename, fsync the dir)
//   jobs/<job_id>/log         append-only events and metric points, each a
//                             framed record [type u8][length u32][crc32 u32]
//                             [payload], fsync'ed before Append returns
//   next_member_id            one past the largest member id handed out
// A torn or corrupt tail of a log (a crash mid-append) is cut off on load:
// everything before it is kept, and later appends continue after it. An
// append that fails is cut off at once (or before the next append), so no
// acknowledged record ever follows a torn one. All I/O goes through a
// FileSystem (common/platform/file_system.h).
#ifndef PS_SERVER_COORDINATOR_JOB_STORE_H_
#define PS_SERVER_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/platform/file_system.h"
#include "proto/coordinator_service.pb.h"

namespace ps::coordinator {

// One job as found on disk.
struct StoredJob {
  JobRecord record;
  std::vector<JobEvent> events;
  std::vector<MetricPoint> points;
  // Bytes of a torn or corrupt log tail that were cut off (0 normally).
  int64_t dropped_tail_bytes = 0;
};

struct JobStoreOptions {
  // Not owned; null: FileSystem::Posix().
  FileSystem* file_system = nullptr;
};

// Thread-safe; writes to one job are serialised (an I/O lock of its own, so
// callers never hold theirs across disk I/O). Errors are INTERNAL or
// PERMISSION_DENIED naming the path and the system error. A write that
// returns an error is not acknowledged, and a later load never sees part of
// it: a record is the old one or the new one, a failed append is not there.
class JobStore {
 public:
  // Opens (creating if needed) the store in `dir`.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(
      const std::string& dir, const JobStoreOptions& options = {});

  virtual ~JobStore() = default;

  // Durably replaces the job's record. `seq` orders writes that race: a
  // record older than (<) one already written for the job is skipped.
  virtual absl::Status PutRecord(const JobRecord& record, int64_t seq) = 0;

  // Durably appends events and points to the job's log. The record must have
  // been put first (FAILED_PRECONDITION otherwise).
  virtual absl::Status Append(absl::string_view job_id,
                              absl::Span<const JobEvent> events,
                              absl::Span<const MetricPoint> points) = 0;

  // Every job on disk, in job id order. A job directory without a readable
  // record is skipped (it was never acknowledged).
  virtual absl::StatusOr<std::vector<StoredJob>> LoadAll() = 0;

  virtual absl::Status PutNextMemberId(int64_t next_id) = 0;
  // 1 when never written.
  virtual absl::StatusOr<int64_t> GetNextMemberId() = 0;

  virtual const std::string& dir() const = 0;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_JOB_STORE_H_
