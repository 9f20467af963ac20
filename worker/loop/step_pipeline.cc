#include "worker/loop/step_pipeline.h"

#include <algorithm>
#include <utility>

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
      clock_(options_.start_clock) {}

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
  seen_.staleness += static_cast<double>(end.staleness);
  seen_.staleness_ends++;
  version_ = end.version;
  return CatchUp();
}

absl::StatusOr<bool> StepPipeline::AwaitIncoming() {
  client::Handle in = *std::move(incoming_);
  incoming_.reset();
  absl::StatusOr<client::CallResult> end = in.Wait();
  if (!end.ok()) return end.status();
  return Arrived(*end);
}

absl::StatusOr<bool> StepPipeline::Pull(bool all_weights) {
  version_ = 0;
  if (incoming_.has_value() && all_weights) {
    PS_ASSIGN_OR_RETURN(const bool more, AwaitIncoming());
    if (!more) return false;
    PS_RETURN_IF_ERROR(staging_.LoadAll());
  }
  arriving_ = incoming_.has_value();
  // Arriving: awaited part by part in Compute().
  if (arriving_) return true;
  if (prefetched_) {
    version_ = prefetched_version_;
    prefetched_ = false;
  } else {
    PS_ASSIGN_OR_RETURN(version_, PullInto(staging_.Weights()));
  }
  if (!CatchUp()) return false;
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

absl::StatusOr<std::optional<float>> StepPipeline::Compute(const Batch& batch) {
  const absl::Time start = options_.clock->Now();
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

absl::Status StepPipeline::EndStep() {
  const bool last = clock_ + 1 >= total_steps_;
  if (overlap_ != nullptr) {
    PS_ASSIGN_OR_RETURN(const OverlapStepEnd::Ended ended,
                        overlap_->EndStep(clock_, version_, last));
    seen_.staleness += ended.staleness;
    seen_.staleness_ends += ended.staleness_ends;
    prefetched_version_ = ended.next_version;
    prefetched_ = !last;
    return absl::OkStatus();
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
  PS_ASSIGN_OR_RETURN(const client::CallResult ended,
                      params_->EndStep(std::move(end)).Wait());
  seen_.staleness += static_cast<double>(ended.staleness);
  seen_.staleness_ends++;
  return absl::OkStatus();
}

StepObservations StepPipeline::TakeObservations() {
  return std::exchange(seen_, StepObservations());
}

absl::Status StepPipeline::Drain() {
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
