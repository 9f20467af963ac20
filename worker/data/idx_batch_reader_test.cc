#include "worker/data/idx_batch_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/batch.h"
#include "worker/data/data_test_util.h"
#include "worker/data/dataset.h"
#include "worker/data/sharding.h"

namespace ps::worker::data {
namespace {

using ::testing::ElementsAre;
using testing::ReadAll;

// 11 images of 2x3 pixels; pixel j of image i is i + j / 10, label i % 4.
std::shared_ptr<const Dataset> SmallDataset() {
  auto dataset = std::make_shared<Dataset>();
  dataset->num_examples = 11;
  dataset->rows = 2;
  dataset->cols = 3;
  dataset->num_classes = 4;
  for (int i = 0; i < 11; ++i) {
    for (int j = 0; j < 6; ++j) dataset->images.push_back(i + j / 10.0f);
    dataset->labels.push_back(i % 4);
  }
  return dataset;
}

TEST(IdxBatchReader, CopiesPixelsAndLabels) {
  const std::shared_ptr<const Dataset> dataset = SmallDataset();
  const std::vector<int64_t> ids = {3, 0, 10};
  absl::StatusOr<Batch> batch = IdxBatch(*dataset, ids, 5);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(ValidateBatch(*batch, IdxSchema(*dataset)).ok());
  EXPECT_EQ(batch->size, 3);
  EXPECT_EQ(batch->dense_dim, 6);
  EXPECT_EQ(batch->first_example, 5);
  EXPECT_THAT(batch->dense_row(0),
              ElementsAre(3, 3.1f, 3.2f, 3.3f, 3.4f, 3.5f));
  EXPECT_THAT(batch->dense_row(2),
              ElementsAre(10, 10.1f, 10.2f, 10.3f, 10.4f, 10.5f));
  EXPECT_THAT(batch->classes, ElementsAre(3, 0, 2));
  EXPECT_TRUE(batch->sparse.empty());
  const std::vector<int64_t> bad = {11};
  EXPECT_TRUE(absl::IsInvalidArgument(IdxBatch(*dataset, bad, 0).status()));
}

// The existing IDX sharding, example for example, and resuming.
TEST(IdxBatchReader, FollowsTheExistingShardingAndResumes) {
  const std::shared_ptr<const Dataset> dataset = SmallDataset();
  for (int k = 0; k < 3; ++k) {
    ShardSpec spec;
    spec.shard = k;
    spec.num_shards = 3;
    spec.epoch = 4;
    const int shards[] = {k};
    absl::StatusOr<std::vector<int64_t>> ids =
        ShardIndices(dataset->num_examples, 4, /*seed=*/77, shards, 3);
    ASSERT_TRUE(ids.ok());
    absl::StatusOr<Batch> want = IdxBatch(*dataset, *ids, 0);
    ASSERT_TRUE(want.ok());
    std::vector<std::string> want_strings;
    for (int b = 0; b < want->size; ++b) {
      want_strings.push_back(testing::ExampleString(*want, b));
    }
    for (int64_t start = 0; start <= want->size + 1; ++start) {
      spec.start_example = start;
      absl::StatusOr<std::unique_ptr<BatchReader>> reader =
          OpenIdxBatchReader(dataset, 77, spec);
      ASSERT_TRUE(reader.ok());
      absl::StatusOr<std::vector<std::string>> got = ReadAll(**reader, 2);
      ASSERT_TRUE(got.ok()) << got.status();
      const int64_t from = std::min<int64_t>(start, want->size);
      EXPECT_EQ(*got, std::vector<std::string>(want_strings.begin() + from,
                                               want_strings.end()));
      EXPECT_EQ((*reader)->stats().examples, want->size - from);
    }
  }
}

TEST(IdxBatchReader, Errors) {
  EXPECT_TRUE(
      absl::IsInvalidArgument(OpenIdxBatchReader(nullptr, 0, {}).status()));
  ShardSpec bad;
  bad.num_shards = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(
      OpenIdxBatchReader(SmallDataset(), 0, bad).status()));
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenIdxBatchReader(SmallDataset(), 0, {});
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*reader)->Next(0).status()));
}

// A test set is read whole in its own order (the evaluator's), every time
// it is opened.
TEST(IdxBatchReader, InOrderReadsEveryExampleInTheDatasetsOrder) {
  EXPECT_TRUE(
      absl::IsInvalidArgument(OpenIdxBatchReaderInOrder(nullptr).status()));
  for (int pass = 0; pass < 2; ++pass) {
    absl::StatusOr<std::unique_ptr<BatchReader>> reader =
        OpenIdxBatchReaderInOrder(SmallDataset());
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<int32_t> labels;
    std::vector<int64_t> firsts;
    for (;;) {
      absl::StatusOr<Batch> b = (*reader)->Next(4);
      ASSERT_TRUE(b.ok()) << b.status();
      if (b->size == 0) break;
      firsts.push_back(b->first_example);
      for (int e = 0; e < b->size; ++e) {
        EXPECT_EQ(b->dense[e * 6], static_cast<float>(b->first_example + e));
        labels.push_back(b->classes[e]);
      }
    }
    EXPECT_THAT(firsts, ElementsAre(0, 4, 8));
    EXPECT_THAT(labels, ElementsAre(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2));
    EXPECT_EQ((*reader)->position(), 11);
  }
}

}  // namespace
}  // namespace ps::worker::data
