#include "worker/loop/step_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::worker {

std::vector<int64_t> FirstLayerRowSplits(const std::vector<int64_t>& parts,
                                         const std::vector<int64_t>& shape) {
  // Blocks of fewer bytes cost more in messages than they gain in overlap
  // (tools/train_bench: 4 blocks of 200 KB were slower than 2 of 400 KB at
  // batch 128); more blocks than this gain little.
  constexpr int64_t kMinBlockBytes = 384 << 10;
  constexpr int64_t kMaxBlocks = 8;
  if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) return {};
  std::vector<int64_t> rows;
  for (int64_t e : parts) {
    if (e % shape[1] == 0 && e / shape[1] > 0 && e / shape[1] < shape[0]) {
      rows.push_back(e / shape[1]);
    }
  }
  const int64_t bytes = shape[0] * shape[1] * int64_t{sizeof(float)};
  const int64_t max_blocks =
      std::max<int64_t>(1, std::min(kMaxBlocks, bytes / kMinBlockBytes));
  const int64_t blocks = static_cast<int64_t>(rows.size()) + 1;
  if (blocks <= max_blocks) return rows;
  // Every k-th boundary, k = ceil(blocks / max_blocks).
  const size_t k = static_cast<size_t>((blocks + max_blocks - 1) / max_blocks);
  std::vector<int64_t> out;
  for (size_t i = k - 1; i < rows.size(); i += k) out.push_back(rows[i]);
  return out;
}

int64_t CatchUpClock(bool bsp, int64_t clock, int64_t version) {
  return bsp && version > clock ? version : clock;
}

Slowdown SlowdownFor(const JobSpec& spec, int rank) {
  Slowdown s;
  for (const StragglerInjection& i : spec.stragglers()) {
    if (i.worker_rank() != rank) continue;
    if (i.compute_factor() > 1) s.compute_factor = i.compute_factor();
    s.extra_delay += absl::Milliseconds(i.delay_ms());
  }
  return s;
}

StepPipeline::StepPipeline(TrainableModel* model,
                           client::ParameterAccess* params,
                           StepPipelineOptions options, bool direct)
    : model_(model),
      params_(params),
      options_(std::move(options)),
      staging_(model, direct),
      clock_(options_.start_clock),
      sparse_(!model->sparse_tables().empty()) {
  const size_t tables = model->sparse_tables().size();
  for (auto* v : {&row_grads_[0], &row_grads_[1], &pulled_rows_, &arrived_.rows,
                  &later_.rows, &flight_[0].rows, &flight_[1].rows}) {
    v->resize(tables);
  }
}

int StepPipeline::lookahead() const {
  if (!sparse_) return 0;
  return options_.overlap ? 2 : 1;
}

absl::StatusOr<std::unique_ptr<StepPipeline>> StepPipeline::Create(
    TrainableModel* model, kernels::Backend* backend,
    client::ParameterAccess* params, StepPipelineOptions options) {
  // On a host-memory backend the pulls land in the model's own parameter
  // buffers and pushes read its gradient buffers: no staging copies.
  std::unique_ptr<StepPipeline> p(new StepPipeline(
      model, params, std::move(options), backend->HostAddressable()));
  if (p->options_.overlap) {
    PS_ASSIGN_OR_RETURN(p->overlap_, OverlapStepEnd::Create(
                                         model, backend, &p->staging_, params));
    return p;
  }
  // Splittable weights in row blocks at the parameter servers' chunk
  // boundaries: forward starts on the first rows that arrive, backward
  // sends its first blocks while it computes the next.
  p->row_splits_.resize(model->num_parameters());
  for (int i = 0; i < model->num_parameters(); ++i) {
    if (!model->SplitsRows(i)) continue;
    p->row_splits_[i] = FirstLayerRowSplits(params->PartBoundaries(i),
                                            model->parameters()[i].shape);
  }
  return p;
}

// On every way out (a stop, an error), the calls still in flight are ended
// before the model's and the staging buffers are freed.
StepPipeline::~StepPipeline() { params_->CancelCalls(); }

bool StepPipeline::CatchUp() {
  const int64_t clock = CatchUpClock(options_.bsp, clock_, version_);
  skipped_steps_ += clock - clock_;
  clock_ = clock;
  return clock_ < total_steps_;
}

absl::Status StepPipeline::Join() {
  if (!options_.bsp || incoming_.has_value() || prefetched_) {
    return absl::OkStatus();
  }
  client::PullArgs pull;
  pull.clock = clock_;
  pull.tensors = staging_.Weights();
  pull.current = true;
  PS_ASSIGN_OR_RETURN(const client::CallResult pulled,
                      params_->Pull(std::move(pull)).Wait());
  prefetched_version_ = pulled.version;
  prefetched_ = true;
  skipped_steps_ += std::max<int64_t>(0, prefetched_version_ - clock_);
  clock_ = prefetched_version_;
  return absl::OkStatus();
}

bool StepPipeline::Arrived(const client::CallResult& end) {
  RowsArrived(clock_ - 1);
  seen_.staleness += static_cast<double>(end.staleness);
  seen_.staleness_ends++;
  version_ = end.version;
  return CatchUp();
}

absl::StatusOr<bool> StepPipeline::AwaitIncoming() {
  client::Handle in = *std::move(incoming_);
  incoming_.reset();
  absl::StatusOr<client::CallResult> end = in.Wait();
  if (!end.ok()) {
    Forget();
    return end.status();
  }
  return Arrived(*end);
}

absl::StatusOr<bool> StepPipeline::Pull(bool all_weights) {
  version_ = 0;
  // A sparse model's rows come with the end on its way, whole.
  bool have = false;
  if (incoming_.has_value() && (all_weights || sparse_)) {
    PS_ASSIGN_OR_RETURN(const bool more, AwaitIncoming());
    if (!more) return false;
    have = true;
  }
  // The evaluation that follows uses the access for its rows.
  if (overlap_ != nullptr && all_weights && sparse_) {
    PS_RETURN_IF_ERROR(DrainOverlap());
  }
  arriving_ = incoming_.has_value();
  // Arriving: awaited part by part in Compute().
  if (arriving_) return true;
  if (!have) {
    if (prefetched_) {
      version_ = prefetched_version_;
      prefetched_ = false;
    } else {
      PS_ASSIGN_OR_RETURN(version_, PullInto(staging_.Weights()));
    }
    if (!CatchUp()) return false;
  }
  PS_RETURN_IF_ERROR(staging_.LoadAll());
  return true;
}

absl::Status StepPipeline::BeforeUse(int index, int64_t begin, int64_t end) {
  if (!incoming_.has_value()) return absl::OkStatus();
  const absl::Time w0 = options_.clock->Now();
  absl::Status s = incoming_->AwaitPart(index, begin, end);
  seen_.awaited += options_.clock->Now() - w0;
  PS_RETURN_IF_ERROR(s);
  return staging_.Load(index, begin, end);
}

absl::Status StepPipeline::BeforeBackward(bool* finished) {
  const absl::Time w0 = options_.clock->Now();
  absl::StatusOr<bool> more = AwaitIncoming();
  seen_.awaited += options_.clock->Now() - w0;
  PS_RETURN_IF_ERROR(more.status());
  if (!*more) {
    *finished = true;
    return absl::CancelledError("the job's steps are done");
  }
  return absl::OkStatus();
}

void StepPipeline::PushPart(int index, int64_t begin, int64_t end,
                            absl::Status* status) {
  if (!status->ok()) return;
  absl::StatusOr<absl::Span<const float>> g =
      staging_.Gradient(index, begin, end);
  if (!g.ok()) {
    *status = g.status();
    return;
  }
  // The push asks back its chunks' next weights, which land while backward
  // still runs (the step no longer reads a tensor once its gradient is
  // handed out: ModelStepHooks::on_gradient_part).
  client::StepArgs push;
  push.clock = clock_;
  push.base_version = version_;
  push.dense = {{.tensor_index = index, .grad = *g, .offset = begin}};
  push.next_weights = staging_.Weights();
  *status = params_->Push(std::move(push));
}

absl::StatusOr<std::optional<float>> StepPipeline::Compute(
    const data::Batch& batch) {
  const absl::Time start = options_.clock->Now();
  if (sparse_) PS_RETURN_IF_ERROR(LoadRows(batch));
  const bool slowed = options_.slowdown.slowed();
  absl::Status push_status;
  struct Part {
    int index;
    int64_t begin, end;
  };
  std::vector<Part> held;  // a slowed worker sends after its delay
  bool finished = false;   // the job's steps ended under this one
  ModelStepHooks hooks;
  hooks.row_splits = row_splits_;
  if (arriving_) {
    hooks.before_use = [this](int index, int64_t begin, int64_t end) {
      return BeforeUse(index, begin, end);
    };
    hooks.before_backward = [this, &finished] {
      return BeforeBackward(&finished);
    };
  }
  if (!options_.overlap) {
    hooks.on_gradient_part = [&](int index, int64_t begin, int64_t end) {
      slowed ? held.push_back({index, begin, end})
             : PushPart(index, begin, end, &push_status);
    };
  }
  absl::StatusOr<float> loss = model_->TrainStep(batch, hooks);
  if (finished) return std::nullopt;
  PS_RETURN_IF_ERROR(loss.status());
  if (slowed) {
    const absl::Duration computed =
        options_.clock->Now() - start - seen_.awaited;
    options_.sleep(options_.slowdown.Delay(computed));
    for (const Part& p : held) PushPart(p.index, p.begin, p.end, &push_status);
  }
  PS_RETURN_IF_ERROR(push_status);
  return *loss;
}

absl::Status StepPipeline::EndStep(const data::Batch* ahead) {
  const bool last = clock_ + 1 >= total_steps_;
  std::vector<client::SparsePush> rows;
  std::vector<client::SparsePull> next_rows;
  if (sparse_) {
    if (absl::Status s = TakeRows(ahead, last, &rows, &next_rows); !s.ok()) {
      Forget();
      return s;
    }
  }
  if (overlap_ != nullptr) {
    absl::StatusOr<OverlapStepEnd::Ended> ended = overlap_->EndStep(
        clock_, version_, last, std::move(rows), std::move(next_rows));
    if (!ended.ok()) {
      // Nothing may touch the buffers once the error is out.
      params_->CancelCalls();
      Forget();
      return ended.status();
    }
    // The end before this one is over (waited for inside).
    if (overlap_end_clock_ >= 0) RowsArrived(overlap_end_clock_);
    overlap_end_clock_ = last ? -1 : clock_;
    seen_.staleness += ended->staleness;
    seen_.staleness_ends += ended->staleness_ends;
    prefetched_version_ = ended->next_version;
    prefetched_ = !last;
    return absl::OkStatus();
  }
  if (!rows.empty() || !next_rows.empty()) {
    // The rows go first; their answers bring the rows ahead.
    client::StepArgs push;
    push.clock = clock_;
    push.base_version = version_;
    push.rows = std::move(rows);
    push.next_rows = std::move(next_rows);
    if (!last) push.next_weights = staging_.Weights();
    if (absl::Status s = params_->Push(std::move(push)); !s.ok()) {
      params_->CancelCalls();
      Forget();
      return s;
    }
  }
  client::StepArgs end;
  end.clock = clock_;
  end.base_version = version_;
  if (!last) {
    // The next step waits for these weights part by part.
    end.next_weights = staging_.Weights();
    incoming_ = params_->EndStep(std::move(end));
    return absl::OkStatus();
  }
  absl::StatusOr<client::CallResult> ended =
      params_->EndStep(std::move(end)).Wait();
  if (!ended.ok()) {
    Forget();
    return ended.status();
  }
  seen_.staleness += static_cast<double>(ended->staleness);
  seen_.staleness_ends++;
  return absl::OkStatus();
}

void StepPipeline::Size(std::vector<std::vector<float>>& rows,
                        const std::vector<std::vector<uint64_t>>& keys) const {
  const std::vector<SparseTableInfo>& tables = model_->sparse_tables();
  for (size_t t = 0; t < keys.size(); ++t) {
    rows[t].resize(keys[t].size() * static_cast<size_t>(tables[t].dim));
  }
}

absl::Status StepPipeline::LoadRows(const data::Batch& batch) {
  std::vector<std::vector<uint64_t>>& keys = keys_[clock_ & 1];
  PS_ASSIGN_OR_RETURN(keys, model_->PrepareSparse(batch));
  if (keys.size() != model_->sparse_tables().size()) {
    return absl::InternalError(absl::StrCat("the model named the keys of ",
                                            keys.size(), " tables; it reads ",
                                            model_->sparse_tables().size()));
  }
  // What arrived for this step is used once; rows a Drain brought for the
  // step after are next.
  const bool have = arrived_.clock == clock_ && arrived_.keys == keys;
  if (have) {
    for (size_t t = 0; t < keys.size(); ++t) {
      PS_RETURN_IF_ERROR(
          model_->SetSparseRows(static_cast<int>(t), arrived_.rows[t]));
    }
  }
  arrived_.clock = -1;
  if (later_.clock > clock_) std::swap(arrived_, later_);
  later_.clock = -1;
  if (have) return absl::OkStatus();
  // Every table's rows in one call (the shards asked in parallel).
  Size(pulled_rows_, keys);
  client::PullArgs pull;
  pull.clock = clock_;
  for (size_t t = 0; t < keys.size(); ++t) {
    pull.rows.push_back(
        {static_cast<int>(t), keys[t], absl::MakeSpan(pulled_rows_[t])});
  }
  const absl::Time w0 = options_.clock->Now();
  absl::Status s = params_->Pull(std::move(pull)).Wait().status();
  seen_.awaited += options_.clock->Now() - w0;
  PS_RETURN_IF_ERROR(s);
  for (size_t t = 0; t < keys.size(); ++t) {
    PS_RETURN_IF_ERROR(
        model_->SetSparseRows(static_cast<int>(t), pulled_rows_[t]));
  }
  return absl::OkStatus();
}

absl::Status StepPipeline::TakeRows(const data::Batch* ahead, bool last,
                                    std::vector<client::SparsePush>* pushes,
                                    std::vector<client::SparsePull>* pulls) {
  const int parity = static_cast<int>(clock_ & 1);
  const std::vector<std::vector<uint64_t>>& keys = keys_[parity];
  std::vector<std::vector<float>>& grads = row_grads_[parity];
  Size(grads, keys);
  for (size_t t = 0; t < keys.size(); ++t) {
    PS_RETURN_IF_ERROR(model_->GetSparseGradient(static_cast<int>(t),
                                                 absl::MakeSpan(grads[t])));
    pushes->push_back({static_cast<int>(t), keys[t], grads[t]});
  }
  // The model's sparse inputs move on to the batch ahead (this step has
  // read all it needs). One the model refuses is not asked for: its own
  // step reports why.
  Rows& flight = flight_[parity];
  flight.clock = -1;
  if (last || ahead == nullptr) return absl::OkStatus();
  absl::StatusOr<std::vector<std::vector<uint64_t>>> k =
      model_->PrepareSparse(*ahead);
  if (!k.ok() || k->size() != keys.size()) return absl::OkStatus();
  flight.keys = *std::move(k);
  flight.clock = clock_ + lookahead();
  Size(flight.rows, flight.keys);
  for (size_t t = 0; t < flight.keys.size(); ++t) {
    pulls->push_back(
        {static_cast<int>(t), flight.keys[t], absl::MakeSpan(flight.rows[t])});
  }
  return absl::OkStatus();
}

void StepPipeline::RowsArrived(int64_t clock) {
  if (clock < 0) return;
  Rows& flight = flight_[clock & 1];
  if (flight.clock < 0) return;
  std::swap(arrived_, flight);
  flight.clock = -1;
}

absl::Status StepPipeline::DrainOverlap() {
  absl::StatusOr<OverlapStepEnd::Ended> ended = overlap_->Drain();
  if (!ended.ok()) {
    params_->CancelCalls();
    Forget();
    return ended.status();
  }
  if (ended->next_version < 0) return absl::OkStatus();
  seen_.staleness += ended->staleness;
  seen_.staleness_ends += ended->staleness_ends;
  // Its weights serve the next steps; the rows it brought are for the
  // step after next.
  prefetched_version_ = ended->next_version;
  if (overlap_end_clock_ >= 0) {
    Rows& flight = flight_[overlap_end_clock_ & 1];
    std::swap(later_, flight);
    flight.clock = -1;
  }
  overlap_end_clock_ = -1;
  return staging_.LoadAll();
}

void StepPipeline::Forget() {
  arrived_.clock = later_.clock = flight_[0].clock = flight_[1].clock = -1;
  overlap_end_clock_ = -1;
}

StepObservations StepPipeline::TakeObservations() {
  return std::exchange(seen_, StepObservations());
}

absl::Status StepPipeline::Drain() {
  if (overlap_ != nullptr) PS_RETURN_IF_ERROR(DrainOverlap());
  if (!incoming_.has_value()) return absl::OkStatus();
  PS_RETURN_IF_ERROR(incoming_->Wait().status());
  incoming_.reset();
  return absl::OkStatus();
}

absl::Status StepPipeline::PullWeights() {
  PS_RETURN_IF_ERROR(PullInto(staging_.Weights()).status());
  return staging_.LoadAll();
}

absl::StatusOr<int64_t> StepPipeline::PullInto(
    std::vector<absl::Span<float>> tensors) {
  client::PullArgs pull;
  pull.clock = clock_;
  pull.tensors = std::move(tensors);
  PS_ASSIGN_OR_RETURN(const client::CallResult pulled,
                      params_->Pull(std::move(pull)).Wait());
  return pulled.version;
}

}  // namespace ps::worker
