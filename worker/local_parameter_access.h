// A ParameterAccess held in process, for tests and single-process runs: the
// dense tensors and the sparse tables of one model in host memory, every
// push applied at once with plain SGD (w -= learning_rate * g). Sparse rows
// come into being on their first pull, from a seeded hash of (table, key),
// uniform in [-init_scale, init_scale], as the parameter servers'
// tables initialise theirs. Its SparseRowAccess side applies pushes at
// once too, and PushRowsAndPull fills the next rows right after its push
// is applied (as one worker alone would see them).
#ifndef PS_WORKER_LOCAL_PARAMETER_ACCESS_H_
#define PS_WORKER_LOCAL_PARAMETER_ACCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/parameter_access.h"
#include "worker/sparse_row_access.h"

namespace ps::worker {

struct LocalTableOptions {
  std::string name;
  int64_t dim = 1;
  float init_scale = 0.01f;
};

// Not thread-safe: driven by one training thread, as ParameterAccess is.
class LocalParameterAccess final : public ParameterAccess,
                                   public SparseRowAccess {
 public:
  // `dense`: the tensors' initial values, in model order.
  LocalParameterAccess(std::vector<std::vector<float>> dense,
                       std::vector<LocalTableOptions> tables,
                       float learning_rate, uint64_t seed);

  // Copies the current weights; returns the number of Finish calls so far.
  absl::StatusOr<int64_t> Pull(int64_t clock,
                               std::vector<absl::Span<float>> tensors) override;
  // Applies the gradient at once. INVALID_ARGUMENT for a bad index or size.
  absl::Status Push(int64_t clock, int64_t base_version, int index,
                    absl::Span<const float> grad) override;
  // Staleness 0.
  absl::StatusOr<int64_t> Finish(int64_t clock) override;

  absl::Status PullSparse(int64_t clock, int table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<float> rows) override;
  absl::Status PushSparse(int64_t clock, int64_t base_version, int table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads) override;

  // SparseRowAccess: PullSparse and PushSparse per table (the version:
  // as Pull's).
  absl::StatusOr<int64_t> PullRows(
      int64_t clock, std::vector<client::SparsePull> pulls) override;
  absl::Status PushRows(int64_t clock, int64_t base_version,
                        std::vector<client::SparsePush> grads) override;
  absl::Status PushRowsAndPull(int64_t clock, int64_t base_version,
                               std::vector<client::SparsePush> grads,
                               std::vector<client::SparsePull> next) override;
  // Does it all at once; the function returned gives the result.
  PendingStepEnd StartRowsStepEnd(
      int64_t clock, int64_t base_version,
      std::vector<absl::Span<const float>> grads,
      std::vector<client::SparsePush> rows,
      std::vector<client::SparsePull> next,
      std::vector<absl::Span<float>> tensors) override;

  // The current weights, for checks.
  const std::vector<float>& dense(int index) const { return dense_[index]; }
  // Rows ever pulled from `table`.
  int64_t table_size(int table) const { return tables_[table].rows.size(); }
  int64_t sparse_pushes() const { return sparse_pushes_; }
  // Calls that pulled rows: PullSparse (one table), PullRows (all of its
  // tables), and pushes that asked rows back (PushRowsAndPull).
  int64_t sparse_pulls() const { return sparse_pulls_; }
  int64_t row_pulls() const { return row_pulls_; }
  int64_t pushes_with_rows() const { return pushes_with_rows_; }

 private:
  struct Table {
    LocalTableOptions options;
    absl::flat_hash_map<uint64_t, std::vector<float>> rows;
  };
  absl::StatusOr<Table*> TableFor(int table, size_t keys, size_t values);
  std::vector<float>& Row(int table, Table& t, uint64_t key);
  // The rows of `keys`, created on first use (not counted as a call).
  absl::Status ReadRows(int table, absl::Span<const uint64_t> keys,
                        absl::Span<float> rows);

  std::vector<std::vector<float>> dense_;
  std::vector<Table> tables_;
  const float learning_rate_;
  const uint64_t seed_;
  int64_t finishes_ = 0;
  int64_t sparse_pushes_ = 0;
  int64_t sparse_pulls_ = 0;
  int64_t row_pulls_ = 0;
  int64_t pushes_with_rows_ = 0;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOCAL_PARAMETER_ACCESS_H_
