// A ParameterAccess held in process, for tests and single-process runs: the
// dense tensors and the sparse tables of one model in host memory, every
// gradient applied at once with plain SGD (w -= learning_rate * g). Sparse
// rows come into being on their first pull, from a seeded hash of (table,
// key), uniform in [-init_scale, init_scale], as the parameter servers'
// tables initialise theirs. What a push or an end of step asks back is
// read right after its gradients are applied (as one worker alone would
// see it); every Handle it returns is over.
#ifndef PS_WORKER_CLIENT_LOCAL_PARAMETER_ACCESS_H_
#define PS_WORKER_CLIENT_LOCAL_PARAMETER_ACCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/client/parameter_access.h"

namespace ps::client {

struct LocalTableOptions {
  std::string name;
  int64_t dim = 1;
  float init_scale = 0.01f;
};

// Not thread-safe: driven by one training thread, as ParameterAccess is.
class LocalParameterAccess final : public ParameterAccess {
 public:
  // `dense`: the tensors' initial values, in model order. `boundaries`:
  // per tensor, where its gradient may be cut (PartBoundaries; missing or
  // empty: whole tensors only).
  LocalParameterAccess(std::vector<std::vector<float>> dense,
                       std::vector<LocalTableOptions> tables,
                       float learning_rate, uint64_t seed,
                       std::vector<std::vector<int64_t>> boundaries = {});

  // Copies the current weights and rows; the version: the number of steps
  // ended so far.
  Handle Pull(PullArgs request) override;
  // Applies the gradients at once, then fills what they ask back.
  // INVALID_ARGUMENT for a bad index, size, offset or table.
  absl::Status Push(StepArgs request) override;
  // Push, then the step ends (staleness 0) and the next weights are
  // filled.
  Handle EndStep(StepArgs request) override;
  std::vector<int64_t> PartBoundaries(int index) const override;
  void CancelCalls() override { ++cancels_; }

  // The current weights, for checks.
  const std::vector<float>& dense(int index) const { return dense_[index]; }
  // Rows ever pulled from `table`.
  int64_t table_size(int table) const { return tables_[table].rows.size(); }
  // Tables' row gradients applied (one per table a request names).
  int64_t sparse_pushes() const { return sparse_pushes_; }
  // Pull calls that read dense tensors, and those that read rows.
  int64_t dense_pulls() const { return dense_pulls_; }
  int64_t row_pulls() const { return row_pulls_; }
  // Push or EndStep calls that asked rows back (next_rows).
  int64_t pushes_with_rows() const { return pushes_with_rows_; }
  int64_t steps_ended() const { return steps_ended_; }
  int64_t cancels() const { return cancels_; }

 private:
  struct Table {
    LocalTableOptions options;
    absl::flat_hash_map<uint64_t, std::vector<float>> rows;
  };
  absl::StatusOr<Table*> TableFor(int table, size_t keys, size_t values);
  std::vector<float>& Row(int table, Table& t, uint64_t key);
  absl::Status ReadDense(const std::vector<absl::Span<float>>& tensors);
  // The rows of `keys`, created on first use.
  absl::Status ReadRows(const std::vector<SparsePull>& pulls);
  absl::Status ApplyDense(const TensorGrad& g);
  absl::Status ApplyRows(const SparsePush& p);

  std::vector<std::vector<float>> dense_;
  std::vector<Table> tables_;
  const float learning_rate_;
  const uint64_t seed_;
  const std::vector<std::vector<int64_t>> boundaries_;
  int64_t steps_ended_ = 0;
  int64_t sparse_pushes_ = 0;
  int64_t dense_pulls_ = 0;
  int64_t row_pulls_ = 0;
  int64_t pushes_with_rows_ = 0;
  int64_t cancels_ = 0;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_LOCAL_PARAMETER_ACCESS_H_
