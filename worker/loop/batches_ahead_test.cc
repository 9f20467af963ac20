#include "worker/loop/batches_ahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/spec/data_plan.h"

namespace ps::worker {
namespace {

// Shard `shard` of epoch `epoch`: examples numbered from the ShardSpec's
// start, each one's dense value shard * 1000 + epoch * 100 + its number.
// Fails at example `fail_at` of shard 1 (-1: never).
data::BatchSchema OneDense() {
  data::BatchSchema s;
  s.dense_dim = 1;
  return s;
}
class NumberedReader : public data::BatchReader {
 public:
  NumberedReader(const data::ShardSpec& s, int64_t fail_at)
      : BatchReader(OneDense()),
        spec_(s),
        at_(s.start_example),
        fail_at_(fail_at) {}
  absl::StatusOr<data::Batch> Next(int max_examples) override {
    const int64_t n = std::min<int64_t>(max_examples, 40 - at_);
    if (spec_.shard == 1 && fail_at_ >= at_ && fail_at_ < at_ + n) {
      return absl::DataLossError("truncated file");
    }
    data::Batch b;
    b.size = static_cast<int>(std::max<int64_t>(0, n));
    b.dense_dim = 1;
    b.first_example = at_;
    for (int e = 0; e < b.size; ++e) {
      b.dense.push_back(
          static_cast<float>(spec_.shard * 1000 + spec_.epoch * 100 + at_ + e));
    }
    at_ += b.size;
    return b;
  }
  int64_t position() const override { return at_; }
  data::ReaderStats stats() const override { return {}; }

 private:
  const data::ShardSpec spec_;
  int64_t at_;
  const int64_t fail_at_;
};

// Two data shards of 40 examples in batches of 10 (4 a pass, steps per
// epoch 4); the plan: shard 0's batches 0-5 at clocks 0-5, then shard 1's
// batches 2-3.
struct Fixture {
  explicit Fixture(int64_t fail_at = -1)
      : batches(
            [this, fail_at](const data::ShardSpec& s)
                -> absl::StatusOr<std::unique_ptr<data::BatchReader>> {
              ++opened;
              return std::make_unique<NumberedReader>(s, fail_at);
            },
            2, 10) {
    a.set_num_data_shards(2);
    *a.add_plan() = PlanSegment(0, 0, 6);
    *a.add_plan() = PlanSegment(1, 2, 4);
  }
  float First(const data::Batch* b) { return b->dense.front(); }

  WorkerAssignment a;
  std::atomic<int> opened{0};
  data::ShardBatches batches;
  std::unique_ptr<LivePlan> plan;
  LivePlan& Plan(std::function<WorkerPlan()> current = nullptr) {
    plan = std::make_unique<LivePlan>(a, std::move(current), DataShape{4, 8});
    plan->End();
    return *plan;
  }
};

// Each step's batch is the plan's, read ahead or when asked, once; a batch
// read ahead is the one asked for later (the same object).
TEST(BatchesAhead, ReadsThePlansBatchOfEachStepOnce) {
  Fixture f;
  BatchesAhead read(&f.batches, &f.Plan());
  read.ReadAhead(1);
  read.ReadAhead(1);
  absl::StatusOr<const data::Batch*> b0 = read.Get(0);
  ASSERT_TRUE(b0.ok()) << b0.status();
  EXPECT_EQ(f.First(*b0), 0);
  absl::StatusOr<const data::Batch*> b1 = read.Get(1);
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(f.First(*b1), 10);
  EXPECT_EQ(*read.Get(1), *b1);
  // Batch 4 of shard 0 is batch 0 of its epoch 1; clock 6 is shard 1's
  // batch 2.
  EXPECT_EQ(f.First(*read.Get(4)), 100);
  EXPECT_EQ(f.First(*read.Get(6)), 1020);
  // Outside the plan: an error when asked, nothing when read ahead.
  read.ReadAhead(8);
  EXPECT_EQ(read.Get(8).status().code(), absl::StatusCode::kOutOfRange);
  // Dropped batches are read again when asked for again.
  read.DropBefore(5);
  EXPECT_EQ(f.First(*read.Get(0)), 0);
}

// A plan that changed since a batch was read ahead: the step's batch at
// its new address is read.
TEST(BatchesAhead, ABatchWhoseAddressChangedIsReadAgain) {
  Fixture f;
  WorkerPlan now = PlanOf(f.a);
  BatchesAhead read(&f.batches, &f.Plan([&now] { return now; }));
  read.ReadAhead(2);
  EXPECT_EQ(f.First(*read.Get(2)), 20);
  now.segments.Mutable(0)->set_data_shard(1);
  f.plan->End();
  EXPECT_EQ(f.First(*read.Get(2)), 1020);
}

// A batch that fails to read fails at its own step, annotated; those
// before it are read.
TEST(BatchesAhead, AReadErrorIsTheStepsOwn) {
  Fixture f(/*fail_at=*/35);
  BatchesAhead read(&f.batches, &f.Plan());
  read.ReadAhead(7);  // shard 1's batch 3: examples 30-39
  EXPECT_EQ(f.First(*read.Get(6)), 1020);
  absl::StatusOr<const data::Batch*> bad = read.Get(7);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("training data"), std::string::npos)
      << bad.status();
  EXPECT_EQ(read.bad_lines(), 0);
  EXPECT_TRUE(read.bad_line_samples().empty());
}

}  // namespace
}  // namespace ps::worker
