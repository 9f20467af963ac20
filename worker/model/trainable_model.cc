#include "worker/model/trainable_model.h"

namespace ps::worker {
namespace {

absl::Status NotTaken() {
  return absl::UnimplementedError(
      "this model takes neither sparse tables nor the data readers' batches");
}

}  // namespace

absl::StatusOr<std::vector<std::vector<uint64_t>>>
TrainableModel::PrepareSparse(const data::Batch&) {
  return NotTaken();
}
absl::Status TrainableModel::SetSparseRows(int, absl::Span<const float>) {
  return NotTaken();
}
absl::StatusOr<float> TrainableModel::TrainDataBatch(const data::Batch&,
                                                     const ModelStepHooks&) {
  return NotTaken();
}
absl::Status TrainableModel::GetSparseGradient(int, absl::Span<float>) {
  return NotTaken();
}
absl::StatusOr<ModelEvaluation> TrainableModel::EvaluateDataBatch(
    const data::Batch&) {
  return NotTaken();
}

}  // namespace ps::worker
