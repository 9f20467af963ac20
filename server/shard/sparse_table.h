// A sparse embedding table (proto/config.proto, SparseTableSpec): the rows
// of one table whose keys this shard owns (common/wire/key_placement.h),
// created on their first pull or push from the initializer of (job seed, table
// name, key) (common/spec/initializer.h), updated by the table's optimizer
// (sparse_optimizer.h), held in a striped row map (sparse_row_map.h). A
// Table (table.h) with no parts: it never applies before a BSP step closes,
// so a pull that reads its rows never reads ahead of the job.
//
// A push: the table's SparseRows of the push (unique keys, checked by the
// store with common/wire/sparse_rows.h), rows of the table's dim and dtype,
// every key on this shard, finite gradients (unless the job allows NaN/Inf).
// Prepare widens the gradients and, for a table with a capacity and no LRU
// eviction, reserves the rows the push creates, so that a push that does
// not fit fails whole (RESOURCE_EXHAUSTED naming table and shard) before
// any table changes. ASP/SSP: ApplyNow updates each row at once. BSP: Stage
// sums each worker's gradients per key for the step; ApplyStep applies, per
// key, the sum over the step's workers divided by their number (a key
// pushed by one worker of four gets a quarter of that worker's gradient, as
// a dense element that only one worker's batch touched), once, at the
// step's rate; what late or backup workers staged for the step is dropped.
// At a BSP step close a row that no longer fits the capacity drops its
// gradient (counted in dropped_gradients).
//
// Admission filter (AdmissionSpec, admission_filter.h): each push counts
// its keys (BSP: when staged); a key without a row gets one only once its
// count reaches min_count (ASP/SSP: in the push that reaches it; BSP: at
// the close of the step that reaches it), and until then its gradients are
// dropped (dropped_gradients) and its pulls answer the initializer's row
// without creating one. `admissions` counts the rows created behind the
// filter.
//
// Checkpoints hold the rows by key with their slots and step counts; a
// restore keeps the rows whose keys this shard owns now, whatever the
// number of shards the files were written on.
//
// A pull answers each requested key's row (keys may repeat) in the dtype
// asked (FLOAT32, FLOAT16, BFLOAT16), writing straight into the answer's
// buffer (SparseSink); the dim asked must be 0 or the table's.
//
// Thread safety: as Table; rows are locked by stripe, a BSP worker's
// staging by worker.
#ifndef PS_SERVER_SHARD_SPARSE_TABLE_H_
#define PS_SERVER_SHARD_SPARSE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/metrics.h"
#include "proto/config.pb.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/admission_filter.h"
#include "server/shard/sparse_optimizer.h"
#include "server/shard/sparse_row_map.h"
#include "server/shard/table.h"

namespace ps::server {

class SparseTable final : public Table {
 public:
  // Table `table_index` of spec.model().sparse_tables() (normalised) on
  // shard `shard_index` of `num_shards`. `job_id` names the job in errors.
  static absl::StatusOr<std::unique_ptr<SparseTable>> Create(
      const std::string& job_id, const JobSpec& spec, int table_index,
      int shard_index, int num_shards);
  ~SparseTable() override;

  absl::StatusOr<std::unique_ptr<PreparedGradient>> Prepare(
      const PushArgs& args, bool apply_now) const override;
  absl::Status ApplyNow(const PushArgs& args, PreparedGradient& gradient,
                        UpdateRate rate) override;
  StageResult Stage(const PushArgs& args, PreparedGradient& gradient,
                    const StageRequest& request) override;
  void ApplyStep(int64_t step, absl::Span<const int64_t> workers,
                 ApplyPool& pool) override;

  absl::Status CheckPull(const PullArgs& args) const override;
  absl::StatusOr<int64_t> Pull(const PullArgs& args,
                               const PullSinks& sinks) override;
  int num_parts() const override { return 0; }
  bool ForEachPulledPart(
      const PullArgs& args,
      absl::FunctionRef<bool(int part)> visit) const override;

  void Snapshot(int64_t version, CheckpointData* data) override;
  absl::Status CheckRestore(
      const std::vector<CheckpointData>& files) const override;
  void Restore(const std::vector<CheckpointData>& files) override;

  // A state transfer (shard_image.h), under the job's apply_mu held
  // exclusively with nothing staged: what Snapshot leaves out (each row's
  // touched version, in Snapshot's row order, the table's version, the
  // admission filter's counters); Install makes this table Snapshot's rows
  // with those (FAILED_PRECONDITION if the image does not fit it).
  void ImageExtras(ShardImage::SparseTable* extras);
  absl::Status Install(const CheckpointSparseTable& rows,
                       const ShardImage::SparseTable& extras);

  // This table's line of ShardStatus.
  SparseTableStatus Status() const;

  // Prometheus gauges of Status()'s figures, set at each collection of
  // `registry` (a scrape of /metrics, TextSnapshot) by a collect hook this
  // table holds: Status() takes every stripe's lock, too much for each push
  // and pull. Called once, before the table serves; the registry must
  // outlive the table's serving (the hook goes when the table does).
  struct Gauges {
    prometheus::Gauge* rows = nullptr;
    prometheus::Gauge* bytes = nullptr;
    prometheus::Gauge* evictions = nullptr;
    prometheus::Gauge* admissions = nullptr;
    prometheus::Gauge* dropped = nullptr;
    prometheus::Gauge* rejected = nullptr;
  };
  void SetGauges(MetricsRegistry& registry, const Gauges& gauges);

  const SparseTableSpec& spec() const { return spec_; }

 private:
  // A BSP step's gradients are kept in kStageParts parts by
  // SparseRowMap::PartOf, so that its close applies the parts in parallel
  // (ApplyPool) on disjoint stripes of the row map.
  static constexpr int kStageParts = 16;
  // Gradients summed per key: dim floats per key.
  struct KeySums {
    absl::flat_hash_map<uint64_t, uint32_t> index;
    std::vector<float> sums;
    void Clear() {
      index.clear();
      sums.clear();
    }
  };
  // A BSP worker's gradients of one step, summed per key.
  struct WorkerStage {
    absl::Mutex mu;
    int64_t step ABSL_GUARDED_BY(mu) = -1;
    // kStageParts (or none: a step close took them and has not given
    // them back).
    std::vector<KeySums> parts ABSL_GUARDED_BY(mu);
    int64_t keys ABSL_GUARDED_BY(mu) = 0;
  };

  SparseTable(const std::string& job_id, const JobSpec& spec, int table_index,
              int shard_index, int num_shards,
              std::unique_ptr<SparseOptimizer> optimizer);

  // Writes a new row: the initializer's weights, the optimizer's slots.
  void InitRow(uint64_t key, float* values) const;
  // InitRow of a row being created, counted as an admission behind a
  // filter.
  void CreateRow(uint64_t key, float* values);
  // With an admission filter: whether each key may get a row, by `count`
  // (a push's sighting) or by what was counted; empty without a filter.
  std::vector<uint8_t> Admit(absl::Span<const uint64_t> keys, bool count);
  // INVALID_ARGUMENT naming the first key of `keys` that another shard
  // owns.
  absl::Status CheckKeysHere(absl::Span<const uint64_t> keys) const;
  WorkerStage& StageOf(int64_t worker_id);
  // Applies a step's gradients, `taken` (per worker, its kStageParts
  // parts), summed per key over the workers and divided by `num_workers`;
  // the parts in parallel over `pool`.
  void ApplySums(std::vector<std::vector<KeySums>>& taken, int64_t step,
                 int num_workers, ApplyPool& pool);
  // Adds `src` (dim floats) to key's sum in `to`.
  void AddTo(KeySums& to, uint64_t key, const float* src) const;
  // Applies the gradient of keys[i], the dim floats at grads + at[i] x dim,
  // to its row at `lr` x `scale`, creating rows; at capacity (BSP) applies
  // to the existing rows only and counts the others' gradients dropped.
  void ApplyRows(absl::Span<const uint64_t> keys, const float* grads,
                 absl::Span<const uint32_t> at, float lr, float scale,
                 int64_t version);
  void NoteVersion(int64_t version);
  // Sets `gauges` from Status().
  void PublishGauges(const Gauges& gauges) const;
  // This table's rows in `file`, or null.
  const CheckpointSparseTable* FindIn(const CheckpointData& file) const;

  const std::string job_id_;
  const SparseTableSpec spec_;
  const int table_index_;
  const int shard_index_;
  const int num_shards_;
  const bool allow_nonfinite_;
  const uint64_t salt_;      // key placement
  const uint64_t row_seed_;  // initializer
  const std::unique_ptr<SparseOptimizer> optimizer_;
  const std::unique_ptr<SparseRowMap> rows_;
  const std::unique_ptr<AdmissionFilter> admission_;  // null: none
  // The newest version a push or step close told the table (rows' recency).
  std::atomic<int64_t> version_{0};

  absl::Mutex stage_mu_;
  absl::flat_hash_map<int64_t, std::unique_ptr<WorkerStage>> stages_
      ABSL_GUARDED_BY(stage_mu_);

  // Counters (SparseTableStatus).
  mutable std::atomic<int64_t> rows_pulled_{0}, rows_pushed_{0},
      dropped_gradients_{0}, rejected_gradients_{0}, admissions_{0};

  // Last: destroyed first, so that no collection reads a table being
  // destroyed.
  absl::Mutex hook_mu_;
  std::unique_ptr<MetricsRegistry::CollectHook> gauges_hook_
      ABSL_GUARDED_BY(hook_mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SPARSE_TABLE_H_
