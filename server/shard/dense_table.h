// The dense table: the chunks of a job's dense tensors that this shard owns
// (common/wire/placement.h), with their published weights, optimizer slots and
// BSP staging. A Table (table.h) whose parts are the chunks, numbered by
// their index on this shard (ascending chunk id).
//
// Hot paths, whose mechanics the table keeps: ASP/SSP pushes apply from
// the receive buffers, with the NaN/Inf check fused into the SGD update
// when the optimizer can (CanApplyChecked), the chunks' locks taken in
// ascending order and the new weights published only once all are finite;
// BSP staging and the step's sums are vectorised loops (-O3, AVX2 clones);
// weights are published as immutable buffers, so a pull hands them out
// without a copy (WeightsRef) while the next update writes a spare buffer;
// the step close spreads chunks over the apply pool.
//
// Thread safety: as Table. Each chunk has its own mutex; pushes to
// different chunks apply in parallel.
#ifndef PS_SERVER_SHARD_DENSE_TABLE_H_
#define PS_SERVER_SHARD_DENSE_TABLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/wire/placement.h"
#include "proto/config.pb.h"
#include "server/shard/optimizer.h"
#include "server/shard/table.h"

namespace ps::server {

struct DenseChunk;  // dense_table.cc

class DenseTable final : public Table {
 public:
  // The chunks of `placement` that shard `shard_index` owns, initialised
  // from (spec.seed(), tensor, offset), with zeroed optimizer slots of
  // spec.optimizer(). `tensors`: the job's dense tensors (ExpandModel),
  // placed by `placement`. `job_id` names the job in errors.
  static absl::StatusOr<std::unique_ptr<DenseTable>> Create(
      const std::string& job_id, const JobSpec& spec,
      std::vector<TensorSpec> tensors,
      std::shared_ptr<const Placement> placement, int shard_index);
  ~DenseTable() override;

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
  int num_parts() const override { return static_cast<int>(chunks_.size()); }
  bool ForEachPulledPart(
      const PullArgs& args,
      absl::FunctionRef<bool(int part)> visit) const override;

  void Snapshot(int64_t version, CheckpointData* data) override;
  absl::Status CheckRestore(
      const std::vector<CheckpointData>& files) const override;
  void Restore(const std::vector<CheckpointData>& files) override;

 private:
  // A checkpoint range's overlap with one of this shard's chunks.
  struct RestoreCopy {
    size_t chunk;
    const CheckpointRange* range;
    int64_t from, to;  // tensor element range
  };

  DenseTable(const std::string& job_id, const JobSpec& spec,
             std::vector<TensorSpec> tensors,
             std::shared_ptr<const Placement> placement, int shard_index,
             std::unique_ptr<Optimizer> optimizer);

  // ASP/SSP with an optimizer that CanApplyChecked: applies the push with
  // the NaN/Inf check fused in (the chunks' new weights go to their spare
  // buffers and are published together once all are finite, under all of
  // their locks). INVALID_ARGUMENT, with nothing changed, if one is not.
  absl::Status ApplyChecked(const PushArgs& args, float lr,
                            absl::Span<const absl::Span<const float>> grads);
  // The same model and optimizer as `files` were written with.
  absl::Status CompatibleModel(const std::vector<CheckpointData>& files) const;
  // What `files` hold of this shard's chunks; nullopt if they do not cover
  // every chunk.
  std::optional<std::vector<RestoreCopy>> PlanRestore(
      const std::vector<CheckpointData>& files) const;

  const std::string job_id_;
  const int shard_index_;
  const bool allow_nonfinite_;
  const OptimizerSpec::Kind optimizer_kind_;
  const std::vector<TensorSpec> tensors_;
  const std::shared_ptr<const Placement> placement_;
  const std::unique_ptr<Optimizer> optimizer_;
  std::vector<int> local_index_;  // by chunk id; -1: another shard's
  std::vector<std::unique_ptr<DenseChunk>> chunks_;  // by local index
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_DENSE_TABLE_H_
