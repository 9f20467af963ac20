// The IDX image data (worker/data/dataset.h, read by worker/data/idx_reader.h)
// as general batches: dense = the dataset's pixels as it scaled them
// ([rows * cols] floats per example), classes = the labels. The existing IDX
// path is used as it is; this only copies its examples into Batch form.
//
// Shard rule: the existing one (worker/data/sharding.h): a permutation of the
// whole dataset from (seed, epoch), cut into num_shards contiguous slices;
// shard k streams slice k in permutation order. ShardSpec::start_example
// jumps straight to an example (no re-reading: the data is in memory).
#ifndef PS_WORKER_DATA_IDX_BATCH_READER_H_
#define PS_WORKER_DATA_IDX_BATCH_READER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/data/batch.h"
#include "worker/data/batch_reader.h"
#include "worker/data/dataset.h"

namespace ps::worker::data {

BatchSchema IdxSchema(const Dataset& dataset);

// Examples `ids` of `dataset`, in that order. INVALID_ARGUMENT for an id
// outside the dataset.
absl::StatusOr<Batch> IdxBatch(const Dataset& dataset,
                               absl::Span<const int64_t> ids,
                               int64_t first_example);

// INVALID_ARGUMENT for a null dataset or a bad ShardSpec.
absl::StatusOr<std::unique_ptr<BatchReader>> OpenIdxBatchReader(
    std::shared_ptr<const Dataset> dataset, uint64_t seed,
    const ShardSpec& shard);

// Every example of `dataset` in its order (a test set), as one shard.
// INVALID_ARGUMENT for a null dataset.
absl::StatusOr<std::unique_ptr<BatchReader>> OpenIdxBatchReaderInOrder(
    std::shared_ptr<const Dataset> dataset);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_IDX_BATCH_READER_H_
