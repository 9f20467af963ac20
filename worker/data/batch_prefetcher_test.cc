#include "worker/data/batch_prefetcher.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/dataset.h"
#include "worker/data/sharding.h"

namespace ps::worker {
namespace {

// Generous: only reached if the prefetcher is broken.
constexpr absl::Duration kWait = absl::Seconds(30);

// Example i has pixels i * 100 + j (exact in float) and label i % 10.
std::shared_ptr<const Dataset> Synthetic(int64_t n, int rows = 2,
                                         int cols = 3) {
  auto d = std::make_shared<Dataset>();
  d->num_examples = n;
  d->rows = rows;
  d->cols = cols;
  d->num_classes = 10;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < rows * cols; ++j) d->images.push_back(i * 100 + j);
    d->labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

// The batch holds exactly the examples its ids name.
void ExpectContents(const Dataset& d, const Batch& batch) {
  ASSERT_EQ(batch.example_ids.size(), static_cast<size_t>(batch.size));
  ASSERT_EQ(batch.images().size(), batch.size * d.example_size());
  ASSERT_EQ(batch.labels().size(), static_cast<size_t>(batch.size));
  for (int b = 0; b < batch.size; ++b) {
    const int64_t id = batch.example_ids[b];
    EXPECT_EQ(batch.labels()[b], d.labels[id]);
    for (int64_t j = 0; j < d.example_size(); ++j) {
      ASSERT_EQ(batch.images()[b * d.example_size() + j], id * 100 + j);
    }
  }
}

// Every batch until OUT_OF_RANGE.
std::vector<Batch> Drain(BatchPrefetcher& prefetcher) {
  std::vector<Batch> batches;
  while (true) {
    absl::StatusOr<Batch> batch = prefetcher.Next(kWait);
    if (!batch.ok()) {
      EXPECT_EQ(batch.status().code(), absl::StatusCode::kOutOfRange)
          << batch.status();
      return batches;
    }
    batches.push_back(*std::move(batch));
  }
}

// The examples epoch `epoch` should deliver, in order.
std::vector<int64_t> Expected(int64_t n, int64_t epoch, uint64_t seed,
                              const ShardAssignment& a, int batch_size,
                              bool drop_last) {
  std::vector<int64_t> ids =
      *ShardIndices(n, epoch, seed, a.shards, a.num_shards);
  if (drop_last) ids.resize(ids.size() / batch_size * batch_size);
  return ids;
}

TEST(BatchPrefetcher, DeliversEachShardExampleOncePerEpochInShuffleOrder) {
  struct Case {
    std::string name;
    int64_t num_examples;
    int batch_size;
    ShardAssignment assignment;
    bool drop_last;
    int prefetch_batches;
  };
  const std::vector<Case> cases = {
      {"whole_dataset_exact", 64, 8, {{0}, 1}, true, 4},
      {"drop_partial", 100, 16, {{0}, 1}, true, 2},
      {"keep_partial", 100, 16, {{0}, 1}, false, 3},
      {"one_of_three", 1000, 32, {{1}, 3}, true, 4},
      {"two_of_three", 1000, 32, {{2, 0}, 3}, false, 1},
      {"batch_of_one", 7, 1, {{0}, 1}, true, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::shared_ptr<const Dataset> dataset = Synthetic(c.num_examples);
    PrefetcherOptions options;
    options.batch_size = c.batch_size;
    options.prefetch_batches = c.prefetch_batches;
    options.drop_last = c.drop_last;
    options.seed = 1234;
    options.assignment = c.assignment;
    options.first_epoch = 2;
    options.num_epochs = 3;
    absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
        BatchPrefetcher::Create(dataset, options);
    ASSERT_TRUE(prefetcher.ok()) << prefetcher.status();
    const std::vector<Batch> batches = Drain(**prefetcher);

    size_t next = 0;
    for (int64_t epoch = 2; epoch < 5; ++epoch) {
      const std::vector<int64_t> expected = Expected(
          c.num_examples, epoch, 1234, c.assignment, c.batch_size, c.drop_last);
      std::vector<int64_t> got;
      for (int64_t index = 0; got.size() < expected.size(); ++index) {
        ASSERT_LT(next, batches.size());
        const Batch& batch = batches[next++];
        EXPECT_EQ(batch.epoch, epoch);
        EXPECT_EQ(batch.index, index);
        EXPECT_LE(batch.size, c.batch_size);
        if (c.drop_last) {
          EXPECT_EQ(batch.size, c.batch_size);
        }
        ExpectContents(*dataset, batch);
        got.insert(got.end(), batch.example_ids.begin(),
                   batch.example_ids.end());
        EXPECT_EQ(batch.last_in_epoch, got.size() == expected.size());
      }
      EXPECT_EQ(got, expected) << "epoch " << epoch;
    }
    EXPECT_EQ(next, batches.size());
    // Finished is final.
    EXPECT_EQ((*prefetcher)->Next(absl::ZeroDuration()).status().code(),
              absl::StatusCode::kOutOfRange);
  }
}

// A worker restarting mid-epoch (a rollback to step S) continues with the
// batch step S had: first_batch batches of first_epoch are skipped.
TEST(BatchPrefetcher, StartsAtABatchInTheMiddleOfAnEpoch) {
  std::shared_ptr<const Dataset> dataset = Synthetic(1000);
  PrefetcherOptions options;
  options.batch_size = 64;
  options.seed = 99;
  options.assignment = ShardAssignment{{1}, 3};
  options.first_epoch = 1;
  options.first_batch = 2;
  options.num_epochs = 2;
  auto prefetcher = BatchPrefetcher::Create(dataset, options);
  ASSERT_TRUE(prefetcher.ok()) << prefetcher.status();
  const std::vector<Batch> batches = Drain(**prefetcher);
  std::vector<int64_t> want =
      Expected(1000, 1, 99, options.assignment, 64, true);
  want.erase(want.begin(), want.begin() + 2 * 64);
  const std::vector<int64_t> next_epoch =
      Expected(1000, 2, 99, options.assignment, 64, true);
  want.insert(want.end(), next_epoch.begin(), next_epoch.end());
  std::vector<int64_t> got;
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(batches[0].epoch, 1);
  EXPECT_EQ(batches[0].index, 2);
  for (const Batch& b : batches) {
    got.insert(got.end(), b.example_ids.begin(), b.example_ids.end());
  }
  EXPECT_EQ(got, want);
  options.first_batch = -1;
  EXPECT_EQ(BatchPrefetcher::Create(dataset, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BatchPrefetcher, ShutsDownCleanlyMidEpoch) {
  std::shared_ptr<const Dataset> dataset = Synthetic(5000);
  PrefetcherOptions options;
  options.batch_size = 10;
  options.prefetch_batches = 2;
  {
    // Destroyed while the producer waits for queue space.
    absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
        BatchPrefetcher::Create(dataset, options);
    ASSERT_TRUE(prefetcher.ok());
    ASSERT_TRUE((*prefetcher)->Next(kWait).ok());
  }
  {
    // Destroyed without ever being read.
    absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
        BatchPrefetcher::Create(dataset, options);
    ASSERT_TRUE(prefetcher.ok());
  }
  // Explicit shutdown: later calls are cancelled, a second shutdown is fine.
  absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
      BatchPrefetcher::Create(dataset, options);
  ASSERT_TRUE(prefetcher.ok());
  absl::StatusOr<Batch> batch = (*prefetcher)->Next(kWait);
  ASSERT_TRUE(batch.ok());
  (*prefetcher)->Shutdown();
  EXPECT_EQ((*prefetcher)->Next(kWait).status().code(),
            absl::StatusCode::kCancelled);
  (*prefetcher)->Recycle(*std::move(batch));
  (*prefetcher)->Shutdown();
}

// Counts live buffers; can hold the producer inside an allocation until the
// test opens the gate, and tells the test when the n-th allocation starts.
struct TestAllocator {
  std::atomic<int> allocations{0};
  std::atomic<int> live{0};
  absl::Notification gate;
  int notify_at = 0;
  absl::Notification reached;

  HostAllocator Get() {
    return [this](size_t bytes) -> absl::StatusOr<HostBuffer> {
      const int n = ++allocations;
      if (n == notify_at) reached.Notify();
      if (!gate.WaitForNotificationWithTimeout(kWait)) {
        return absl::DeadlineExceededError("test gate never opened");
      }
      ++live;
      return HostBuffer(new float[bytes / sizeof(float) + 1], bytes,
                        [this](void* p) {
                          delete[] static_cast<float*>(p);
                          --live;
                        });
    };
  }
};

TEST(BatchPrefetcher, NextWaitsABoundedTime) {
  TestAllocator allocator;
  PrefetcherOptions options;
  options.batch_size = 4;
  options.allocator = allocator.Get();
  absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
      BatchPrefetcher::Create(Synthetic(16), options);
  ASSERT_TRUE(prefetcher.ok());
  // The producer is held in the allocator: nothing can be ready.
  absl::StatusOr<Batch> batch = (*prefetcher)->Next(absl::Milliseconds(20));
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kDeadlineExceeded);
  allocator.gate.Notify();
  batch = (*prefetcher)->Next(kWait);
  EXPECT_TRUE(batch.ok()) << batch.status();
}

TEST(BatchPrefetcher, ShutdownWakesAWaitingConsumer) {
  TestAllocator allocator;  // gate closed: no batch can be ready
  PrefetcherOptions options;
  options.batch_size = 4;
  options.allocator = allocator.Get();
  absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
      BatchPrefetcher::Create(Synthetic(16), options);
  ASSERT_TRUE(prefetcher.ok());
  absl::Status consumer_status;
  std::thread consumer(
      [&] { consumer_status = (*prefetcher)->Next(kWait).status(); });
  // Shutdown() returns once the producer leaves the allocator; the consumer
  // must be released before that, by the shutdown flag alone.
  std::thread stopper([&] { (*prefetcher)->Shutdown(); });
  consumer.join();
  EXPECT_EQ(consumer_status.code(), absl::StatusCode::kCancelled);
  allocator.gate.Notify();
  stopper.join();
}

TEST(BatchPrefetcher, UsesAndRecyclesTheHostAllocator) {
  TestAllocator allocator;
  allocator.gate.Notify();
  std::shared_ptr<const Dataset> dataset = Synthetic(200);
  PrefetcherOptions options;
  options.batch_size = 8;
  options.prefetch_batches = 3;
  options.num_epochs = 4;
  options.allocator = allocator.Get();
  {
    absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
        BatchPrefetcher::Create(dataset, options);
    ASSERT_TRUE(prefetcher.ok());
    int batches = 0;
    while (true) {
      absl::StatusOr<Batch> batch = (*prefetcher)->Next(kWait);
      if (!batch.ok()) {
        EXPECT_EQ(batch.status().code(), absl::StatusCode::kOutOfRange);
        break;
      }
      ExpectContents(*dataset, *batch);
      ++batches;
      (*prefetcher)->Recycle(*std::move(batch));
    }
    EXPECT_EQ(batches, 4 * 25);
    // Queue, the batch being built, the one the step holds, and slack.
    EXPECT_LE(allocator.allocations.load(), options.prefetch_batches + 2);
  }
  EXPECT_EQ(allocator.live.load(), 0);
}

TEST(BatchPrefetcher, ReassignsShardsAtAnEpochBoundary) {
  // Two workers; worker 1 leaves during epoch 0, and worker 0 takes its
  // shard over from epoch 1 on.
  const int64_t n = 16;
  std::shared_ptr<const Dataset> dataset = Synthetic(n);
  TestAllocator allocator;
  allocator.gate.Notify();
  // Allocation 4 builds epoch 1's second batch: by then the queue already
  // holds epoch 1 under the old assignment, which Reassign must replace.
  allocator.notify_at = 4;
  PrefetcherOptions options;
  options.batch_size = 4;
  options.prefetch_batches = 8;
  options.seed = 77;
  options.assignment = {{0}, 2};
  options.num_epochs = 3;
  options.allocator = allocator.Get();
  absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
      BatchPrefetcher::Create(dataset, options);
  ASSERT_TRUE(prefetcher.ok());

  absl::StatusOr<Batch> first = (*prefetcher)->Next(kWait);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->epoch, 0);
  ASSERT_TRUE(allocator.reached.WaitForNotificationWithTimeout(kWait));

  const ShardAssignment both = {{0, 1}, 2};
  EXPECT_EQ((*prefetcher)->Reassign(both, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*prefetcher)->Reassign({{2}, 2}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*prefetcher)->Reassign(both, 1).ok());

  std::vector<Batch> batches = Drain(**prefetcher);
  std::vector<int64_t> epochs[3];
  epochs[0] = first->example_ids;
  for (const Batch& batch : batches) {
    ASSERT_LT(batch.epoch, 3);
    ExpectContents(*dataset, batch);
    epochs[batch.epoch].insert(epochs[batch.epoch].end(),
                               batch.example_ids.begin(),
                               batch.example_ids.end());
  }
  EXPECT_EQ(epochs[0], Expected(n, 0, 77, {{0}, 2}, 4, true));
  EXPECT_EQ(epochs[1], Expected(n, 1, 77, both, 4, true));
  EXPECT_EQ(epochs[2], Expected(n, 2, 77, both, 4, true));
  EXPECT_EQ(epochs[1].size(), static_cast<size_t>(n));
}

TEST(BatchPrefetcher, EpochWithoutAFullBatchIsAnError) {
  PrefetcherOptions options;
  options.batch_size = 8;
  options.assignment = {{1}, 4};  // 5 of 20 examples
  absl::StatusOr<std::unique_ptr<BatchPrefetcher>> prefetcher =
      BatchPrefetcher::Create(Synthetic(20), options);
  ASSERT_TRUE(prefetcher.ok());
  absl::StatusOr<Batch> batch = (*prefetcher)->Next(kWait);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(batch.status().message()),
              ::testing::HasSubstr("hold 5 examples"));
}

TEST(BatchPrefetcher, CreateRejectsBadOptions) {
  struct Case {
    std::string name;
    int batch_size;
    int prefetch_batches;
    int64_t first_epoch;
    ShardAssignment assignment;
  };
  const std::vector<Case> cases = {
      {"zero_batch", 0, 4, 0, {{0}, 1}},
      {"zero_queue", 8, 0, 0, {{0}, 1}},
      {"negative_epoch", 8, 4, -1, {{0}, 1}},
      {"shard_out_of_range", 8, 4, 0, {{3}, 3}},
      {"no_shards", 8, 4, 0, {{0}, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PrefetcherOptions options;
    options.batch_size = c.batch_size;
    options.prefetch_batches = c.prefetch_batches;
    options.first_epoch = c.first_epoch;
    options.assignment = c.assignment;
    EXPECT_EQ(BatchPrefetcher::Create(Synthetic(10), options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(BatchPrefetcher::Create(nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchPrefetcher::Create(Synthetic(0), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto inconsistent = std::make_shared<Dataset>(*Synthetic(10));
  inconsistent->labels.pop_back();
  EXPECT_EQ(BatchPrefetcher::Create(inconsistent, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker
