#include "server/shard/dense_table.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/status.h"
#include "common/spec/initializer.h"
#include "common/spec/model.h"
#include "server/shard/dense_gradient.h"
#include "server/shard/vector_clones.h"

namespace ps::server {

struct DenseChunk {
  // A worker's gradient of the open step.
  struct StagedGrad {
    int64_t step = -1;
    std::vector<float> grad;
    bool final = false;  // pushed with chunks_final
  };

  explicit DenseChunk(const Chunk& c) : chunk(c) {}
  const Chunk chunk;
  absl::Mutex mu;
  // The published weights, never written once a pull may hold them.
  std::shared_ptr<std::vector<float>> weights ABSL_GUARDED_BY(mu);
  // The previous buffer, reused for the next update when no pull holds it.
  std::shared_ptr<std::vector<float>> spare ABSL_GUARDED_BY(mu);
  OptimizerSlots slots ABSL_GUARDED_BY(mu);
  // BSP: each worker's gradient of the open step, merged when it closes.
  absl::flat_hash_map<int64_t, StagedGrad> staged ABSL_GUARDED_BY(mu);
  // BSP: the step whose update was applied before the step closed (every
  // worker's gradient complete); -1: none. Until it closes, `spare` holds
  // the weights before the update and `pre_slots` the optimizer state, for
  // checkpoints of the open step.
  int64_t early_step ABSL_GUARDED_BY(mu) = -1;
  OptimizerSlots pre_slots ABSL_GUARDED_BY(mu);
  // BSP: the last step whose update this chunk has (early or at the close).
  int64_t applied_step ABSL_GUARDED_BY(mu) = -1;
};

namespace {

// The buffer the chunk's next weights are written into: the previous one
// when no pull holds it any more, else a fresh one.
absl::Span<float> Spare(DenseChunk& chunk)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
  // Only this chunk's lock hands out references, so a count of 1 cannot
  // grow behind our back.
  if (chunk.spare == nullptr || chunk.spare.use_count() != 1) {
    chunk.spare = std::make_shared<std::vector<float>>(chunk.weights->size());
  }
  return absl::MakeSpan(*chunk.spare);
}

// One optimizer step on a chunk, written into the spare buffer, then
// published.
void UpdateChunk(const Optimizer& optimizer, float lr, float scale,
                 absl::Span<const float> grad, DenseChunk& chunk)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
  optimizer.ApplyTo(lr, scale, grad, *chunk.weights, Spare(chunk),
                    &chunk.slots);
  std::swap(chunk.weights, chunk.spare);
}

PS_VECTOR_CLONES void AddLoop(size_t n, const float* __restrict g,
                              float* __restrict d) {
  for (size_t i = 0; i < n; ++i) d[i] += g[i];
}

// The fp32 gradient of chunk `c` of a push: `prepared`, or where that is
// empty (a payload split over receive buffers), the payload gathered into
// this thread's scratch buffer (one chunk at a time, so it stays in cache;
// valid until the next call on this thread).
absl::Span<const float> GradientOf(const PushChunk& c,
                                   absl::Span<const float> prepared) {
  thread_local std::vector<float> scratch;
  if (prepared.data() != nullptr || c.num_elements == 0) return prepared;
  scratch.resize(c.num_elements);
  GatherSegments(c.segments, reinterpret_cast<char*>(scratch.data()));
  return scratch;
}

// BSP: applies `chunk`'s update of `step` now if every worker of `active`
// has staged its complete (final) gradient of it; true if so. With
// `incoming` (a final gradient being pushed by worker `incoming_worker`,
// not staged): that worker's part is `incoming`.
bool ApplyIfComplete(const Optimizer& optimizer, DenseChunk& chunk,
                     int64_t step, absl::Span<const int64_t> active, float lr,
                     int64_t incoming_worker = -1,
                     absl::Span<const float> incoming = {})
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
  if (active.empty() || chunk.applied_step >= step) return false;
  // The gradients in `active`'s order (ascending worker id), so that they
  // are summed in the same order on every replica and in every run.
  std::vector<absl::Span<const float>> grads;
  std::vector<float>* storage = nullptr;  // a staged gradient, summed into
  bool incoming_seen = false;
  for (int64_t w : active) {
    if (w == incoming_worker) {
      grads.push_back(incoming);
      incoming_seen = true;
      continue;
    }
    auto it = chunk.staged.find(w);
    if (it == chunk.staged.end() || it->second.step != step ||
        !it->second.final) {
      return false;
    }
    grads.push_back(it->second.grad);
    if (storage == nullptr) storage = &it->second.grad;
  }
  if (incoming_worker >= 0 && !incoming_seen) {
    return false;  // the incoming worker is not among `active`
  }
  absl::Span<const float> sum = grads[0];
  if (grads.size() > 1) {
    // ((g0 + g1) + g2) ...: into a staged gradient's storage (dropped with
    // the step) when g0 is that one, else into a scratch buffer.
    thread_local std::vector<float> scratch;
    std::vector<float>* acc = storage;
    if (grads[0].data() != storage->data()) {
      scratch.assign(grads[0].begin(), grads[0].end());
      acc = &scratch;
    }
    for (size_t k = 1; k < grads.size(); ++k) {
      AddLoop(acc->size(), grads[k].data(), acc->data());
    }
    sum = *acc;
  }
  // Kept for a checkpoint of the open step: the weights stay in `spare`.
  chunk.pre_slots = chunk.slots;
  UpdateChunk(optimizer, lr, 1.0f / static_cast<float>(active.size()), sum,
              chunk);
  for (auto& [w, grad] : chunk.staged) grad.step = -1;
  chunk.early_step = step;
  chunk.applied_step = step;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DenseTable>> DenseTable::Create(
    const std::string& job_id, const JobSpec& spec,
    std::vector<TensorSpec> tensors, std::shared_ptr<const Placement> placement,
    int shard_index) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                      Optimizer::Create(spec.optimizer()));
  std::unique_ptr<DenseTable> table(
      new DenseTable(job_id, spec, std::move(tensors), std::move(placement),
                     shard_index, std::move(optimizer)));
  const Placement& p = *table->placement_;
  table->local_index_.assign(p.chunks.size(), -1);
  for (int64_t id : p.shard_chunks[shard_index]) {
    const Chunk& c = p.chunks[id];
    table->local_index_[id] = static_cast<int>(table->chunks_.size());
    auto state = std::make_unique<DenseChunk>(c);
    absl::MutexLock cl(&state->mu);
    state->weights = std::make_shared<std::vector<float>>(c.num_elements);
    PS_RETURN_IF_ERROR(InitializeRange(table->tensors_[c.tensor_index],
                                       spec.seed(), c.offset,
                                       absl::MakeSpan(*state->weights)));
    table->optimizer_->InitSlots(c.num_elements, &state->slots);
    table->chunks_.push_back(std::move(state));
  }
  return table;
}

DenseTable::DenseTable(const std::string& job_id, const JobSpec& spec,
                       std::vector<TensorSpec> tensors,
                       std::shared_ptr<const Placement> placement,
                       int shard_index, std::unique_ptr<Optimizer> optimizer)
    : job_id_(job_id),
      shard_index_(shard_index),
      allow_nonfinite_(spec.allow_nonfinite_gradients()),
      optimizer_kind_(spec.optimizer().kind()),
      tensors_(std::move(tensors)),
      placement_(std::move(placement)),
      optimizer_(std::move(optimizer)) {}

DenseTable::~DenseTable() = default;

absl::StatusOr<std::unique_ptr<PreparedGradient>> DenseTable::Prepare(
    const PushArgs& args, bool apply_now) const {
  // The NaN/Inf check in the apply's pass, not a pass of its own.
  const bool checked_apply = apply_now && optimizer_->CanApplyChecked();
  const DenseLayout layout = {job_id_, shard_index_, placement_.get(),
                              local_index_};
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DenseGradient> gradient,
                      PrepareDenseGradient(layout, args.chunks, checked_apply,
                                           allow_nonfinite_));
  return gradient;
}

absl::Status DenseTable::ApplyNow(const PushArgs& args,
                                  PreparedGradient& gradient, UpdateRate rate) {
  auto& g = static_cast<DenseGradient&>(gradient);
  const float lr = optimizer_->LearningRate(rate.step) / rate.divisor;
  if (g.checked_apply) return ApplyChecked(args, lr, g.grads);
  for (size_t i = 0; i < args.chunks.size(); ++i) {
    const PushChunk& c = args.chunks[i];
    const absl::Span<const float> grad = GradientOf(c, g.grads[i]);
    DenseChunk& chunk = *chunks_[local_index_[c.chunk_id]];
    absl::MutexLock cl(&chunk.mu);
    UpdateChunk(*optimizer_, lr, 1.0f, grad, chunk);
  }
  return absl::OkStatus();
}

absl::Status DenseTable::ApplyChecked(
    const PushArgs& args, float lr,
    absl::Span<const absl::Span<const float>> grads)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // chunk locks taken in a loop
  // The chunks' locks in ascending local index, the one order every holder
  // of several takes them in, held until all are published or none is.
  std::vector<int> order(args.chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return local_index_[args.chunks[a].chunk_id] <
           local_index_[args.chunks[b].chunk_id];
  });
  std::vector<DenseChunk*> chunks(args.chunks.size());
  for (int i : order) {
    chunks[i] = chunks_[local_index_[args.chunks[i].chunk_id]].get();
    chunks[i]->mu.Lock();
  }
  int64_t bad_chunk = -1;
  std::vector<OptimizerSlots> before;  // the slots, should a chunk be bad
  for (size_t i = 0; i < args.chunks.size() && bad_chunk < 0; ++i) {
    const PushChunk& c = args.chunks[i];
    DenseChunk& chunk = *chunks[i];
    const absl::Span<float> out = Spare(chunk);
    before.push_back(chunk.slots);
    if (grads[i].data() != nullptr || c.num_elements == 0) {
      // Widened from fp16/bf16 and checked already.
      optimizer_->ApplyTo(lr, 1.0f, grads[i], *chunk.weights, out,
                          &chunk.slots);
      continue;
    }
    const absl::string_view one[] = {c.data};
    const absl::Span<const absl::string_view> segments =
        c.segments.empty() ? absl::MakeConstSpan(one)
                           : absl::MakeConstSpan(c.segments);
    if (!optimizer_->ApplyCheckedTo(lr, 1.0f, segments, *chunk.weights, out,
                                    &chunk.slots) &&
        !allow_nonfinite_) {
      bad_chunk = c.chunk_id;
    }
  }
  if (bad_chunk >= 0) {
    // Nothing was published; the slots go back to how they were.
    for (size_t i = 0; i < before.size(); ++i) {
      chunks[i]->slots = std::move(before[i]);
    }
  } else {
    for (DenseChunk* chunk : chunks) std::swap(chunk->weights, chunk->spare);
  }
  for (DenseChunk* chunk : chunks) chunk->mu.Unlock();
  if (bad_chunk >= 0) {
    return absl::InvalidArgumentError(NonFiniteMessage(bad_chunk));
  }
  return absl::OkStatus();
}

StageResult DenseTable::Stage(const PushArgs& args, PreparedGradient& gradient,
                              const StageRequest& request) {
  auto& g = static_cast<DenseGradient&>(gradient);
  const int64_t step = request.step;
  const absl::Span<const int64_t> active = request.early_workers;
  const bool early = !active.empty();
  const float lr = early ? optimizer_->LearningRate(step) : 0.0f;
  StageResult result;
  for (size_t i = 0; i < args.chunks.size(); ++i) {
    const PushChunk& c = args.chunks[i];
    const absl::Span<const float> grad = GradientOf(c, g.grads[i]);
    const int local = local_index_[c.chunk_id];
    DenseChunk& chunk = *chunks_[local];
    absl::MutexLock cl(&chunk.mu);
    if (chunk.early_step == step) {
      // Applied already for this step: a gradient too late for it.
      ++result.dropped;
      continue;
    }
    // This push completes the chunk: applied from the received gradient,
    // without staging a copy of it.
    auto own = chunk.staged.find(request.worker_id);
    if (early && (own == chunk.staged.end() || own->second.step != step) &&
        ApplyIfComplete(*optimizer_, chunk, step, active, lr, request.worker_id,
                        grad)) {
      result.applied_early.push_back(local);
      continue;
    }
    DenseChunk::StagedGrad& st = chunk.staged[request.worker_id];
    if (st.step != step) {
      st.step = step;
      st.grad.assign(grad.begin(), grad.end());
    } else {
      AddLoop(grad.size(), grad.data(), st.grad.data());
    }
    st.final = request.final;
    if (early && ApplyIfComplete(*optimizer_, chunk, step, active, lr)) {
      result.applied_early.push_back(local);
    }
  }
  return result;
}

void DenseTable::ApplyStep(int64_t step, absl::Span<const int64_t> workers,
                           ApplyPool& pool) {
  const float lr = optimizer_->LearningRate(step);
  const float scale = 1.0f / static_cast<float>(workers.size());
  // Chunks are independent: spread over the apply threads.
  pool.ParallelFor(chunks_.size(), [&](int64_t i) {
    DenseChunk* chunk = chunks_[i].get();
    absl::MutexLock cl(&chunk->mu);
    if (chunk->early_step == step) {
      // Applied when its gradients were complete; what is staged now came
      // later (a worker that joined) and is dropped with the step.
      for (auto& [w, staged] : chunk->staged) staged.step = -1;
      return;
    }
    std::vector<float>* sum = nullptr;
    for (int64_t w : workers) {
      auto it = chunk->staged.find(w);
      if (it == chunk->staged.end() || it->second.step != step) continue;
      if (sum == nullptr) {
        sum = &it->second.grad;
        continue;
      }
      AddLoop(sum->size(), it->second.grad.data(), sum->data());
    }
    if (sum != nullptr) {
      UpdateChunk(*optimizer_, lr, scale, *sum, *chunk);
    }
    chunk->applied_step = step;
    // Late workers' partial gradients of this step are dropped with it.
    for (auto& [w, staged] : chunk->staged) staged.step = -1;
  });
}

absl::Status DenseTable::CheckPull(const PullArgs& args) const {
  for (int64_t id : args.chunk_ids) {
    if (id < 0 || id >= static_cast<int64_t>(local_index_.size()) ||
        local_index_[id] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull of chunk ", id, ", which is not on shard ",
                       shard_index_, " of job '", job_id_, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DenseTable::Pull(const PullArgs& args,
                                         const PullSinks& sinks) {
  if (sinks.chunks == nullptr || args.sparse_only) return 0;
  const ChunkSink& sink = *sinks.chunks;
  int64_t bytes = 0;
  auto emit = [&](DenseChunk& chunk) {
    absl::MutexLock cl(&chunk.mu);
    sink(chunk.chunk, *chunk.weights, chunk.weights);
    bytes += chunk.weights->size() * sizeof(float);
  };
  if (args.chunk_ids.empty()) {
    for (auto& chunk : chunks_) emit(*chunk);
  } else {
    for (int64_t id : args.chunk_ids) emit(*chunks_[local_index_[id]]);
  }
  return bytes;
}

bool DenseTable::ForEachPulledPart(
    const PullArgs& args, absl::FunctionRef<bool(int part)> visit) const {
  if (args.sparse_only) return true;
  if (args.chunk_ids.empty()) {
    for (size_t local = 0; local < chunks_.size(); ++local) {
      if (!visit(static_cast<int>(local))) return false;
    }
    return true;
  }
  for (int64_t id : args.chunk_ids) {
    if (!visit(local_index_[id])) return false;
  }
  return true;
}

void DenseTable::Snapshot(int64_t version, CheckpointData* data) {
  data->ranges.reserve(data->ranges.size() + chunks_.size());
  for (auto& chunk : chunks_) {
    absl::MutexLock cl(&chunk->mu);
    CheckpointRange r;
    r.tensor_name = tensors_[chunk->chunk.tensor_index].name();
    r.offset = chunk->chunk.offset;
    // A chunk applied ahead of its step's close is recorded as it was
    // before, so that the checkpoint holds `version` throughout.
    const bool ahead = chunk->early_step == version;
    const OptimizerSlots& slots = ahead ? chunk->pre_slots : chunk->slots;
    r.weights = ahead ? *chunk->spare : *chunk->weights;
    r.slot1 = slots.slot1;
    r.slot2 = slots.slot2;
    r.steps = slots.steps;
    data->ranges.push_back(std::move(r));
  }
}

// A checkpoint restores only onto the same model: every tensor of the job
// with the same name and shape, and the same optimizer kind (its slots).
absl::Status DenseTable::CompatibleModel(
    const std::vector<CheckpointData>& files) const {
  for (const CheckpointData& f : files) {
    absl::StatusOr<std::vector<TensorSpec>> tensors =
        ExpandModel(f.spec.model());
    if (!tensors.ok()) return tensors.status();
    if (tensors->size() != tensors_.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "it holds ", tensors->size(), " tensors, the job ", tensors_.size()));
    }
    for (size_t i = 0; i < tensors->size(); ++i) {
      if ((*tensors)[i].name() != tensors_[i].name() ||
          NumElements((*tensors)[i]) != NumElements(tensors_[i])) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensor ", i, " is '", (*tensors)[i].name(), "' ",
            ShapeString((*tensors)[i]), " there and '", tensors_[i].name(),
            "' ", ShapeString(tensors_[i]), " in the job"));
      }
    }
    if (f.spec.optimizer().kind() != optimizer_kind_) {
      return absl::FailedPreconditionError(
          "it was written with a different optimizer");
    }
  }
  return absl::OkStatus();
}

std::optional<std::vector<DenseTable::RestoreCopy>> DenseTable::PlanRestore(
    const std::vector<CheckpointData>& files) const {
  // Index ranges by tensor name, then find every overlap with the chunks.
  absl::flat_hash_map<std::string, std::vector<const CheckpointRange*>> by_name;
  for (const CheckpointData& f : files) {
    for (const CheckpointRange& r : f.ranges) {
      by_name[r.tensor_name].push_back(&r);
    }
  }
  std::vector<RestoreCopy> copies;
  std::vector<int64_t> covered(chunks_.size(), 0);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i]->chunk;
    auto it = by_name.find(tensors_[c.tensor_index].name());
    if (it == by_name.end()) continue;
    for (const CheckpointRange* r : it->second) {
      const int64_t from = std::max(c.offset, r->offset);
      const int64_t to = std::min<int64_t>(c.offset + c.num_elements,
                                           r->offset + r->weights.size());
      if (from < to) {
        copies.push_back({i, r, from, to});
        covered[i] += to - from;
      }
    }
  }
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (covered[i] != chunks_[i]->chunk.num_elements) return std::nullopt;
  }
  return copies;
}

absl::Status DenseTable::CheckRestore(
    const std::vector<CheckpointData>& files) const {
  PS_RETURN_IF_ERROR(CompatibleModel(files));
  if (!PlanRestore(files).has_value()) {
    return absl::FailedPreconditionError(
        "it does not cover this shard's tensors (a different model?)");
  }
  return absl::OkStatus();
}

void DenseTable::Restore(const std::vector<CheckpointData>& files) {
  const std::optional<std::vector<RestoreCopy>> copies = PlanRestore(files);
  if (!copies.has_value()) return;  // CheckRestore refused them
  for (const RestoreCopy& cp : *copies) {
    DenseChunk& chunk = *chunks_[cp.chunk];
    absl::MutexLock cl(&chunk.mu);
    const int64_t dst = cp.from - chunk.chunk.offset;
    const int64_t src = cp.from - cp.range->offset;
    const int64_t n = cp.to - cp.from;
    // Not yet published: written in place.
    std::copy_n(cp.range->weights.begin() + src, n,
                chunk.weights->begin() + dst);
    if (cp.range->slot1.size() == cp.range->weights.size() &&
        chunk.slots.slot1.size() == chunk.weights->size()) {
      std::copy_n(cp.range->slot1.begin() + src, n,
                  chunk.slots.slot1.begin() + dst);
    }
    if (cp.range->slot2.size() == cp.range->weights.size() &&
        chunk.slots.slot2.size() == chunk.weights->size()) {
      std::copy_n(cp.range->slot2.begin() + src, n,
                  chunk.slots.slot2.begin() + dst);
    }
    chunk.slots.steps = std::max(chunk.slots.steps, cp.range->steps);
  }
}

}  // namespace ps::server
