// Prepares the next training batches on a background thread while the step
// runs: per epoch it computes this worker's shuffled example indices
// (sharding.h), gathers each batch's images and labels into one contiguous
// host buffer, and keeps up to `prefetch_batches` of them in a bounded queue.
#ifndef PS_WORKER_DATA_BATCH_PREFETCHER_H_
#define PS_WORKER_DATA_BATCH_PREFETCHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/data/dataset.h"

namespace ps::worker {

// Host memory holding one batch. Move-only; hands its bytes back through
// `release` when destroyed.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(void* data, size_t bytes, std::function<void(void*)> release);
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Reset();

  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::function<void(void*)> release_;
};

// Allocates host memory for batch buffers; must return memory aligned to at
// least 16 bytes. Called on the prefetch thread, about prefetch_batches + 2
// times in all, since buffers passed to Recycle() are reused. The default
// (HeapHostBuffer) is 64-byte aligned heap memory; the CUDA worker passes
// one that returns pinned memory (cudaHostAlloc / cudaFreeHost) so that its
// host-to-device copies can be asynchronous.
using HostAllocator = std::function<absl::StatusOr<HostBuffer>(size_t bytes)>;
HostBuffer HeapHostBuffer(size_t bytes);

// One batch: `size` examples, images then labels in a single buffer so that
// one copy moves both to the device.
struct Batch {
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch, from 0
  int size = 0;       // examples; below batch_size only for a kept last batch
  int64_t example_size = 0;          // floats per image (rows * cols)
  bool last_in_epoch = false;        // the epoch's final batch for this worker
  std::vector<int64_t> example_ids;  // dataset rows, in batch order
  HostBuffer buffer;

  // [size, example_size], row-major.
  absl::Span<const float> images() const {
    return {static_cast<const float*>(buffer.data()),
            static_cast<size_t>(size * example_size)};
  }
  // [size], each in [0, num_classes).
  absl::Span<const int32_t> labels() const {
    return {reinterpret_cast<const int32_t*>(images().data() + images().size()),
            static_cast<size_t>(size)};
  }
};

// The data shards a worker owns (usually {rank}; after an eviction a
// survivor also owns the evicted worker's) out of `num_shards`.
struct ShardAssignment {
  std::vector<int> shards = {0};
  int num_shards = 1;
};

struct PrefetcherOptions {
  int batch_size = 128;
  int prefetch_batches = 4;  // the queue's bound
  // The epoch's last batch, smaller than batch_size, is dropped (training)
  // or kept (evaluation, or to see every example).
  bool drop_last = true;
  uint64_t seed = 0;  // the job's shuffle seed: the same on every worker
  ShardAssignment assignment;
  int64_t first_epoch = 0;  // a rejoining worker starts mid-job
  // Batches of first_epoch to skip: a worker restarting at a step in the
  // middle of an epoch continues with the batch that step had.
  int64_t first_batch = 0;
  int64_t num_epochs = 0;   // 0: unbounded
  HostAllocator allocator;  // empty: HeapHostBuffer
};

// Owns its prefetch thread; the thread stops and is joined by Shutdown() or
// the destructor, even while a batch is half built. Thread-safe: Next() and
// Recycle() are meant for the training thread, Reassign() for the thread
// that talks to the coordinator, all may run concurrently. Batches are
// delivered in order: epoch by epoch, each epoch in the order of
// ShardIndices(dataset size, epoch, seed, shards, num_shards).
class BatchPrefetcher {
 public:
  // INVALID_ARGUMENT for a null, empty or inconsistent dataset, batch_size or
  // prefetch_batches < 1, first_epoch or num_epochs < 0, or an invalid
  // assignment (see ShardIndices).
  static absl::StatusOr<std::unique_ptr<BatchPrefetcher>> Create(
      std::shared_ptr<const Dataset> dataset, PrefetcherOptions options);

  virtual ~BatchPrefetcher() = default;

  // The next batch, waiting at most `timeout` for it. Errors:
  //   DEADLINE_EXCEEDED    none was ready in time (try again);
  //   OUT_OF_RANGE         all num_epochs were delivered;
  //   CANCELLED            after Shutdown();
  //   FAILED_PRECONDITION  an epoch would have no batch at all (the shards
  //                        hold no example, or fewer than batch_size with
  //                        drop_last set);
  //   others               from the allocator.
  // All but DEADLINE_EXCEEDED are final: every later call returns the same.
  virtual absl::StatusOr<Batch> Next(absl::Duration timeout) = 0;

  // Gives a consumed batch's buffer back for reuse (optional: a batch that
  // is simply destroyed frees its buffer).
  virtual void Recycle(Batch batch) = 0;

  // Trains on `assignment` from `from_epoch` on. Batches already prefetched
  // for those epochs are dropped and rebuilt. FAILED_PRECONDITION if
  // Next() has already returned a batch of epoch `from_epoch` or later;
  // INVALID_ARGUMENT for an invalid assignment; the final error if the
  // prefetcher has stopped.
  virtual absl::Status Reassign(ShardAssignment assignment,
                                int64_t from_epoch) = 0;

  // Stops the prefetch thread and waits for it; idempotent. Waiting Next()
  // calls return CANCELLED at once; the thread itself stops after the batch
  // it is building, so this waits for an allocator call in progress.
  virtual void Shutdown() = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_DATA_BATCH_PREFETCHER_H_
