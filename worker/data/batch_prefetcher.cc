#include "worker/data/batch_prefetcher.h"

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/data/sharding.h"

namespace ps::worker {

HostBuffer::HostBuffer(void* data, size_t bytes,
                       std::function<void(void*)> release)
    : data_(data), bytes_(bytes), release_(std::move(release)) {}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      release_(std::move(other.release_)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    release_ = std::move(other.release_);
  }
  return *this;
}

HostBuffer::~HostBuffer() { Reset(); }

void HostBuffer::Reset() {
  if (data_ != nullptr && release_) release_(data_);
  data_ = nullptr;
  bytes_ = 0;
}

HostBuffer HeapHostBuffer(size_t bytes) {
  constexpr std::align_val_t kAlignment{64};
  void* data = ::operator new(bytes, kAlignment);
  return HostBuffer(data, bytes,
                    [](void* p) { ::operator delete(p, kAlignment); });
}

namespace {

// How often a waiting producer re-checks for shutdown even without a signal:
// a safety net, since Shutdown() signals.
constexpr absl::Duration kProducerPoll = absl::Milliseconds(100);

absl::Status ValidateAssignment(const ShardAssignment& assignment) {
  return ShardIndices(0, 0, 0, assignment.shards, assignment.num_shards)
      .status();
}

class BatchPrefetcherImpl : public BatchPrefetcher {
 public:
  BatchPrefetcherImpl(std::shared_ptr<const Dataset> dataset,
                      PrefetcherOptions options)
      : dataset_(std::move(dataset)),
        options_(std::move(options)),
        batch_bytes_(
            static_cast<size_t>(options_.batch_size) *
            (dataset_->example_size() * sizeof(float) + sizeof(int32_t))),
        consumer_epoch_(options_.first_epoch - 1),
        cursor_epoch_(options_.first_epoch),
        cursor_position_(options_.first_batch * options_.batch_size),
        cursor_batch_(options_.first_batch) {
    assignments_[options_.first_epoch] = options_.assignment;
    if (!options_.allocator) {
      options_.allocator = [](size_t bytes) {
        return absl::StatusOr<HostBuffer>(HeapHostBuffer(bytes));
      };
    }
  }

  ~BatchPrefetcherImpl() override { Shutdown(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  absl::StatusOr<Batch> Next(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock l(&mu_);
    while (queue_.empty() && !shutdown_ && status_.ok() && !Exhausted()) {
      if (not_empty_.WaitWithDeadline(&mu_, deadline) &&
          absl::Now() >= deadline) {
        break;
      }
    }
    if (shutdown_) return absl::CancelledError("batch prefetcher shut down");
    if (!queue_.empty()) {
      Batch batch = std::move(queue_.front());
      queue_.pop_front();
      consumer_epoch_ = batch.epoch;
      not_full_.Signal();
      return batch;
    }
    if (!status_.ok()) return status_;
    if (Exhausted()) {
      return absl::OutOfRangeError(absl::StrCat(
          "end of data: epochs ", options_.first_epoch, " to ",
          options_.first_epoch + options_.num_epochs - 1, " delivered"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("no batch ready within ", absl::FormatDuration(timeout)));
  }

  void Recycle(Batch batch) override {
    if (batch.buffer.bytes() < batch_bytes_) return;
    absl::MutexLock l(&mu_);
    if (free_buffers_.size() <
        static_cast<size_t>(options_.prefetch_batches) + 2) {
      free_buffers_.push_back(std::move(batch.buffer));
    }
  }

  absl::Status Reassign(ShardAssignment assignment,
                        int64_t from_epoch) override {
    if (absl::Status valid = ValidateAssignment(assignment); !valid.ok()) {
      return valid;
    }
    // Dropped batches free their buffers after the lock is released: freeing
    // pinned memory can synchronise with the device.
    std::vector<Batch> dropped;
    absl::MutexLock l(&mu_);
    if (!status_.ok()) return status_;
    if (from_epoch <= consumer_epoch_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot reassign data shards from epoch ", from_epoch,
          ": batches of epoch ", consumer_epoch_, " were already consumed"));
    }
    assignments_.erase(assignments_.lower_bound(from_epoch),
                       assignments_.end());
    assignments_[from_epoch] = std::move(assignment);
    // Drop what was prepared under the old assignment, and make the producer
    // discard the batch it may be building now.
    while (!queue_.empty() && queue_.back().epoch >= from_epoch) {
      dropped.push_back(std::move(queue_.back()));
      queue_.pop_back();
    }
    if (cursor_epoch_ >= from_epoch) {
      cursor_epoch_ = from_epoch;
      cursor_position_ = 0;
      cursor_batch_ = 0;
    }
    ++generation_;
    not_full_.Signal();
    return absl::OkStatus();
  }

  void Shutdown() override {
    {
      absl::MutexLock l(&mu_);
      shutdown_ = true;
      not_full_.SignalAll();
      not_empty_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  // What the producer is about to build, read under the lock.
  struct Work {
    int64_t generation;
    int64_t epoch;
    int64_t position;
    int64_t batch_index;
    ShardAssignment assignment;
  };

  // Every batch of the last epoch is queued or delivered (never true with
  // num_epochs = 0). Only a Reassign() can move the cursor back.
  bool Exhausted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.num_epochs > 0 &&
           cursor_epoch_ >= options_.first_epoch + options_.num_epochs;
  }

  // Waits for queue space and an epoch to build; false on shutdown.
  bool WaitForWork(Work* work) {
    absl::MutexLock l(&mu_);
    while (!shutdown_ &&
           (queue_.size() >= static_cast<size_t>(options_.prefetch_batches) ||
            Exhausted())) {
      not_full_.WaitWithTimeout(&mu_, kProducerPoll);
    }
    if (shutdown_) return false;
    work->generation = generation_;
    work->epoch = cursor_epoch_;
    work->position = cursor_position_;
    work->batch_index = cursor_batch_;
    work->assignment =
        std::prev(assignments_.upper_bound(cursor_epoch_))->second;
    return true;
  }

  void Fail(absl::Status status) {
    absl::MutexLock l(&mu_);
    if (status_.ok()) status_ = std::move(status);
    not_empty_.SignalAll();
  }

  // The indices of `work`'s epoch, computed once per (epoch, assignment).
  // Producer thread only.
  absl::StatusOr<const std::vector<int64_t>*> EpochIndices(const Work& work) {
    if (!cached_valid_ || cached_epoch_ != work.epoch ||
        cached_assignment_.shards != work.assignment.shards ||
        cached_assignment_.num_shards != work.assignment.num_shards) {
      absl::StatusOr<std::vector<int64_t>> indices =
          ShardIndices(dataset_->num_examples, work.epoch, options_.seed,
                       work.assignment.shards, work.assignment.num_shards);
      if (!indices.ok()) return indices.status();
      cached_indices_ = *std::move(indices);
      cached_epoch_ = work.epoch;
      cached_assignment_ = work.assignment;
      cached_valid_ = true;
    }
    return &cached_indices_;
  }

  void Run() {
    Work work;
    while (WaitForWork(&work)) {
      absl::StatusOr<const std::vector<int64_t>*> indices = EpochIndices(work);
      if (!indices.ok()) {
        Fail(indices.status());
        return;
      }
      const int64_t total = static_cast<int64_t>((*indices)->size());
      const int64_t remaining = total - work.position;
      const int64_t size = remaining >= options_.batch_size
                               ? options_.batch_size
                           : options_.drop_last ? 0
                                                : remaining;
      if (size == 0) {
        if (work.batch_index == 0) {
          Fail(absl::FailedPreconditionError(absl::StrCat(
              "data shards [", absl::StrJoin(work.assignment.shards, ", "),
              "] of ", work.assignment.num_shards, " hold ", total,
              " examples in epoch ", work.epoch, ", not one full batch of ",
              options_.batch_size)));
          return;
        }
        AdvanceEpoch(work);
        continue;
      }

      absl::StatusOr<Batch> batch = Build(work, **indices, size);
      if (!batch.ok()) {
        Fail(batch.status());
        return;
      }
      Commit(work, *std::move(batch));
    }
  }

  absl::StatusOr<Batch> Build(const Work& work,
                              const std::vector<int64_t>& indices,
                              int64_t size) {
    Batch batch;
    batch.epoch = work.epoch;
    batch.index = work.batch_index;
    batch.size = static_cast<int>(size);
    batch.example_size = dataset_->example_size();
    const int64_t next = work.position + size;
    const int64_t left = static_cast<int64_t>(indices.size()) - next;
    batch.last_in_epoch =
        left == 0 || (options_.drop_last && left < options_.batch_size);
    batch.example_ids.assign(indices.begin() + work.position,
                             indices.begin() + next);
    {
      absl::MutexLock l(&mu_);
      if (!free_buffers_.empty()) {
        batch.buffer = std::move(free_buffers_.back());
        free_buffers_.pop_back();
      }
    }
    if (batch.buffer.data() == nullptr) {
      // Always a full batch's worth, so that every buffer can be reused.
      absl::StatusOr<HostBuffer> buffer = options_.allocator(batch_bytes_);
      if (!buffer.ok()) return buffer.status();
      if (buffer->bytes() < batch_bytes_ || buffer->data() == nullptr) {
        return absl::InternalError(
            absl::StrCat("host allocator returned ", buffer->bytes(),
                         " bytes, asked for ", batch_bytes_));
      }
      batch.buffer = *std::move(buffer);
    }
    float* images = static_cast<float*>(batch.buffer.data());
    const size_t row_bytes = batch.example_size * sizeof(float);
    int32_t* labels =
        reinterpret_cast<int32_t*>(images + size * batch.example_size);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t id = batch.example_ids[i];
      std::memcpy(images + i * batch.example_size,
                  dataset_->images.data() + id * batch.example_size, row_bytes);
      labels[i] = dataset_->labels[id];
    }
    return batch;
  }

  void Commit(const Work& work, Batch batch) {
    absl::MutexLock l(&mu_);
    // A Reassign() since WaitForWork() may have made this batch stale.
    if (generation_ != work.generation || shutdown_) return;
    cursor_position_ = work.position + batch.size;
    cursor_batch_ = work.batch_index + 1;
    if (batch.last_in_epoch) {
      ++cursor_epoch_;
      cursor_position_ = 0;
      cursor_batch_ = 0;
    }
    queue_.push_back(std::move(batch));
    not_empty_.Signal();
  }

  void AdvanceEpoch(const Work& work) {
    absl::MutexLock l(&mu_);
    if (generation_ != work.generation) return;
    ++cursor_epoch_;
    cursor_position_ = 0;
    cursor_batch_ = 0;
    not_empty_.Signal();  // the consumer may be waiting for Exhausted()
  }

  const std::shared_ptr<const Dataset> dataset_;
  PrefetcherOptions options_;  // allocator filled in; then read-only
  const size_t batch_bytes_;

  absl::Mutex mu_;
  absl::CondVar not_empty_;  // a batch was queued, or the producer stopped
  absl::CondVar not_full_;   // space in the queue, or shutdown
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<HostBuffer> free_buffers_ ABSL_GUARDED_BY(mu_);
  // The assignment in force from each key epoch until the next key.
  std::map<int64_t, ShardAssignment> assignments_ ABSL_GUARDED_BY(mu_);
  int64_t consumer_epoch_ ABSL_GUARDED_BY(mu_);  // of the last batch handed out
  // The next batch to build; advanced only when a batch is committed.
  int64_t cursor_epoch_ ABSL_GUARDED_BY(mu_);
  int64_t cursor_position_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cursor_batch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Reassign()
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the producer's final error

  // Producer thread only.
  bool cached_valid_ = false;
  int64_t cached_epoch_ = 0;
  ShardAssignment cached_assignment_;
  std::vector<int64_t> cached_indices_;

  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchPrefetcher>> BatchPrefetcher::Create(
    std::shared_ptr<const Dataset> dataset, PrefetcherOptions options) {
  if (dataset == nullptr || dataset->num_examples < 1) {
    return absl::InvalidArgumentError(
        "batch prefetcher needs a non-empty dataset");
  }
  if (dataset->images.size() != static_cast<size_t>(dataset->num_examples *
                                                    dataset->example_size()) ||
      dataset->labels.size() != static_cast<size_t>(dataset->num_examples)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent dataset: ", dataset->num_examples, " examples of ",
        dataset->example_size(), " pixels but ", dataset->images.size(),
        " pixels and ", dataset->labels.size(), " labels"));
  }
  if (options.batch_size < 1 || options.prefetch_batches < 1 ||
      options.first_epoch < 0 || options.num_epochs < 0 ||
      options.first_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad prefetcher options: batch_size ", options.batch_size,
                     ", prefetch_batches ", options.prefetch_batches,
                     ", first_epoch ", options.first_epoch, ", first_batch ",
                     options.first_batch, ", num_epochs ", options.num_epochs));
  }
  if (absl::Status valid = ValidateAssignment(options.assignment);
      !valid.ok()) {
    return valid;
  }
  auto prefetcher = std::make_unique<BatchPrefetcherImpl>(std::move(dataset),
                                                          std::move(options));
  prefetcher->Start();
  return prefetcher;
}

}  // namespace ps::worker
