#include "worker/loop/batches_ahead.h"

#include <utility>

#include "common/platform/status.h"

namespace ps::worker {

BatchesAhead::BatchesAhead(data::ShardBatches* batches, LivePlan* plan)
    : batches_(batches), plan_(plan), reader_([this] { ReaderLoop(); }) {}

BatchesAhead::~BatchesAhead() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  reader_.join();
}

void BatchesAhead::ReaderLoop() {
  for (;;) {
    Entry* e = nullptr;
    PlannedBatch at;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BatchesAhead* b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return b->stop_ || !b->queue_.empty();
          },
          this));
      if (stop_) return;
      e = queue_.front();
      queue_.pop_front();
      at = e->at;
    }
    absl::StatusOr<data::Batch> batch =
        batches_->BatchAt(at.data_shard, at.epoch, at.index);
    const int64_t bad = batches_->bad_lines();
    const std::vector<std::string>& samples = batches_->bad_line_samples();
    absl::MutexLock lock(&mu_);
    e->batch = std::move(batch);
    e->read = true;
    bad_lines_ = bad;
    if (samples.size() != samples_.size()) samples_ = samples;
  }
}

BatchesAhead::Entry* BatchesAhead::Find(int64_t step, const PlannedBatch& at) {
  for (Entry& e : entries_) {
    if (e.step == step && e.at.data_shard == at.data_shard &&
        e.at.epoch == at.epoch && e.at.index == at.index) {
      return &e;
    }
  }
  entries_.push_back({.step = step, .at = at});
  queue_.push_back(&entries_.back());
  return &entries_.back();
}

absl::StatusOr<const data::Batch*> BatchesAhead::Get(int64_t step) {
  PS_ASSIGN_OR_RETURN(const PlannedBatch at, plan_->BatchAt(step));
  absl::MutexLock lock(&mu_);
  Entry* e = Find(step, at);
  mu_.Await(absl::Condition(&e->read));
  if (!e->batch.ok()) return Annotate(e->batch.status(), "training data");
  return &*e->batch;
}

void BatchesAhead::ReadAhead(int64_t step) {
  absl::StatusOr<PlannedBatch> at = plan_->BatchAt(step);
  if (!at.ok()) return;
  absl::MutexLock lock(&mu_);
  Find(step, *at);
}

void BatchesAhead::DropBefore(int64_t step) {
  absl::MutexLock lock(&mu_);
  // An entry still being read stays until a later call.
  entries_.remove_if(
      [step](const Entry& e) { return e.read && e.step < step; });
}

int64_t BatchesAhead::bad_lines() {
  absl::MutexLock lock(&mu_);
  return bad_lines_;
}

std::vector<std::string> BatchesAhead::bad_line_samples() {
  absl::MutexLock lock(&mu_);
  return samples_;
}

}  // namespace ps::worker
