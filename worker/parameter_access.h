// What the training loop needs from the parameter servers: pull weights,
// push gradients (whole or in parts), end a step, and the overlapped forms
// that fetch the next step's weights while a step still runs. The real one
// (worker/ps_access.h) talks gRPC to the shards; tests use a local one.
#ifndef PS_WORKER_PARAMETER_ACCESS_H_
#define PS_WORKER_PARAMETER_ACCESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps::worker {

// Buffers are host fp32, one per model tensor, in model order
// (common/spec/model.h). Implementations are driven by one training thread.
class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;

  // Fills `tensors` (one host buffer per model tensor, in model order) with
  // the weights a worker at `clock` may compute on, waiting as the job's
  // consistency model says. Returns the weights' version (the lowest over
  // the shards).
  virtual absl::StatusOr<int64_t> Pull(
      int64_t clock, std::vector<absl::Span<float>> tensors) = 0;

  // As Pull, but under BSP without waiting for version `clock`: the weights
  // of the step the shards are at (their lowest open step), whose version
  // it returns. A BSP worker that joins takes its clock from it: the shards
  // count it among the workers of their open step, which a pull waiting
  // for a later version would hold open for good. The default: Pull.
  virtual absl::StatusOr<int64_t> PullCurrent(
      int64_t clock, std::vector<absl::Span<float>> tensors) {
    return Pull(clock, std::move(tensors));
  }

  // Starts pushing tensor `index`'s gradient for step `clock`; may return
  // before it is sent. `grad` must stay valid until Finish().
  virtual absl::Status Push(int64_t clock, int64_t base_version, int index,
                            absl::Span<const float> grad) = 0;

  // Completes step `clock`: every push sent and acknowledged, the shards told
  // the step is over. Returns the staleness the pushes saw (versions applied
  // by others between this worker's pull and its push; 0 under BSP).
  virtual absl::StatusOr<int64_t> Finish(int64_t clock) = 0;

  // Where tensor `index`'s gradient may be cut for PushPart: element offsets
  // inside it, ascending (the parameter servers' chunk boundaries). Empty:
  // only whole tensors (the default).
  virtual std::vector<int64_t> PartBoundaries(int index) const {
    (void)index;
    return {};
  }
  // Push of part of a gradient: elements [offset, offset + grad.size()) of
  // tensor `index`, starting and ending at PartBoundaries (or at the
  // tensor's start and end). As Push otherwise. The default takes whole
  // tensors only (UNIMPLEMENTED for offset != 0).
  virtual absl::Status PushPart(int64_t clock, int64_t base_version, int index,
                                int64_t offset, absl::Span<const float> grad);

  // Every push from now on may also ask back the next step's weights of
  // its chunks into `tensors` (the buffers later passed to
  // StartFinishAndPull), which then arrive while the step still runs
  // (PsAccess: in every consistency model). Only for a caller that no longer
  // reads a tensor once it pushed its gradient (ModelStepHooks'
  // on_gradient_part). Ignored by default.
  virtual void PullWithPushes(std::vector<absl::Span<float>> tensors) {
    (void)tensors;
  }

  // Finish(clock), then Pull(clock + 1, tensors): ends the step and fetches
  // the weights of the next one. The real implementation does both in one
  // round trip per shard (the shards answer the end of step with the new
  // weights); this default runs the two calls one after the other.
  struct StepEnd {
    int64_t staleness = 0;  // as Finish returns it
    int64_t version = 0;    // as Pull(clock + 1) returns it
  };
  virtual absl::StatusOr<StepEnd> FinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors);

  // FinishAndPull in two halves, so that the next step can start on the
  // weights that have arrived: StartFinishAndPull ends step `clock` and
  // starts pulling clock + 1's weights into `tensors`; the returned object's
  // AwaitWeights(index, begin, end) waits until elements [begin, end) of
  // tensor `index` are there, and Wait() for all of it, returning what
  // FinishAndPull returns (an error of either, once it is known). The
  // object must be waited on (or CancelCalls() called) before `tensors`
  // is freed. The default does everything in StartFinishAndPull.
  class StepEndInProgress {
   public:
    virtual ~StepEndInProgress() = default;
    virtual absl::Status AwaitWeights(int index, int64_t begin,
                                      int64_t end) = 0;
    virtual absl::StatusOr<StepEnd> Wait() = 0;
  };
  virtual std::unique_ptr<StepEndInProgress> StartFinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors);

  // For ASP with overlap_communication: starts ending step `clock` with the
  // whole gradient of every tensor (`grads`, model order, computed on
  // weights of `base_version`) and pulling the weights for clock + 1 into
  // `tensors`, and returns at once; the returned function waits for both
  // (as FinishAndPull returns). `grads` and `tensors` must stay valid until
  // that wait returns or CancelCalls() has. The default does it all before
  // returning.
  using PendingStepEnd = std::function<absl::StatusOr<StepEnd>()>;
  virtual PendingStepEnd StartStepEnd(
      int64_t clock, int64_t base_version,
      std::vector<absl::Span<const float>> grads,
      std::vector<absl::Span<float>> tensors);

  // ---- Sparse tables (ModelSpec.sparse_tables, by index; rows of the
  // table's dim). The defaults: UNIMPLEMENTED (dense tensors only).

  // Fills `rows` (keys.size() x dim) with the rows of `keys` (unique) of
  // `table` that a worker at `clock` may compute on; a key never pushed
  // gets its initial row.
  virtual absl::Status PullSparse(int64_t clock, int table,
                                  absl::Span<const uint64_t> keys,
                                  absl::Span<float> rows);
  // Starts pushing one gradient row per key (unique) of `table` for step
  // `clock` (computed on weights of `base_version`); as Push otherwise:
  // `grads` must stay valid until Finish(clock), which completes it.
  virtual absl::Status PushSparse(int64_t clock, int64_t base_version,
                                  int table, absl::Span<const uint64_t> keys,
                                  absl::Span<const float> grads);

  // Ends every call still in flight and returns once none is left: after it
  // nothing reads or writes the buffers given to Push, Pull or
  // FinishAndPull. The training loop calls it on its way out (a stop or an
  // error leaves calls running) before it frees them.
  virtual void CancelCalls() {}
};

}  // namespace ps::worker

#endif  // PS_WORKER_PARAMETER_ACCESS_H_
