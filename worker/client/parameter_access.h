// What a worker needs from the parameter servers, as three calls of one
// shape (compare ps-lite's KVWorker: Push, Pull, each answered by a handle
// to wait on):
//   Pull(PullArgs)     the weights (dense tensors, sparse rows) of a step;
//   Push(StepArgs)     gradients of the open step, sent while it computes;
//   EndStep(StepArgs)  ends the step, with its last gradients, and brings
//                      back the next step's weights and rows.
// Pull and EndStep return a Handle; the synchronous forms are Handle::Wait.
// The real one (worker/client/ps_access.h) talks gRPC to the shards; the
// in-process one (worker/client/local_parameter_access.h) serves tests and
// single-process runs; the Python package binds this interface as it is.
// It depends on nothing of the training loop.
#ifndef PS_WORKER_CLIENT_PARAMETER_ACCESS_H_
#define PS_WORKER_CLIENT_PARAMETER_ACCESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/client/buffers.h"

namespace ps::client {

// What a Pull or an EndStep reports once over.
struct CallResult {
  // The version of the weights it brought (the lowest over the shards
  // asked; a Pull of dense tensors and rows: the tensors'). An EndStep that
  // brought none: 0.
  int64_t version = 0;
  // EndStep: the staleness the step's gradients saw (versions others
  // applied between the weights they were computed on and their arrival;
  // 0 under BSP). Pull: 0.
  int64_t staleness = 0;
};

// A call on its way. Move-only; not thread-safe (the caller's thread waits
// on it). A default-made Handle is over, OK, with a zero result.
class Handle {
 public:
  // The call's side (ParameterAccess implementations give one).
  class Call {
   public:
    virtual ~Call() = default;
    // Waits until elements [begin, end) of tensor `index` of the weights
    // the call brings are in place: OK once they are, otherwise the call's
    // error (Wait() then tells the whole result).
    virtual absl::Status AwaitPart(int index, int64_t begin, int64_t end) = 0;
    // Waits for all of it; called at most once.
    virtual absl::StatusOr<CallResult> Wait() = 0;
  };

  Handle() : result_(CallResult{}) {}
  // A call over before it returned, with `result`.
  explicit Handle(absl::StatusOr<CallResult> result)
      : result_(std::move(result)) {}
  explicit Handle(std::unique_ptr<Call> call) : call_(std::move(call)) {}
  // A call whose whole wait is `wait` (its parts are awaited with it).
  static Handle Deferred(std::function<absl::StatusOr<CallResult>()> wait);

  Handle(Handle&&) = default;
  Handle& operator=(Handle&&) = default;

  // Elements [begin, end) of tensor `index` of the weights the call brings
  // are in place (or the call failed: its error). For a caller that starts
  // on the first weights to arrive.
  absl::Status AwaitPart(int index, int64_t begin, int64_t end);
  // Waits for the call; the result is kept, so Wait() may be called again.
  absl::StatusOr<CallResult> Wait();
  // Whether Wait() has returned (or the call was over when made).
  bool waited() const { return result_.has_value(); }

 private:
  std::unique_ptr<Call> call_;
  std::optional<absl::StatusOr<CallResult>> result_;
};

// Buffers are host fp32: dense tensors one per model tensor, in model order
// (common/spec/model.h), rows keys x dim of their table
// (ModelSpec.sparse_tables, by index; unique keys). Every buffer stays
// valid (gradients unchanged) until the call that took it is over: for a
// Pull its Handle's Wait, for a Push the EndStep of its step.
struct PullArgs {
  int64_t clock = 0;
  // The weights a worker at `clock` may compute on, waiting as the job's
  // consistency model says (BSP: for version `clock`); a key never pushed
  // gets its initial row. Either may be empty.
  std::vector<absl::Span<float>> tensors;
  std::vector<SparsePull> rows;
  // BSP: do not wait for version `clock`; take the weights of the step
  // the shards are at (their lowest open step), whose version the result
  // tells. A joining worker takes its clock from it: the shards count it
  // among their open step's workers, which a pull waiting for a later
  // version would hold open for good. Ignored under ASP and SSP.
  bool current = false;
};

// The gradients of step `clock`, computed on weights of `base_version`,
// and what their answers bring back for step clock + 1.
struct StepArgs {
  int64_t clock = 0;
  int64_t base_version = 0;
  // Dense gradients: whole tensors, or parts cut at PartBoundaries.
  std::vector<TensorGrad> dense;
  // Row gradients (duplicates summed: SumRowsByInverse).
  std::vector<SparsePush> rows;
  // Rows of the next batch's keys for step clock + 1, waiting as a Pull at
  // clock + 1 would; in place once the step's EndStep is over (pulled
  // again there when a push was refused as too stale).
  std::vector<SparsePull> next_rows;
  // The weights of step clock + 1, into these buffers (one per model
  // tensor). Push: each message brings back the weights of its own chunks
  // (for a caller that no longer reads a tensor once it pushed its
  // gradient; the step's EndStep must be given the same buffers); EndStep:
  // all of them, its Handle's AwaitPart telling which have arrived. Empty:
  // none (EndStep of the job's last step).
  std::vector<absl::Span<float>> next_weights;
};

// Driven by one training thread. Errors, on the call or its Handle: the
// shards' (UNAVAILABLE naming the shard once retries ran out), CANCELLED
// on a stop, INVALID_ARGUMENT for buffers that do not fit the model.
class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;

  virtual Handle Pull(PullArgs request) = 0;

  // Starts sending gradients of the open step; may return before they are
  // sent (small ones wait to travel with later ones). Its step's EndStep
  // completes it and reports its staleness.
  virtual absl::Status Push(StepArgs request) = 0;

  // Ends step `clock`: the gradients of `request` travel with the end of
  // step (all of a step's at once: ASP with overlap_communication; their
  // staleness then counts from the end's version), the gradients pushed
  // before are acknowledged, and the next weights and rows asked for
  // come back.
  virtual Handle EndStep(StepArgs request) = 0;

  // Where tensor `index`'s gradient may be cut for a part (TensorGrad
  // offset): element offsets inside it, ascending (the parameter servers'
  // chunk boundaries). Empty: whole tensors only.
  virtual std::vector<int64_t> PartBoundaries(int index) const = 0;

  // Ends every call still in flight and returns once none is left: after
  // it nothing reads or writes the buffers given to any call. A training
  // loop calls it on its way out (a stop or an error leaves calls running)
  // before it frees them.
  virtual void CancelCalls() = 0;
};

// Whole-tensor gradients of `grads` (model order) as TensorGrads.
std::vector<TensorGrad> WholeTensors(
    const std::vector<absl::Span<const float>>& grads);

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_PARAMETER_ACCESS_H_
