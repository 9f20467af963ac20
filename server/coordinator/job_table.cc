#include "server/coordinator/job_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::coordinator {

absl::StatusOr<Job*> JobTable::Find(absl::string_view job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  }
  return it->second.get();
}

Job& JobTable::Insert(std::unique_ptr<Job> job) {
  Job& j = *job;
  jobs_[j.record.job_id()] = std::move(job);
  return j;
}

std::string JobTable::NewJobId() {
  return absl::StrCat("job-", next_job_number_++);
}

void JobTable::NoteJobId(absl::string_view job_id) {
  int64_t n = 0;
  if (absl::StartsWith(job_id, "job-") &&
      absl::SimpleAtoi(job_id.substr(4), &n)) {
    next_job_number_ = std::max(next_job_number_, n + 1);
  }
}

int64_t JobTable::NextOrder() { return next_order_++; }

void JobTable::Touch(Job& job) {
  ++job.change;
  changed_.SignalAll();
}

void JobTable::AddEvent(Job& job, absl::string_view kind,
                        absl::string_view message, int64_t member_id,
                        WriteBatch* writes) {
  JobEvent e;
  e.set_time_ms(clock_->NowMs());
  e.set_kind(std::string(kind));
  e.set_message(std::string(message));
  e.set_member_id(member_id);
  job.events.push_back(e);
  job.record.set_num_events(static_cast<int64_t>(job.events.size()));
  writes->AppendEvent(job.record.job_id(), std::move(e));
  Touch(job);
}

void JobTable::SaveRecord(Job& job, WriteBatch* writes) {
  // Active member ids in rank order.
  std::map<int, int64_t> by_rank;
  for (const WorkerSlot& s : job.record.slots()) {
    if (s.active()) by_rank[s.rank()] = s.member_id();
  }
  job.record.clear_workers();
  for (const auto& [rank, id] : by_rank) job.record.add_workers(id);
  writes->PutRecord(job.record, ++job.record_seq);
  Touch(job);
}

void JobTable::SetState(Job& job, JobState state, absl::string_view reason,
                        WriteBatch* writes) {
  const int64_t now = clock_->NowMs();
  job.record.set_state(state);
  job.record.set_reason(std::string(reason));
  if (state == RUNNING) job.record.set_start_time_ms(now);
  if (IsTerminal(state)) job.record.set_end_time_ms(now);
  AddEvent(job, "state", absl::StrCat(JobState_Name(state), ": ", reason), 0,
           writes);
  SaveRecord(job, writes);
}

absl::StatusOr<JobRecord> JobTable::WaitForChange(absl::string_view job_id,
                                                  int64_t* seen,
                                                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock l(&mu_);
  while (true) {
    if (shutdown_) {
      return absl::UnavailableError("the coordinator is shutting down");
    }
    PS_ASSIGN_OR_RETURN(Job * job, Find(job_id));
    if (job->change != *seen) {
      *seen = job->change;
      return Snapshot(*job);
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      if (shutdown_) continue;
      PS_ASSIGN_OR_RETURN(job, Find(job_id));
      *seen = job->change;
      return Snapshot(*job);
    }
  }
}

void JobTable::Shutdown() {
  absl::MutexLock l(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

}  // namespace ps::coordinator
