#include "server/coordinator/write_batch.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace ps::coordinator {

void WriteBatch::PutRecord(const JobRecord& record, int64_t seq) {
  records_.emplace_back(record, seq);
}

void WriteBatch::AppendEvent(const std::string& job_id, JobEvent event) {
  appends_[job_id].first.push_back(std::move(event));
}

void WriteBatch::AppendPoints(const std::string& job_id,
                              absl::Span<const MetricPoint> points) {
  std::vector<MetricPoint>& out = appends_[job_id].second;
  out.insert(out.end(), points.begin(), points.end());
}

absl::Status WriteBatch::Flush(JobStore* store) {
  absl::Status result;
  for (const auto& [record, seq] : records_) {
    absl::Status s = store->PutRecord(record, seq);
    if (!s.ok() && result.ok()) result = s;
  }
  for (const auto& [job_id, ep] : appends_) {
    absl::Status s = store->Append(job_id, ep.first, ep.second);
    if (!s.ok() && result.ok()) result = s;
  }
  records_.clear();
  appends_.clear();
  if (!result.ok()) {
    std::fprintf(stderr, "coordinator: job store write failed: %s\n",
                 std::string(result.message()).c_str());
    return absl::InternalError(absl::StrCat("job store: ", result.message()));
  }
  return result;
}

}  // namespace ps::coordinator
