#include "worker/data/idx_batch_reader.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/data/sharding.h"

namespace ps::worker::data {
namespace {

class IdxBatchReader : public BatchReader {
 public:
  IdxBatchReader(std::shared_ptr<const Dataset> dataset,
                 std::vector<int64_t> order, int64_t start)
      : BatchReader(IdxSchema(*dataset)),
        dataset_(std::move(dataset)),
        order_(std::move(order)),
        position_(std::min<int64_t>(start, order_.size())) {}

  absl::StatusOr<Batch> Next(int max_examples) override {
    if (max_examples < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_examples must be positive, got ", max_examples));
    }
    const int64_t n = std::min<int64_t>(
        max_examples, static_cast<int64_t>(order_.size()) - position_);
    absl::StatusOr<Batch> batch =
        IdxBatch(*dataset_, absl::MakeConstSpan(order_).subspan(position_, n),
                 position_);
    if (batch.ok()) {
      position_ += n;
      read_ += n;
    }
    return batch;
  }

  int64_t position() const override { return position_; }

  ReaderStats stats() const override {
    ReaderStats stats;
    stats.lines = read_;
    stats.examples = read_;
    // The IDX bytes the examples came from: pixels and a label each.
    stats.bytes = read_ * (dataset_->example_size() + 1);
    return stats;
  }

 private:
  const std::shared_ptr<const Dataset> dataset_;
  const std::vector<int64_t> order_;
  int64_t position_;
  int64_t read_ = 0;
};

}  // namespace

BatchSchema IdxSchema(const Dataset& dataset) {
  BatchSchema schema;
  schema.dense_dim = static_cast<int>(dataset.example_size());
  schema.label_kind = LabelKind::kClass;
  schema.num_classes = dataset.num_classes;
  return schema;
}

absl::StatusOr<Batch> IdxBatch(const Dataset& dataset,
                               absl::Span<const int64_t> ids,
                               int64_t first_example) {
  Batch batch;
  batch.size = static_cast<int>(ids.size());
  batch.dense_dim = static_cast<int>(dataset.example_size());
  batch.label_kind = LabelKind::kClass;
  batch.first_example = first_example;
  batch.dense.reserve(ids.size() * dataset.example_size());
  batch.classes.reserve(ids.size());
  for (const int64_t id : ids) {
    if (id < 0 || id >= dataset.num_examples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "example ", id, " is outside the dataset's ", dataset.num_examples));
    }
    const absl::Span<const float> image = dataset.image(id);
    batch.dense.insert(batch.dense.end(), image.begin(), image.end());
    batch.classes.push_back(dataset.labels[id]);
  }
  return batch;
}

absl::StatusOr<std::unique_ptr<BatchReader>> OpenIdxBatchReader(
    std::shared_ptr<const Dataset> dataset, uint64_t seed,
    const ShardSpec& shard) {
  if (dataset == nullptr) return absl::InvalidArgumentError("no dataset");
  absl::Status status = ValidateShardSpec(shard);
  if (!status.ok()) return status;
  const int shards[] = {shard.shard};
  absl::StatusOr<std::vector<int64_t>> order = ShardIndices(
      dataset->num_examples, shard.epoch, seed, shards, shard.num_shards);
  if (!order.ok()) return order.status();
  return std::unique_ptr<BatchReader>(std::make_unique<IdxBatchReader>(
      std::move(dataset), *std::move(order), shard.start_example));
}

absl::StatusOr<std::unique_ptr<BatchReader>> OpenIdxBatchReaderInOrder(
    std::shared_ptr<const Dataset> dataset) {
  if (dataset == nullptr) return absl::InvalidArgumentError("no dataset");
  std::vector<int64_t> order(static_cast<size_t>(dataset->num_examples));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  return std::unique_ptr<BatchReader>(std::make_unique<IdxBatchReader>(
      std::move(dataset), std::move(order), 0));
}

}  // namespace ps::worker::data
