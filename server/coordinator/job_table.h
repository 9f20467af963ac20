// The coordinator's jobs in memory and the one lock that guards them. The
// units that act on jobs (scheduler, metric intake, liveness, straggler
// policy, reconciler) take the lock through mu(), change a job through the
// helpers below (which stamp events, queue durable writes in a WriteBatch
// and wake WaitForChange), and flush the batch after releasing the lock: no
// lock is held across shard RPCs or disk writes.
#ifndef PS_SERVER_COORDINATOR_JOB_TABLE_H_
#define PS_SERVER_COORDINATOR_JOB_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/platform/clock.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

// Thread-safe. Does not own the clock (it must outlive the table). Jobs are
// never removed.
class JobTable {
 public:
  using Map = std::map<std::string, std::unique_ptr<Job>, std::less<>>;

  explicit JobTable(const Clock* clock) : clock_(clock) {}

  absl::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  const Clock& clock() const { return *clock_; }

  // Every job by id (ids sort as strings: "job-10" < "job-2"; Job::order
  // is the submission order).
  Map& jobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_; }
  // NOT_FOUND "no job '<id>'".
  absl::StatusOr<Job*> Find(absl::string_view job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the job under record.job_id (replacing none) and returns it.
  Job& Insert(std::unique_ptr<Job> job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A fresh id "job-<n>", never one handed out or loaded before.
  std::string NewJobId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps NewJobId from handing out a loaded job's id again.
  void NoteJobId(absl::string_view job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next submission order.
  int64_t NextOrder() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A visible change: bumps job.change and wakes WaitForChange.
  void Touch(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends an event stamped now, to the job and to `writes`.
  void AddEvent(Job& job, absl::string_view kind, absl::string_view message,
                int64_t member_id, WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recomputes record.workers (active members in rank order) and queues the
  // record with the job's next sequence number.
  void SaveRecord(Job& job, WriteBatch* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets state and reason (start time on RUNNING, end time on a terminal
  // state), adds a "state" event, saves the record.
  void SetState(Job& job, JobState state, absl::string_view reason,
                WriteBatch* writes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Waits until the job changed since `*seen` (0 at first: returns at once)
  // or the timeout passes; returns the snapshot and updates `*seen`.
  // NOT_FOUND for an unknown job; UNAVAILABLE once Shutdown() was called.
  absl::StatusOr<JobRecord> WaitForChange(absl::string_view job_id,
                                          int64_t* seen, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every WaitForChange (they and later ones return UNAVAILABLE).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Clock* const clock_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  Map jobs_ ABSL_GUARDED_BY(mu_);
  int64_t next_job_number_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_JOB_TABLE_H_
