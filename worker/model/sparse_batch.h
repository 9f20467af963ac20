// The sparse side of one batch for a layer model's embedding bags: per
// table the batch's unique keys (ascending), their rows as pulled and their
// gradient rows, in device memory; per (sparse field, table) the bags'
// positions as indices into those rows (the CSR form the kernels'
// EmbeddingBag ops take).
#ifndef PS_WORKER_MODEL_SPARSE_BATCH_H_
#define PS_WORKER_MODEL_SPARSE_BATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/spec/model_graph.h"
#include "kernels/backend.h"
#include "worker/client/unique_keys.h"
#include "worker/data/batch.h"

namespace ps::worker::model {

// Owns its device buffers, grown to the largest batch seen. Not
// thread-safe.
class SparseBatch {
 public:
  // A sparse model input read through a table (an embedding bag's input).
  struct FieldUse {
    std::string field;  // the batch's field, by name
    int table = 0;      // index in `tables`
    bool weighted = false;
  };
  SparseBatch(std::vector<SparseTableRef> tables, std::vector<FieldUse> uses)
      : tables_(std::move(tables)), uses_(std::move(uses)) {}

  // The batch's keys and bags for every use. INVALID_ARGUMENT naming the
  // field if the batch lacks it, or lacks the weights a weighted use needs.
  // The rows are unset and the gradients zero until SetRows / Backward.
  absl::Status Load(kernels::Backend& backend, const data::Batch& batch);

  int num_tables() const { return static_cast<int>(tables_.size()); }
  const SparseTableRef& table(int t) const { return tables_[t]; }
  const std::vector<uint64_t>& keys(int t) const {
    return tables_data_[t].keys;
  }

  // keys(t).size() rows of table t's dim from host fp32.
  absl::Status SetRows(kernels::Backend& backend, int t,
                       absl::Span<const float> rows);
  absl::Status GetGradient(kernels::Backend& backend, int t,
                           absl::Span<float> rows);

  // Device views for use `u` (in the order given) and its table.
  kernels::DeviceMatrix<const float> rows(int t) const;
  kernels::DeviceMatrix<float> gradient(int t) const;
  kernels::DeviceSpan<const int32_t> indices(int u) const;
  kernels::DeviceSpan<const int32_t> offsets(int u) const;
  std::optional<kernels::DeviceSpan<const float>> weights(int u) const;
  // Scratch of at least the rows of any table: one field's gradient before
  // it is summed into its table's.
  kernels::DeviceMatrix<float> scratch(int t) const;
  int FindUse(const std::string& field, int table, bool weighted) const;

 private:
  absl::Status ZeroGradients(kernels::Backend& b);

  struct TableData {
    std::vector<uint64_t> keys;
    kernels::DeviceBuffer rows;
    kernels::DeviceBuffer grads;
  };
  struct UseData {
    int64_t nnz = 0;
    int64_t bags = 0;
    bool has_weights = false;
    kernels::DeviceBuffer indices;
    kernels::DeviceBuffer offsets;
    kernels::DeviceBuffer weights;
  };

  const std::vector<SparseTableRef> tables_;
  const std::vector<FieldUse> uses_;
  std::vector<TableData> tables_data_;
  std::vector<UseData> uses_data_;
  kernels::DeviceBuffer scratch_;
  // Load's host scratch, kept between batches so that a step does not
  // allocate: a table's keys over its uses, their deduplication, the
  // unique keys sorted with their first-appearance index, each one's rank,
  // and per use the indices to upload.
  std::vector<uint64_t> all_keys_;
  client::KeyDeduplicator dedup_;
  client::UniqueKeys unique_;
  std::vector<std::pair<uint64_t, int32_t>> by_key_;
  std::vector<int32_t> rank_;
  std::vector<std::vector<int32_t>> host_indices_;
  // Per use, the fields of the batch loaded last (empty after a failed
  // Load): loading the same again only zeroes the gradients.
  struct Loaded {
    std::vector<uint64_t> keys;
    std::vector<int32_t> offsets;
    std::vector<float> weights;
  };
  std::vector<Loaded> loaded_;
};

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_SPARSE_BATCH_H_
