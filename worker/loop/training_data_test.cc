#include "worker/loop/training_data.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/data_test_util.h"
#include "worker/data/sharding.h"

namespace ps::worker {
namespace {

using data::testing::TempPath;
using data::testing::WriteFile;

// `n` examples of 2 pixels, example i holding (i, -i), label i % 3.
std::shared_ptr<const Dataset> Numbered(int64_t n) {
  auto d = std::make_shared<Dataset>();
  d->num_examples = n;
  d->rows = 1;
  d->cols = 2;
  d->num_classes = 3;
  for (int64_t i = 0; i < n; ++i) {
    d->images.push_back(static_cast<float>(i));
    d->images.push_back(static_cast<float>(-i));
    d->labels.push_back(static_cast<int32_t>(i % 3));
  }
  return d;
}

WorkerAssignment IdxJob(int batch, int epochs, int shards) {
  WorkerAssignment a;
  a.set_num_data_shards(shards);
  DataSpec* d = a.mutable_spec()->mutable_data();
  d->set_format(DataSpec::IDX);
  d->set_batch_size(batch);
  d->set_epochs(epochs);
  d->set_shuffle_seed(11);
  return a;
}

// The examples (their first pixel) of a batch.
std::vector<int64_t> Ids(const data::Batch& b) {
  std::vector<int64_t> ids;
  for (int e = 0; e < b.size; ++e) {
    ids.push_back(static_cast<int64_t>(b.dense[static_cast<size_t>(e) * 2]));
  }
  return ids;
}

// IDX data: steps_per_epoch = floor(examples / (shards x batch)); every
// batch of a data shard's epoch is its slice of the epoch's permutation
// (worker/data/sharding.h), in order, so the examples of an epoch's
// batches over all shards are distinct and each carries its own label.
TEST(TrainingData, IdxShardsReadTheirSliceOfEachEpochsPermutation) {
  const WorkerAssignment a = IdxJob(/*batch=*/4, /*epochs=*/2, /*shards=*/2);
  absl::StatusOr<TrainingData> d =
      OpenTrainingData(a, Numbered(50), nullptr, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->text);
  EXPECT_EQ(d->example_size, 2);
  EXPECT_EQ(d->shape.steps_per_epoch, 6);  // 50 / 2 / 4
  EXPECT_EQ(d->shape.total_steps, 12);
  EXPECT_EQ(d->open_test, nullptr);
  data::ShardBatches batches(d->open_shard, 2, 4);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int shard = 0; shard < 2; ++shard) {
      const int shards[] = {shard};
      absl::StatusOr<std::vector<int64_t>> order =
          ShardIndices(50, epoch, 11, shards, 2);
      ASSERT_TRUE(order.ok()) << order.status();
      for (int64_t i = 0; i < 6; ++i) {
        absl::StatusOr<data::Batch> b = batches.BatchAt(shard, epoch, i);
        ASSERT_TRUE(b.ok()) << b.status();
        ASSERT_EQ(b->size, 4);
        EXPECT_EQ(b->label_kind, data::LabelKind::kClass);
        const std::vector<int64_t> ids = Ids(*b);
        EXPECT_EQ(ids, std::vector<int64_t>(order->begin() + i * 4,
                                            order->begin() + i * 4 + 4))
            << "shard " << shard << " epoch " << epoch << " batch " << i;
        for (int e = 0; e < 4; ++e) {
          EXPECT_EQ(b->classes[e], ids[e] % 3);
          EXPECT_EQ(b->dense[e * 2 + 1], -static_cast<float>(ids[e]));
          EXPECT_TRUE(seen.insert(ids[e]).second) << "example " << ids[e];
        }
      }
    }
    EXPECT_EQ(seen.size(), 48u);
  }
}

// A batch in the middle of an epoch (a survivor continuing a leaver's
// shard) holds what reading the shard from its start would give there.
TEST(TrainingData, AnIdxBatchReadOutOfOrderIsTheSame) {
  const WorkerAssignment a = IdxJob(5, 1, 1);
  absl::StatusOr<TrainingData> d =
      OpenTrainingData(a, Numbered(40), nullptr, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  data::ShardBatches in_order(d->open_shard, 1, 5);
  std::vector<std::vector<int64_t>> want;
  for (int64_t i = 0; i < 8; ++i)
    want.push_back(Ids(*in_order.BatchAt(0, 0, i)));
  data::ShardBatches jumping(d->open_shard, 1, 5);
  for (int64_t i : {5, 2, 7, 0}) {
    absl::StatusOr<data::Batch> b = jumping.BatchAt(0, 0, i);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(Ids(*b), want[i]) << "batch " << i;
    EXPECT_EQ(b->first_example, i * 5);
  }
}

TEST(TrainingData, IdxMaxStepsAndTheErrors) {
  WorkerAssignment a = IdxJob(4, 3, 1);
  a.mutable_spec()->mutable_data()->set_max_steps(100);
  absl::StatusOr<TrainingData> d =
      OpenTrainingData(a, Numbered(10), nullptr, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->shape.steps_per_epoch, 2);
  EXPECT_EQ(d->shape.total_steps, 100);
  // No full batch per data shard: 10 examples over 3 shards of 4.
  absl::StatusOr<TrainingData> none =
      OpenTrainingData(IdxJob(4, 1, 3), Numbered(10), nullptr, 3);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition)
      << none.status();
  EXPECT_NE(none.status().message().find("no full batch of 4"),
            std::string::npos)
      << none.status();
  // An IDX job without its training set.
  EXPECT_EQ(
      OpenTrainingData(IdxJob(4, 1, 1), nullptr, nullptr, 1).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// The test set is read whole, in its order, however the training data is
// shuffled.
TEST(TrainingData, TheIdxTestSetIsReadInOrder) {
  absl::StatusOr<TrainingData> d =
      OpenTrainingData(IdxJob(4, 1, 1), Numbered(20), Numbered(7), 1);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_NE(d->open_test, nullptr);
  for (int pass = 0; pass < 2; ++pass) {
    absl::StatusOr<std::unique_ptr<data::BatchReader>> r = d->open_test();
    ASSERT_TRUE(r.ok()) << r.status();
    absl::StatusOr<data::Batch> b = (*r)->Next(5);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(Ids(*b), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    b = (*r)->Next(5);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(Ids(*b), (std::vector<int64_t>{5, 6}));
    EXPECT_EQ((*r)->Next(5)->size, 0);
  }
}

WorkerAssignment RatingsJob(const std::string& train, const std::string& test) {
  WorkerAssignment a;
  a.set_num_data_shards(2);
  DataSpec* d = a.mutable_spec()->mutable_data();
  d->set_format(DataSpec::MOVIELENS);
  d->add_train_files(train);
  if (!test.empty()) d->add_test_files(test);
  d->set_batch_size(3);
  d->set_epochs(2);
  d->set_shuffle_buffer(8);
  return a;
}

std::string Ratings(int n) {
  std::string s;
  for (int k = 0; k < n; ++k) absl::StrAppend(&s, k, "\t", 100 + k, "\t4\t0\n");
  return s;
}

// Text data: the shape from one counting pass (the smallest data shard
// decides), from data.max_steps without the pass, or from the assignment
// (a worker counted already); the test files in file order.
TEST(TrainingData, TextDataShapesAndTestFiles) {
  const std::string train = TempPath("td.train");
  const std::string test = TempPath("td.test");
  ASSERT_TRUE(WriteFile(train, Ratings(20)).ok());
  ASSERT_TRUE(WriteFile(test, Ratings(4)).ok());
  absl::StatusOr<TrainingData> d =
      OpenTrainingData(RatingsJob(train, test), nullptr, nullptr, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->text);
  EXPECT_EQ(d->example_size, 0);
  EXPECT_EQ(d->counted_bad_lines, 0);
  EXPECT_EQ(d->shape.steps_per_epoch, 3);  // 10 per shard / 3
  EXPECT_EQ(d->shape.total_steps, 6);
  ASSERT_NE(d->open_test, nullptr);
  absl::StatusOr<std::unique_ptr<data::BatchReader>> r = d->open_test();
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<data::Batch> b = (*r)->Next(10);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size, 4);
  EXPECT_EQ(b->sparse[0].keys, (std::vector<uint64_t>{0, 1, 2, 3}));

  WorkerAssignment counted = RatingsJob(train, "");
  counted.set_shard_steps(40);
  counted.set_steps_per_epoch(20);
  d = OpenTrainingData(counted, nullptr, nullptr, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->counted_bad_lines, -1);  // no pass
  EXPECT_EQ(d->shape.total_steps, 40);
  EXPECT_EQ(d->shape.steps_per_epoch, 20);
  EXPECT_EQ(d->open_test, nullptr);

  WorkerAssignment capped = RatingsJob("/nonexistent/ratings", "");
  capped.mutable_spec()->mutable_data()->set_max_steps(7);
  d = OpenTrainingData(capped, nullptr, nullptr, 2);
  ASSERT_TRUE(d.ok()) << d.status();  // the files are not read
  EXPECT_EQ(d->shape.total_steps, 7);
  EXPECT_EQ(d->counted_bad_lines, -1);
}

}  // namespace
}  // namespace ps::worker
