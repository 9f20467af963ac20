#include "server/shard/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/spec/initializer.h"
#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "server/shard/dense_gradient.h"

namespace ps::server {
namespace {

// This table's gradient of a push: its keys (in the push's buffers), their
// fp32 gradients (dim per key: in the push's buffers too when they came as
// aligned fp32, else widened into `widened`), and the rows reserved for
// them.
struct SparseGradient final : PreparedGradient {
  absl::Span<const uint64_t> keys;
  absl::Span<const float> grads;
  std::vector<float> widened;
  SparseRowMap::Reservation reservation;
};

DType WireDType(DType d) { return d == DTYPE_UNSPECIFIED ? FLOAT32 : d; }

}  // namespace

absl::StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(
    const std::string& job_id, const JobSpec& spec, int table_index,
    int shard_index, int num_shards) {
  if (table_index < 0 || table_index >= spec.model().sparse_tables_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse table ", table_index, " is not in the model"));
  }
  if (num_shards < 1 || num_shards > kMaxKeyShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job with sparse tables runs on 1 to ", kMaxKeyShards,
                     " shards, not ", num_shards));
  }
  const SparseTableSpec& t = spec.model().sparse_tables(table_index);
  absl::StatusOr<std::unique_ptr<SparseOptimizer>> optimizer =
      SparseOptimizer::Create(t.optimizer());
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse table '", t.name(), "': ", optimizer.status().message()));
  }
  return std::unique_ptr<SparseTable>(new SparseTable(job_id, spec, table_index,
                                                      shard_index, num_shards,
                                                      *std::move(optimizer)));
}

SparseTable::SparseTable(const std::string& job_id, const JobSpec& spec,
                         int table_index, int shard_index, int num_shards,
                         std::unique_ptr<SparseOptimizer> optimizer)
    : job_id_(job_id),
      spec_(spec.model().sparse_tables(table_index)),
      table_index_(table_index),
      shard_index_(shard_index),
      num_shards_(num_shards),
      allow_nonfinite_(spec.allow_nonfinite_gradients()),
      salt_(TableSalt(spec_.name())),
      row_seed_(SparseRowSeed(spec.seed(), spec_.name())),
      optimizer_(std::move(optimizer)),
      rows_(std::make_unique<SparseRowMap>(
          SparseRowMapOptions{.table_name = spec_.name(),
                              .shard_index = shard_index,
                              .dim = spec_.dim(),
                              .num_slots = optimizer_->num_slots(),
                              .capacity = spec_.capacity(),
                              .eviction = spec_.eviction(),
                              .ttl_versions = spec_.ttl_versions()})),
      admission_(spec_.has_admission()
                     ? std::make_unique<AdmissionFilter>(spec_.admission())
                     : nullptr) {}

SparseTable::~SparseTable() = default;

void SparseTable::InitRow(uint64_t key, float* values) const {
  const int dim = spec_.dim();
  // The spec was validated: the kind and size are right.
  (void)InitializeSparseRowSeeded(spec_, row_seed_, key,
                                  absl::MakeSpan(values, dim));
  optimizer_->InitSlots(
      absl::MakeSpan(values + dim, dim * optimizer_->num_slots()));
}

void SparseTable::CreateRow(uint64_t key, float* values) {
  InitRow(key, values);
  if (admission_ != nullptr) {
    admissions_.fetch_add(1, std::memory_order_relaxed);
  }
}

std::vector<uint8_t> SparseTable::Admit(absl::Span<const uint64_t> keys,
                                        bool count) {
  std::vector<uint8_t> admit;
  if (admission_ == nullptr) return admit;
  admit.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    admit[i] =
        count ? admission_->Count(keys[i]) : admission_->Admitted(keys[i]);
  }
  return admit;
}

absl::Status SparseTable::CheckKeysHere(absl::Span<const uint64_t> keys) const {
  if (num_shards_ == 1) return absl::OkStatus();
  for (uint64_t key : keys) {
    const int shard = KeyShard(salt_, key, num_shards_);
    if (shard != shard_index_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key, " of sparse table '", spec_.name(),
          "' belongs to shard ", shard, " of ", num_shards_, ", not to shard ",
          shard_index_, " (common/wire/key_placement.h)"));
    }
  }
  return absl::OkStatus();
}

void SparseTable::NoteVersion(int64_t version) {
  int64_t cur = version_.load(std::memory_order_relaxed);
  while (cur < version && !version_.compare_exchange_weak(
                              cur, version, std::memory_order_relaxed)) {
  }
}

absl::StatusOr<std::unique_ptr<PreparedGradient>> SparseTable::Prepare(
    const PushArgs& args, bool apply_now) const {
  auto gradient = std::make_unique<SparseGradient>();
  const SparseRowsView* mine = nullptr;
  for (const SparseRowsView& s : args.sparse) {
    if (s.table == table_index_) mine = &s;
  }
  if (mine == nullptr || mine->num_rows == 0) return gradient;
  auto refuse = [&](absl::Status s) {
    rejected_gradients_.fetch_add(mine->num_rows, std::memory_order_relaxed);
    return s;
  };
  const std::string at =
      absl::StrCat("push to sparse table '", spec_.name(), "' (table ",
                   table_index_, ") of job '", job_id_, "'");
  if (mine->dim != spec_.dim()) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat(at, ": rows of dim ", mine->dim, ", the table's dim is ",
                     spec_.dim())));
  }
  if (WireDType(mine->dtype) != WireDType(spec_.dtype())) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        at, ": rows of dtype ", DType_Name(WireDType(mine->dtype)),
        ", the table's dtype is ", DType_Name(WireDType(spec_.dtype())))));
  }
  if (static_cast<int64_t>(mine->keys.size()) != mine->num_rows) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        at, ": ", mine->keys.size(), " keys for ", mine->num_rows, " rows")));
  }
  if (absl::Status s = CheckKeysHere(mine->keys); !s.ok()) {
    return refuse(
        absl::InvalidArgumentError(absl::StrCat(at, ": ", s.message())));
  }
  gradient->keys = mine->keys;
  const size_t floats = static_cast<size_t>(mine->num_rows) * spec_.dim();
  if (WireDType(mine->dtype) == FLOAT32 &&
      mine->rows.size() == floats * sizeof(float) &&
      reinterpret_cast<uintptr_t>(mine->rows.data()) % alignof(float) == 0) {
    // Read where they were received, as the dense path does.
    gradient->grads = absl::MakeConstSpan(
        reinterpret_cast<const float*>(mine->rows.data()), floats);
  } else {
    gradient->widened.resize(floats);
    if (absl::Status s = WidenToFloat(WireDType(mine->dtype), mine->rows,
                                      absl::MakeSpan(gradient->widened));
        !s.ok()) {
      return refuse(
          absl::InvalidArgumentError(absl::StrCat(at, ": ", s.message())));
    }
    gradient->grads = gradient->widened;
  }
  if (!allow_nonfinite_ && !AllFinite(gradient->grads)) {
    for (size_t i = 0; i < gradient->grads.size(); ++i) {
      if (!std::isfinite(gradient->grads[i])) {
        const size_t row = i / spec_.dim();
        return refuse(absl::InvalidArgumentError(absl::StrCat(
            at, ": the gradient of key ", mine->keys[row], " holds ",
            gradient->grads[i], " at element ", i % spec_.dim(),
            "; nothing of the push was applied")));
      }
    }
  }
  gradient->bytes = static_cast<int64_t>(mine->rows.size() +
                                         mine->keys.size() * sizeof(uint64_t));
  if (apply_now) {
    // The rows this push creates must fit before any table changes.
    absl::StatusOr<SparseRowMap::Reservation> reservation = rows_->Reserve(
        gradient->keys, version_.load(std::memory_order_relaxed));
    if (!reservation.ok()) return refuse(reservation.status());
    gradient->reservation = *std::move(reservation);
  }
  return gradient;
}

void SparseTable::ApplyRows(absl::Span<const uint64_t> keys, const float* grads,
                            absl::Span<const uint32_t> at, float lr,
                            float scale, int64_t version) {
  const int dim = spec_.dim();
  auto init = [this](uint64_t key, float* values) { CreateRow(key, values); };
  const std::vector<uint8_t> admit = Admit(keys, /*count=*/false);
  auto apply = [&](size_t i, RowRef row) {
    if (row.values == nullptr) {
      dropped_gradients_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    optimizer_->Apply(lr, scale, grads + size_t{at[i]} * dim, row.values,
                      row.values + dim, &row.meta->steps, dim);
  };
  if (!rows_
           ->ForRows(keys, version, /*create=*/true, init, apply, nullptr,
                     admit)
           .ok()) {
    // At capacity: the existing rows take their gradients, the others drop
    // theirs.
    (void)rows_->ForRows(keys, version, /*create=*/false, init, apply);
  }
}

absl::Status SparseTable::ApplyNow(const PushArgs&, PreparedGradient& gradient,
                                   UpdateRate rate) {
  auto& g = static_cast<SparseGradient&>(gradient);
  if (g.keys.empty()) return absl::OkStatus();
  NoteVersion(rate.step);
  const float lr = optimizer_->LearningRate(rate.step) / rate.divisor;
  const int dim = spec_.dim();
  const std::vector<uint8_t> admit = Admit(g.keys, /*count=*/true);
  absl::Status s = rows_->ForRows(
      g.keys, rate.step, /*create=*/true,
      [this](uint64_t key, float* values) { CreateRow(key, values); },
      [&](size_t i, RowRef row) {
        if (row.values == nullptr) {  // not admitted yet
          dropped_gradients_.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        optimizer_->Apply(lr, 1.0f, g.grads.data() + i * dim, row.values,
                          row.values + dim, &row.meta->steps, dim);
      },
      &g.reservation, admit);
  if (s.ok()) {
    rows_pushed_.fetch_add(static_cast<int64_t>(g.keys.size()),
                           std::memory_order_relaxed);
  }
  return s;
}

SparseTable::WorkerStage& SparseTable::StageOf(int64_t worker_id) {
  absl::MutexLock l(&stage_mu_);
  std::unique_ptr<WorkerStage>& stage = stages_[worker_id];
  if (stage == nullptr) stage = std::make_unique<WorkerStage>();
  return *stage;
}

void SparseTable::AddTo(KeySums& to, uint64_t key, const float* src) const {
  const size_t dim = spec_.dim();
  auto [it, inserted] =
      to.index.try_emplace(key, static_cast<uint32_t>(to.sums.size() / dim));
  if (inserted) {
    to.sums.insert(to.sums.end(), src, src + dim);
  } else {
    float* dst = to.sums.data() + size_t{it->second} * dim;
    for (size_t k = 0; k < dim; ++k) dst[k] += src[k];
  }
}

StageResult SparseTable::Stage(const PushArgs&, PreparedGradient& gradient,
                               const StageRequest& request) {
  auto& g = static_cast<SparseGradient&>(gradient);
  if (g.keys.empty()) return {};
  const size_t dim = spec_.dim();
  Admit(g.keys, /*count=*/true);  // seen once per push; decided at the close
  WorkerStage& stage = StageOf(request.worker_id);
  absl::MutexLock l(&stage.mu);
  if (stage.step != request.step) {
    // What it staged for an earlier step was dropped at that step's close.
    stage.step = request.step;
    for (KeySums& part : stage.parts) part.Clear();
    stage.keys = 0;
  }
  stage.parts.resize(kStageParts);  // (a step close may have taken them)
  for (size_t i = 0; i < g.keys.size(); ++i) {
    KeySums& part = stage.parts[SparseRowMap::PartOf(g.keys[i], kStageParts)];
    const size_t before = part.index.size();
    AddTo(part, g.keys[i], g.grads.data() + i * dim);
    stage.keys += static_cast<int64_t>(part.index.size() - before);
  }
  rows_pushed_.fetch_add(static_cast<int64_t>(g.keys.size()),
                         std::memory_order_relaxed);
  return {};
}

void SparseTable::ApplyStep(int64_t step, absl::Span<const int64_t> workers,
                            ApplyPool& pool) {
  NoteVersion(step + 1);
  absl::MutexLock sl(&stage_mu_);
  // The parts of the step's workers, taken out of their stages; the others'
  // gradients of a closed step (late or backup workers) are dropped.
  // In ascending worker id, so that a key's gradients are summed in the
  // same order on every replica and in every run (the map's own order
  // depends on the process's hash seed).
  std::vector<std::pair<int64_t, WorkerStage*>> by_worker;
  by_worker.reserve(stages_.size());
  for (auto& [worker, stage] : stages_) {
    by_worker.emplace_back(worker, stage.get());
  }
  std::sort(by_worker.begin(), by_worker.end());
  std::vector<WorkerStage*> counted;
  std::vector<std::vector<KeySums>> taken;
  for (auto& [worker, stage] : by_worker) {
    absl::MutexLock l(&stage->mu);
    if (stage->step == step &&
        std::find(workers.begin(), workers.end(), worker) != workers.end()) {
      counted.push_back(stage);
      taken.push_back(std::move(stage->parts));
      stage->parts.clear();  // Stage makes them again if it needs them
    } else if (stage->step <= step) {
      dropped_gradients_.fetch_add(stage->keys, std::memory_order_relaxed);
      for (KeySums& part : stage->parts) part.Clear();
    } else {
      continue;  // staged for a later step
    }
    stage->step = -1;
    stage->keys = 0;
  }
  if (!taken.empty() && !workers.empty()) {
    ApplySums(taken, step, static_cast<int>(workers.size()), pool);
  }
  // The parts' memory goes back to their stages for the next steps.
  for (size_t w = 0; w < counted.size(); ++w) {
    for (KeySums& part : taken[w]) part.Clear();
    absl::MutexLock l(&counted[w]->mu);
    if (counted[w]->parts.empty()) counted[w]->parts = std::move(taken[w]);
  }
}

void SparseTable::ApplySums(std::vector<std::vector<KeySums>>& taken,
                            int64_t step, int num_workers, ApplyPool& pool) {
  const float lr = optimizer_->LearningRate(step);
  const float scale = 1.0f / static_cast<float>(num_workers);
  const size_t dim = spec_.dim();
  // Part p's sum over the workers, per key, into the first worker's part.
  auto merge = [&](int p) -> KeySums& {
    KeySums& sum = taken[0][p];
    for (size_t w = 1; w < taken.size(); ++w) {
      const KeySums& part = taken[w][p];
      for (const auto& [key, at] : part.index) {
        AddTo(sum, key, part.sums.data() + size_t{at} * dim);
      }
    }
    return sum;
  };
  auto apply = [&](const KeySums& sum) {
    std::vector<uint64_t> keys;
    std::vector<uint32_t> at;
    keys.reserve(sum.index.size());
    at.reserve(sum.index.size());
    for (const auto& [key, a] : sum.index) {
      keys.push_back(key);
      at.push_back(a);
    }
    ApplyRows(keys, sum.sums.data(), at, lr, scale, step + 1);
  };
  if (spec_.capacity() > 0 && spec_.eviction() != SparseTableSpec::LRU) {
    // A capacity that evicts nothing: whether the step's new rows fit is
    // decided for all of them together, so the step applies at once.
    KeySums all;
    for (int p = 0; p < kStageParts; ++p) {
      const KeySums& sum = merge(p);
      for (const auto& [key, at] : sum.index) {
        AddTo(all, key, sum.sums.data() + size_t{at} * dim);
      }
    }
    if (!all.index.empty()) apply(all);
    return;
  }
  // Parts are disjoint in keys and in the row map's stripes.
  pool.ParallelFor(kStageParts, [&](int64_t p) {
    const KeySums& sum = merge(static_cast<int>(p));
    if (!sum.index.empty()) apply(sum);
  });
}

absl::Status SparseTable::CheckPull(const PullArgs& args) const {
  for (const SparseRowsView& s : args.sparse) {
    if (s.table != table_index_) continue;
    const std::string at =
        absl::StrCat("pull of sparse table '", spec_.name(), "' (table ",
                     table_index_, ") of job '", job_id_, "'");
    if (s.dim != 0 && s.dim != spec_.dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": dim ", s.dim, " asked, the table's dim is ",
                       spec_.dim(), " (or ask 0)"));
    }
    if (DTypeSize(WireDType(s.dtype)) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": unknown dtype ", static_cast<int>(s.dtype)));
    }
    if (static_cast<int64_t>(s.keys.size()) != s.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ": ", s.keys.size(), " keys for num_rows ", s.num_rows));
    }
    if (absl::Status st = CheckKeysHere(s.keys); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SparseTable::Pull(const PullArgs& args,
                                          const PullSinks& sinks) {
  if (sinks.sparse == nullptr) return 0;
  const int dim = spec_.dim();
  int64_t bytes = 0;
  for (size_t e = 0; e < args.sparse.size(); ++e) {
    const SparseRowsView& s = args.sparse[e];
    if (s.table != table_index_) continue;
    const DType dtype =
        s.dtype == DTYPE_UNSPECIFIED ? WireDType(spec_.dtype()) : s.dtype;
    const size_t row_bytes = static_cast<size_t>(dim) * DTypeSize(dtype);
    char* out = (*sinks.sparse)(e, dtype, dim, s.num_rows);
    const std::vector<uint8_t> admit = Admit(s.keys, /*count=*/false);
    std::vector<float> scratch;
    absl::Status st = rows_->ForRows(
        s.keys, version_.load(std::memory_order_relaxed), /*create=*/true,
        [this](uint64_t key, float* values) { CreateRow(key, values); },
        [&](size_t i, RowRef row) {
          if (row.values == nullptr) {
            // Not admitted: the initializer's row, not kept.
            scratch.resize(rows_->row_floats());
            InitRow(s.keys[i], scratch.data());
            row.values = scratch.data();
          }
          char* dst = out + i * row_bytes;
          if (dtype == FLOAT32) {
            std::memcpy(dst, row.values, row_bytes);
          } else {
            NarrowFromFloat(dtype, absl::MakeConstSpan(row.values, dim), dst);
          }
        },
        nullptr, admit);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("pull of job '", job_id_,
                                                  "': ", st.message()));
    }
    rows_pulled_.fetch_add(s.num_rows, std::memory_order_relaxed);
    bytes += static_cast<int64_t>(row_bytes) * s.num_rows;
  }
  return bytes;
}

bool SparseTable::ForEachPulledPart(const PullArgs& args,
                                    absl::FunctionRef<bool(int)>) const {
  // Rows are applied only when a step closes: a pull of them never reads
  // ahead of the job.
  for (const SparseRowsView& s : args.sparse) {
    if (s.table == table_index_) return false;
  }
  return true;
}

void SparseTable::Snapshot(int64_t, CheckpointData* data) {
  // Under the job's apply_mu held exclusively: no update runs, and rows are
  // never applied ahead of a BSP step's close, so every row is at `version`.
  CheckpointSparseTable& t = data->sparse_tables.emplace_back();
  t.name = spec_.name();
  t.row_floats = rows_->row_floats();
  const int64_t n = rows_->rows();
  t.keys.reserve(n);
  t.steps.reserve(n);
  t.values.reserve(n * t.row_floats);
  rows_->ForEachRow([&](const RowMeta& meta, absl::Span<const float> values) {
    t.keys.push_back(meta.key);
    t.steps.push_back(meta.steps);
    t.values.insert(t.values.end(), values.begin(), values.end());
  });
}

void SparseTable::ImageExtras(ShardImage::SparseTable* extras) {
  extras->set_name(spec_.name());
  extras->mutable_touched()->Reserve(static_cast<int>(rows_->rows()));
  rows_->ForEachRow([&](const RowMeta& meta, absl::Span<const float>) {
    extras->add_touched(meta.touched);
  });
  extras->set_version(version_.load(std::memory_order_relaxed));
  if (admission_ != nullptr) extras->set_admission(admission_->Counters());
  extras->set_admissions(admissions_.load(std::memory_order_relaxed));
}

absl::Status SparseTable::Install(const CheckpointSparseTable& rows,
                                  const ShardImage::SparseTable& extras) {
  if (rows.row_floats != rows_->row_floats() ||
      rows.keys.size() != rows.steps.size() ||
      rows.values.size() != rows.keys.size() * rows.row_floats ||
      static_cast<size_t>(extras.touched_size()) != rows.keys.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the image of sparse table '", spec_.name(),
                     "' does not fit it (sizes differ)"));
  }
  if (admission_ != nullptr && !admission_->LoadCounters(extras.admission())) {
    return absl::FailedPreconditionError(
        absl::StrCat("the image of sparse table '", spec_.name(),
                     "' has no admission counters of its filter's size"));
  }
  rows_->Clear();
  {
    absl::MutexLock l(&stage_mu_);
    stages_.clear();
  }
  version_.store(extras.version(), std::memory_order_relaxed);
  admissions_.store(extras.admissions(), std::memory_order_relaxed);
  for (size_t i = 0; i < rows.keys.size(); ++i) {
    RowMeta meta;
    meta.key = rows.keys[i];
    meta.steps = rows.steps[i];
    meta.touched = extras.touched(static_cast<int>(i));
    PS_RETURN_IF_ERROR(rows_->Put(
        meta, absl::MakeConstSpan(rows.values.data() + i * rows.row_floats,
                                  rows.row_floats)));
  }
  return absl::OkStatus();
}

const CheckpointSparseTable* SparseTable::FindIn(
    const CheckpointData& file) const {
  for (const CheckpointSparseTable& t : file.sparse_tables) {
    if (t.name == spec_.name()) return &t;
  }
  return nullptr;
}

absl::Status SparseTable::CheckRestore(
    const std::vector<CheckpointData>& files) const {
  for (const CheckpointData& file : files) {
    const CheckpointSparseTable* t = FindIn(file);
    if (t == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint of shard ", file.shard_index, " of ", file.num_shards,
          " holds no rows of sparse table '", spec_.name(), "'"));
    }
    if (t->row_floats != rows_->row_floats()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sparse table '", spec_.name(), "' was checkpointed with ",
          t->row_floats,
          " floats a row (weights and optimizer slots), the "
          "job has ",
          rows_->row_floats(), " (another dim or optimizer kind)"));
    }
    if (t->keys.size() != t->steps.size() ||
        t->values.size() != t->keys.size() * t->row_floats) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sparse table '", spec_.name(), "' in the checkpoint of shard ",
          file.shard_index, " has inconsistent sizes"));
    }
  }
  return absl::OkStatus();
}

void SparseTable::Restore(const std::vector<CheckpointData>& files) {
  rows_->Clear();
  {
    absl::MutexLock l(&stage_mu_);
    stages_.clear();
  }
  int64_t version = 0;
  for (const CheckpointData& file : files) {
    version = std::max(version, file.version);
  }
  version_.store(version, std::memory_order_relaxed);
  for (const CheckpointData& file : files) {
    const CheckpointSparseTable* t = FindIn(file);
    if (t == nullptr) continue;  // CheckRestore refused that
    for (size_t i = 0; i < t->keys.size(); ++i) {
      // Rows re-placed by key: a checkpoint of N shards restores onto M.
      if (KeyShard(salt_, t->keys[i], num_shards_) != shard_index_) continue;
      RowMeta meta;
      meta.key = t->keys[i];
      meta.steps = t->steps[i];
      meta.touched = static_cast<uint32_t>(
          std::min<int64_t>(version, std::numeric_limits<uint32_t>::max()));
      // A checkpoint of more rows than the capacity keeps what fits (LRU:
      // the last ones).
      (void)rows_->Put(meta,
                       absl::MakeConstSpan(t->values.data() + i * t->row_floats,
                                           t->row_floats));
    }
  }
}

void SparseTable::SetGauges(MetricsRegistry& registry, const Gauges& gauges) {
  std::unique_ptr<MetricsRegistry::CollectHook> hook =
      registry.AddCollectHook([this, gauges] { PublishGauges(gauges); });
  absl::MutexLock l(&hook_mu_);
  gauges_hook_ = std::move(hook);
}

void SparseTable::PublishGauges(const Gauges& g) const {
  const SparseTableStatus s = Status();
  g.rows->Set(static_cast<double>(s.rows()));
  g.bytes->Set(static_cast<double>(s.bytes()));
  g.evictions->Set(static_cast<double>(s.evictions()));
  g.admissions->Set(static_cast<double>(s.admissions()));
  g.dropped->Set(static_cast<double>(s.dropped_gradients()));
  g.rejected->Set(static_cast<double>(s.rejected_gradients()));
}

SparseTableStatus SparseTable::Status() const {
  SparseTableStatus s;
  s.set_name(spec_.name());
  s.set_rows(rows_->rows());
  s.set_bytes(rows_->bytes() +
              (admission_ != nullptr ? admission_->bytes() : 0));
  s.set_admissions(admissions_.load(std::memory_order_relaxed));
  s.set_capacity(spec_.capacity());
  s.set_evictions(rows_->evictions());
  s.set_rows_pulled(rows_pulled_.load(std::memory_order_relaxed));
  s.set_rows_pushed(rows_pushed_.load(std::memory_order_relaxed));
  s.set_dropped_gradients(dropped_gradients_.load(std::memory_order_relaxed));
  s.set_rejected_gradients(rejected_gradients_.load(std::memory_order_relaxed));
  return s;
}

}  // namespace ps::server
