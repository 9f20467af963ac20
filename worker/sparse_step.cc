#include "worker/sparse_step.h"

#include <vector>

#include "common/status.h"

namespace ps::worker {

absl::StatusOr<SparseStepResult> RunSparseStep(TrainableModel& model,
                                               ParameterAccess& access,
                                               int64_t clock,
                                               const data::Batch& batch) {
  SparseStepResult result;
  // Dense weights.
  std::vector<std::vector<float>> dense;
  std::vector<absl::Span<float>> views;
  for (const ParameterInfo& p : model.parameters()) {
    dense.emplace_back(static_cast<size_t>(p.size));
    views.push_back(absl::MakeSpan(dense.back()));
  }
  PS_ASSIGN_OR_RETURN(const int64_t version, access.Pull(clock, views));
  for (int i = 0; i < model.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(model.SetParameterRange(i, 0, dense[i]));
  }
  // The batch's rows.
  PS_ASSIGN_OR_RETURN(const std::vector<std::vector<uint64_t>> keys,
                      model.PrepareSparse(batch));
  std::vector<std::vector<float>> rows(keys.size());
  for (size_t t = 0; t < keys.size(); ++t) {
    const int table = static_cast<int>(t);
    rows[t].resize(keys[t].size() *
                   static_cast<size_t>(model.sparse_tables()[t].dim));
    PS_RETURN_IF_ERROR(
        access.PullSparse(clock, table, keys[t], absl::MakeSpan(rows[t])));
    PS_RETURN_IF_ERROR(model.SetSparseRows(table, rows[t]));
    result.unique_keys += static_cast<int64_t>(keys[t].size());
  }
  PS_ASSIGN_OR_RETURN(result.loss, model.TrainDataBatch(batch, {}));
  // Gradients: the dense tensors', then one row per key (into the buffers
  // the rows came in: they stay valid until Finish).
  for (int i = 0; i < model.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(model.GetGradientRange(i, 0, absl::MakeSpan(dense[i])));
    PS_RETURN_IF_ERROR(access.Push(clock, version, i, dense[i]));
  }
  for (size_t t = 0; t < keys.size(); ++t) {
    const int table = static_cast<int>(t);
    PS_RETURN_IF_ERROR(model.GetSparseGradient(table, absl::MakeSpan(rows[t])));
    PS_RETURN_IF_ERROR(
        access.PushSparse(clock, version, table, keys[t], rows[t]));
  }
  PS_ASSIGN_OR_RETURN(result.staleness, access.Finish(clock));
  return result;
}

}  // namespace ps::worker
