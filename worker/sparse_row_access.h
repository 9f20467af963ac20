// The multi-table side of sparse tables that a ParameterAccess may offer
// besides its one-table PullSparse and PushSparse, in the terms of the
// parameter client (worker/client/parameter_client.h): per table, unique
// keys (worker/client/unique_keys.h) and fp32 row buffers of keys x dim.
// The parameter servers' access (worker/ps_access.h) and the in-process
// one (worker/local_parameter_access.h) implement it; the sparse step
// (worker/sparse_step.h) uses it to fetch every table's rows at once and
// to let the next batch's rows ride on a step's pushes.
#ifndef PS_WORKER_SPARSE_ROW_ACCESS_H_
#define PS_WORKER_SPARSE_ROW_ACCESS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/client/parameter_client.h"
#include "worker/parameter_access.h"

namespace ps::worker {

// Rows' pushes are part of the open step: Finish / FinishAndPull wait for
// them (their staleness counts with the dense pushes'), and for the rows
// PushRowsAndPull asked back, so buffers given here must stay valid until
// then (or CancelCalls()). Errors as the dense calls' (for the parameter
// servers: UNAVAILABLE naming the shard after retry_deadline, CANCELLED on
// stop).
class SparseRowAccess {
 public:
  virtual ~SparseRowAccess() = default;
  // Fills the rows of `pulls`' keys for step `clock`, waiting as Pull does;
  // the rows' version (the lowest over the shards asked).
  virtual absl::StatusOr<int64_t> PullRows(
      int64_t clock, std::vector<client::SparsePull> pulls) = 0;
  // Starts pushing the gradients of step `clock` of the rows of `grads`
  // (unique keys, duplicates summed: SumRowsByInverse), computed on
  // weights of `base_version`; returns before they are sent.
  virtual absl::Status PushRows(int64_t clock, int64_t base_version,
                                std::vector<client::SparsePush> grads) = 0;
  // PushRows that also asks back, in the pushes' answers, the rows of
  // `next` (the next batch's keys) for step clock + 1, waiting as Pull(clock
  // + 1) would. They are in place once Finish / FinishAndPull of `clock`
  // has returned OK (pulled again there when the push was refused as too
  // stale).
  virtual absl::Status PushRowsAndPull(
      int64_t clock, int64_t base_version,
      std::vector<client::SparsePush> grads,
      std::vector<client::SparsePull> next) = 0;
  // For ASP with overlap_communication (ParameterAccess::StartStepEnd with
  // rows): starts ending step `clock` with the whole gradient of every
  // dense tensor (`grads`, model order) and the rows' gradients (`rows`),
  // computed on weights of `base_version`, asking back the rows of `next`
  // and the dense weights into `tensors` for step clock + 1, and returns
  // at once. The function returned waits for all of it and returns what
  // FinishAndPull returns (rows of a push refused as too stale pulled
  // again). Every buffer must stay valid until that wait has returned or
  // CancelCalls() has.
  virtual ParameterAccess::PendingStepEnd StartRowsStepEnd(
      int64_t clock, int64_t base_version,
      std::vector<absl::Span<const float>> grads,
      std::vector<client::SparsePush> rows,
      std::vector<client::SparsePull> next,
      std::vector<absl::Span<float>> tensors) = 0;
};

// The sparse side of `access` when it has one; nullptr otherwise.
inline SparseRowAccess* SparseRowsOf(ParameterAccess* access) {
  return dynamic_cast<SparseRowAccess*>(access);
}

}  // namespace ps::worker

#endif  // PS_WORKER_SPARSE_ROW_ACCESS_H_
