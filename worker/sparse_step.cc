#include "worker/sparse_step.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/sparse_row_access.h"

namespace ps::worker {
namespace {

std::vector<absl::Span<float>> Views(std::vector<std::vector<float>>& v) {
  std::vector<absl::Span<float>> out;
  out.reserve(v.size());
  for (std::vector<float>& b : v) out.push_back(absl::MakeSpan(b));
  return out;
}

}  // namespace

SparseStepper::SparseStepper(TrainableModel& model, ParameterAccess& access,
                             const Clock* clock)
    : model_(model), access_(access), clock_(clock) {
  for (const ParameterInfo& p : model_.parameters()) {
    weights_.emplace_back(static_cast<size_t>(p.size));
    grads_.emplace_back(static_cast<size_t>(p.size));
  }
  const size_t tables = model_.sparse_tables().size();
  rows_.resize(tables);
  row_grads_.resize(tables);
  next_rows_.resize(tables);
}

absl::Status SparseStepper::PullFor(int64_t clock, bool weights, bool rows) {
  if (weights) {
    PS_ASSIGN_OR_RETURN(version_, access_.Pull(clock, Views(weights_)));
  }
  if (!rows) return absl::OkStatus();
  const std::vector<SparseTableInfo>& tables = model_.sparse_tables();
  for (size_t t = 0; t < keys_.size(); ++t) {
    rows_[t].resize(keys_[t].size() * static_cast<size_t>(tables[t].dim));
  }
  if (SparseRowAccess* access = SparseRowsOf(&access_)) {
    // Every table's rows in one call (the shards asked in parallel).
    std::vector<client::SparsePull> pulls;
    for (size_t t = 0; t < keys_.size(); ++t) {
      pulls.push_back(
          {static_cast<int>(t), keys_[t], absl::MakeSpan(rows_[t])});
    }
    return access->PullRows(clock, std::move(pulls)).status();
  }
  for (size_t t = 0; t < keys_.size(); ++t) {
    PS_RETURN_IF_ERROR(access_.PullSparse(clock, static_cast<int>(t), keys_[t],
                                          absl::MakeSpan(rows_[t])));
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseStepResult> SparseStepper::Step(
    int64_t clock, const data::Batch& batch, const data::Batch* next,
    const std::function<void()>& in_flight) {
  SparseStepResult result;
  // What was fetched for this step is used once; an error leaves nothing.
  const bool have_weights = weights_clock_ == clock;
  const bool rows_ahead = next_rows_clock_ == clock;
  weights_clock_ = -1;
  next_rows_clock_ = -1;

  const absl::Time start = clock_->Now();
  PS_ASSIGN_OR_RETURN(keys_, model_.PrepareSparse(batch));
  if (keys_.size() != model_.sparse_tables().size()) {
    return absl::InternalError(absl::StrCat("the model named the keys of ",
                                            keys_.size(), " tables; it reads ",
                                            model_.sparse_tables().size()));
  }
  const bool have_rows = rows_ahead && next_keys_ == keys_;
  if (have_rows) std::swap(rows_, next_rows_);
  PS_RETURN_IF_ERROR(PullFor(clock, !have_weights, !have_rows));
  const absl::Time pulled = clock_->Now();
  result.pull = pulled - start;

  for (int i = 0; i < model_.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(model_.SetParameterRange(i, 0, weights_[i]));
  }
  for (size_t t = 0; t < keys_.size(); ++t) {
    PS_RETURN_IF_ERROR(model_.SetSparseRows(static_cast<int>(t), rows_[t]));
    result.unique_keys += static_cast<int64_t>(keys_[t].size());
  }
  PS_ASSIGN_OR_RETURN(result.loss, model_.TrainDataBatch(batch, {}));
  for (int i = 0; i < model_.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(
        model_.GetGradientRange(i, 0, absl::MakeSpan(grads_[i])));
  }
  const std::vector<SparseTableInfo>& tables = model_.sparse_tables();
  for (size_t t = 0; t < keys_.size(); ++t) {
    row_grads_[t].resize(keys_[t].size() * static_cast<size_t>(tables[t].dim));
    PS_RETURN_IF_ERROR(model_.GetSparseGradient(static_cast<int>(t),
                                                absl::MakeSpan(row_grads_[t])));
  }
  // The next batch's keys (the model's sparse inputs move on to it; this
  // step has read everything it needs).
  // A next batch the model refuses is not fetched for: its own step
  // reports why.
  const std::vector<std::vector<uint64_t>>* next_keys = nullptr;
  if (next != nullptr) {
    absl::StatusOr<std::vector<std::vector<uint64_t>>> k =
        model_.PrepareSparse(*next);
    if (k.ok() && k->size() == keys_.size()) {
      next_keys_ = *std::move(k);
      next_keys = &next_keys_;
    }
  }
  const absl::Time computed = clock_->Now();
  result.compute = computed - pulled;

  absl::StatusOr<int64_t> staleness =
      PushAndEnd(clock, next_keys, in_flight, &result.in_flight);
  if (!staleness.ok()) {
    // Nothing may touch this stepper's buffers once the error is out.
    access_.CancelCalls();
    return staleness.status();
  }
  result.staleness = *staleness;
  result.push = clock_->Now() - computed - result.in_flight;
  return result;
}

absl::StatusOr<int64_t> SparseStepper::PushAndEnd(
    int64_t clock, const std::vector<std::vector<uint64_t>>* next_keys,
    const std::function<void()>& in_flight, absl::Duration* in_flight_time) {
  for (int i = 0; i < model_.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(access_.Push(clock, version_, i, grads_[i]));
  }
  SparseRowAccess* rows = SparseRowsOf(&access_);
  if (rows != nullptr) {
    std::vector<client::SparsePush> pushes;
    for (size_t t = 0; t < keys_.size(); ++t) {
      pushes.push_back({static_cast<int>(t), keys_[t], row_grads_[t]});
    }
    if (next_keys != nullptr) {
      const std::vector<SparseTableInfo>& tables = model_.sparse_tables();
      std::vector<client::SparsePull> pulls;
      for (size_t t = 0; t < next_keys->size(); ++t) {
        next_rows_[t].resize((*next_keys)[t].size() *
                             static_cast<size_t>(tables[t].dim));
        pulls.push_back({static_cast<int>(t), (*next_keys)[t],
                         absl::MakeSpan(next_rows_[t])});
      }
      PS_RETURN_IF_ERROR(rows->PushRowsAndPull(
          clock, version_, std::move(pushes), std::move(pulls)));
    } else {
      PS_RETURN_IF_ERROR(rows->PushRows(clock, version_, std::move(pushes)));
    }
  } else {
    for (size_t t = 0; t < keys_.size(); ++t) {
      PS_RETURN_IF_ERROR(access_.PushSparse(
          clock, version_, static_cast<int>(t), keys_[t], row_grads_[t]));
    }
  }
  if (in_flight) {
    const absl::Time t = clock_->Now();
    in_flight();
    *in_flight_time = clock_->Now() - t;
  }
  if (next_keys == nullptr) return access_.Finish(clock);
  PS_ASSIGN_OR_RETURN(const ParameterAccess::StepEnd end,
                      access_.FinishAndPull(clock, Views(weights_)));
  version_ = end.version;
  weights_clock_ = clock + 1;
  if (rows != nullptr) next_rows_clock_ = clock + 1;
  return end.staleness;
}

absl::StatusOr<SparseStepResult> RunSparseStep(TrainableModel& model,
                                               ParameterAccess& access,
                                               int64_t clock,
                                               const data::Batch& batch) {
  return SparseStepper(model, access).Step(clock, batch, nullptr);
}

}  // namespace ps::worker
