// The coordinator's durable writes, batched: changes to jobs are made in
// memory under the job table's lock, and what must reach the job store (a
// record to replace, events and metric points to append) is collected here
// and written after the lock is released, so that no lock is held across
// disk I/O.
#ifndef PS_SERVER_COORDINATOR_WRITE_BATCH_H_
#define PS_SERVER_COORDINATOR_WRITE_BATCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_store.h"

namespace ps::coordinator {

// Not thread-safe: one batch belongs to one call (filled under the lock,
// flushed after it).
class WriteBatch {
 public:
  // The record as it is now, with the sequence number that orders it
  // against racing writes of the same job (JobStore::PutRecord).
  void PutRecord(const JobRecord& record, int64_t seq);
  void AppendEvent(const std::string& job_id, JobEvent event);
  void AppendPoints(const std::string& job_id,
                    absl::Span<const MetricPoint> points);

  bool empty() const { return records_.empty() && appends_.empty(); }

  // Writes the records in the order they were put, then each job's appends
  // (in job id order), and empties the batch. Every write is tried; the
  // first failure is logged and returned as INTERNAL ("job store: ...").
  absl::Status Flush(JobStore* store);

 private:
  std::vector<std::pair<JobRecord, int64_t>> records_;
  std::map<std::string,
           std::pair<std::vector<JobEvent>, std::vector<MetricPoint>>>
      appends_;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_WRITE_BATCH_H_
