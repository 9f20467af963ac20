#include "worker/loop/sparse_step.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::worker {
namespace {

std::vector<absl::Span<float>> Views(std::vector<std::vector<float>>& v) {
  std::vector<absl::Span<float>> out;
  out.reserve(v.size());
  for (std::vector<float>& b : v) out.push_back(absl::MakeSpan(b));
  return out;
}

}  // namespace

SparseStepper::SparseStepper(TrainableModel& model,
                             client::ParameterAccess& access,
                             SparseStepperOptions options)
    : model_(model),
      access_(access),
      clock_(options.clock),
      overlap_(options.overlap) {
  for (const ParameterInfo& p : model_.parameters()) {
    weights_.emplace_back(static_cast<size_t>(p.size));
    grads_.emplace_back(static_cast<size_t>(p.size));
    if (overlap_) incoming_weights_.emplace_back(static_cast<size_t>(p.size));
  }
  const size_t tables = model_.sparse_tables().size();
  for (auto* v :
       {&rows_, &row_grads_, &arrived_.rows, &later_.rows, &flight_.rows}) {
    v->resize(tables);
  }
}

SparseStepper::~SparseStepper() {
  if (pending_.has_value()) access_.CancelCalls();
}

void SparseStepper::Size(std::vector<std::vector<float>>& rows,
                         const std::vector<std::vector<uint64_t>>& keys) const {
  const std::vector<SparseTableInfo>& tables = model_.sparse_tables();
  for (size_t t = 0; t < keys.size(); ++t) {
    rows[t].resize(keys[t].size() * static_cast<size_t>(tables[t].dim));
  }
}

absl::Status SparseStepper::PullFor(int64_t clock, bool weights, bool rows) {
  if (!weights && !rows) return absl::OkStatus();
  // The weights and every table's rows in one call (the shards asked in
  // parallel).
  client::PullArgs pull;
  pull.clock = clock;
  if (weights) pull.tensors = Views(weights_);
  if (rows) {
    Size(rows_, keys_);
    for (size_t t = 0; t < keys_.size(); ++t) {
      pull.rows.push_back(
          {static_cast<int>(t), keys_[t], absl::MakeSpan(rows_[t])});
    }
  }
  PS_ASSIGN_OR_RETURN(const client::CallResult pulled,
                      access_.Pull(std::move(pull)).Wait());
  if (weights) {
    version_ = pulled.version;
    weights_clock_ = clock;
  }
  return absl::OkStatus();
}

absl::Status SparseStepper::AwaitPending() {
  if (!pending_.has_value()) return absl::OkStatus();
  client::Handle pending = *std::move(pending_);
  pending_.reset();
  absl::StatusOr<client::CallResult> end = pending.Wait();
  if (!end.ok()) {
    access_.CancelCalls();
    Forget();
    return end.status();
  }
  std::swap(weights_, incoming_weights_);
  version_ = end->version;
  // Rows for a step after the next one (a Drain between steps) wait their
  // turn.
  std::swap(arrived_.clock < 0 ? arrived_ : later_, flight_);
  flight_.clock = -1;
  carried_staleness_ += end->staleness;
  carried_ends_++;
  return absl::OkStatus();
}

absl::Status SparseStepper::Drain() { return AwaitPending(); }

absl::StatusOr<int64_t> SparseStepper::Join(int64_t clock) {
  client::PullArgs pull;
  pull.clock = clock;
  pull.tensors = Views(weights_);
  pull.current = true;
  PS_ASSIGN_OR_RETURN(const client::CallResult pulled,
                      access_.Pull(std::move(pull)).Wait());
  version_ = pulled.version;
  weights_clock_ = pulled.version;
  return pulled.version;
}

void SparseStepper::SkipTo(int64_t clock) {
  if (weights_clock_ >= 0 && version_ >= clock) weights_clock_ = clock;
}

void SparseStepper::Forget() {
  weights_clock_ = arrived_.clock = later_.clock = flight_.clock = -1;
}

absl::StatusOr<SparseStepResult> SparseStepper::Step(
    int64_t clock, const data::Batch& batch,
    const std::vector<const data::Batch*>& ahead,
    const std::function<void()>& in_flight) {
  SparseStepResult result;
  // What was fetched for this step is used once (with overlap, weights
  // serve every later step until newer ones arrive).
  const bool have_weights = overlap_
                                ? weights_clock_ >= 0 && weights_clock_ <= clock
                                : weights_clock_ == clock;
  const bool rows_ahead = arrived_.clock == clock;
  if (!overlap_) weights_clock_ = -1;
  arrived_.clock = -1;

  const absl::Time start = clock_->Now();
  PS_ASSIGN_OR_RETURN(keys_, model_.PrepareSparse(batch));
  if (keys_.size() != model_.sparse_tables().size()) {
    return absl::InternalError(absl::StrCat("the model named the keys of ",
                                            keys_.size(), " tables; it reads ",
                                            model_.sparse_tables().size()));
  }
  const bool have_rows = rows_ahead && arrived_.keys == keys_;
  if (have_rows) std::swap(rows_, arrived_.rows);
  if (later_.clock > clock) std::swap(arrived_, later_);
  later_.clock = -1;
  PS_RETURN_IF_ERROR(PullFor(clock, !have_weights, !have_rows));
  const int64_t base_version = version_;
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
  // The last step's end (overlap) is over before its buffers take this
  // step's gradients.
  const absl::Time trained = clock_->Now();
  PS_RETURN_IF_ERROR(AwaitPending());
  const absl::Duration awaited = clock_->Now() - trained;
  for (int i = 0; i < model_.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(
        model_.GetGradientRange(i, 0, absl::MakeSpan(grads_[i])));
  }
  Size(row_grads_, keys_);
  for (size_t t = 0; t < keys_.size(); ++t) {
    PS_RETURN_IF_ERROR(model_.GetSparseGradient(static_cast<int>(t),
                                                absl::MakeSpan(row_grads_[t])));
  }
  // The keys of the batch whose rows this step's end asks for (the model's
  // sparse inputs move on to it: this step has read all it needs). One the
  // model refuses is not asked for: its own step reports why.
  const std::vector<std::vector<uint64_t>>* ahead_keys = nullptr;
  const size_t want = static_cast<size_t>(lookahead());
  if (ahead.size() >= want && ahead[want - 1] != nullptr) {
    absl::StatusOr<std::vector<std::vector<uint64_t>>> k =
        model_.PrepareSparse(*ahead[want - 1]);
    if (k.ok() && k->size() == keys_.size()) {
      flight_.keys = *std::move(k);
      ahead_keys = &flight_.keys;
    }
  }
  const absl::Time computed = clock_->Now();
  result.compute = computed - pulled - awaited;

  absl::Status sent = SendEnd(clock, base_version, ahead.empty(), ahead_keys,
                              in_flight, &result.in_flight);
  if (!sent.ok()) {
    // Nothing may touch this stepper's buffers once the error is out.
    access_.CancelCalls();
    pending_.reset();
    Forget();
    return sent;
  }
  result.next_version = std::exchange(next_version_, -1);
  result.staleness = std::exchange(carried_staleness_, 0);
  result.staleness_ends = std::exchange(carried_ends_, 0);
  result.push = clock_->Now() - computed - result.in_flight + awaited;
  return result;
}

absl::Status SparseStepper::SendEnd(
    int64_t clock, int64_t base_version, bool last,
    const std::vector<std::vector<uint64_t>>* ahead_keys,
    const std::function<void()>& in_flight, absl::Duration* in_flight_time) {
  // The pushes read their keys until the end is over; the next step names
  // its own in keys_.
  std::swap(pushed_keys_, keys_);
  std::vector<client::SparsePush> pushes;
  for (size_t t = 0; t < pushed_keys_.size(); ++t) {
    pushes.push_back({static_cast<int>(t), pushed_keys_[t], row_grads_[t]});
  }
  std::vector<client::SparsePull> pulls;
  if (ahead_keys != nullptr) {
    Size(flight_.rows, *ahead_keys);
    for (size_t t = 0; t < ahead_keys->size(); ++t) {
      pulls.push_back({static_cast<int>(t), (*ahead_keys)[t],
                       absl::MakeSpan(flight_.rows[t])});
    }
  }
  const auto run_in_flight = [&] {
    if (!in_flight) return;
    const absl::Time t = clock_->Now();
    in_flight();
    *in_flight_time = clock_->Now() - t;
  };
  client::StepArgs step;
  step.clock = clock;
  step.base_version = base_version;
  std::vector<absl::Span<const float>> grads;
  for (std::vector<float>& g : grads_) grads.push_back(g);
  step.dense = client::WholeTensors(grads);
  step.rows = std::move(pushes);
  step.next_rows = std::move(pulls);

  if (overlap_) {
    // Everything travels with the end of step, which brings the weights
    // the step after next computes on.
    step.next_weights = Views(incoming_weights_);
    pending_ = access_.EndStep(std::move(step));
    flight_.clock = ahead_keys != nullptr ? clock + 2 : -1;
    run_in_flight();
    // The last step's end is waited for.
    return last ? AwaitPending() : absl::OkStatus();
  }

  PS_RETURN_IF_ERROR(access_.Push(std::move(step)));
  run_in_flight();
  client::StepArgs end;
  end.clock = clock;
  end.base_version = base_version;
  if (!last) end.next_weights = Views(weights_);
  PS_ASSIGN_OR_RETURN(const client::CallResult ended,
                      access_.EndStep(std::move(end)).Wait());
  carried_staleness_ += ended.staleness;
  carried_ends_++;
  if (last) return absl::OkStatus();
  version_ = ended.version;
  next_version_ = ended.version;
  weights_clock_ = clock + 1;
  if (ahead_keys != nullptr) {
    std::swap(arrived_, flight_);
    arrived_.clock = clock + 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseStepResult> RunSparseStep(TrainableModel& model,
                                               client::ParameterAccess& access,
                                               int64_t clock,
                                               const data::Batch& batch) {
  return SparseStepper(model, access).Step(clock, batch, {});
}

}  // namespace ps::worker
