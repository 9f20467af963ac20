// A worker's training batches by step, read ahead on a thread of their own:
// the batch of step s is the one the data plan names for s (plan_batches.h),
// read through data::ShardBatches. The loop asks for a step's batch and
// those ahead of it (a step's end asks for their rows), and has the next
// one read while the step computes, as a prefetcher would. A batch whose
// address the plan has changed since it was read is read again.
#ifndef PS_WORKER_LOOP_BATCHES_AHEAD_H_
#define PS_WORKER_LOOP_BATCHES_AHEAD_H_

#include <cstdint>
#include <list>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/data/batch.h"
#include "worker/data/shard_batches.h"
#include "worker/loop/plan_batches.h"

namespace ps::worker {

// `batches` and `plan` are not owned and must outlive it; only its reader
// thread reads `batches`. The plan is read on the caller's thread. Methods
// are for one caller thread (the training loop's).
class BatchesAhead {
 public:
  BatchesAhead(data::ShardBatches* batches, LivePlan* plan);
  ~BatchesAhead();  // waits for the read on its way
  BatchesAhead(const BatchesAhead&) = delete;
  BatchesAhead& operator=(const BatchesAhead&) = delete;

  // The batch of `step`, read ahead or now; valid until DropBefore passes
  // `step`. The plan's errors; the readers', annotated "training data".
  absl::StatusOr<const data::Batch*> Get(int64_t step);
  // Starts reading the batch of `step` unless it is read or on its way (a
  // step outside the plan is not read).
  void ReadAhead(int64_t step);
  // Forgets the batches of steps before `step`.
  void DropBefore(int64_t step);

  // ShardBatches::bad_lines and bad_line_samples as of the last read.
  int64_t bad_lines();
  std::vector<std::string> bad_line_samples();

 private:
  struct Entry {
    int64_t step = 0;
    PlannedBatch at;
    bool read = false;  // `batch` holds the result
    absl::StatusOr<data::Batch> batch = data::Batch();
  };
  // The entry of `step` at `at`, queued for reading if new.
  Entry* Find(int64_t step, const PlannedBatch& at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaderLoop();

  data::ShardBatches* const batches_;  // only the reader thread's
  LivePlan* const plan_;
  absl::Mutex mu_;
  int64_t bad_lines_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> samples_ ABSL_GUARDED_BY(mu_);
  // A list: pointers to entries outlive insertions and other removals.
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Entry*> queue_ ABSL_GUARDED_BY(mu_);  // to read, in order
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_BATCHES_AHEAD_H_
