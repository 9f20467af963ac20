// The end of a step under ASP with overlap_communication: step t + 1
// computes while step t's gradients and the next weights travel, in buffers
// of their own (the model's are in use). One set suffices: a step's calls
// are over before the next step ends. On a host-memory backend they are
// buffers of the backend's, swapped with the model's own instead of copied
// (about 2 MB a step for the Fashion-MNIST MLP); otherwise host copies.
#ifndef PS_WORKER_LOOP_OVERLAP_STEP_END_H_
#define PS_WORKER_LOOP_OVERLAP_STEP_END_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/client/parameter_access.h"
#include "worker/loop/parameter_staging.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {

// `model`, `backend`, `staging` and `params` are not owned and must outlive
// it; client::ParameterAccess::CancelCalls() must have returned before it is
// destroyed with a step end in flight. Thread-compatible.
class OverlapStepEnd {
 public:
  // Allocates the spare buffers (the backend's errors).
  static absl::StatusOr<std::unique_ptr<OverlapStepEnd>> Create(
      TrainableModel* model, kernels::Backend* backend,
      ParameterStaging* staging, client::ParameterAccess* params);

  struct Ended {
    // The version of the weights the next step computes on, now in the
    // model (direct) or in the staging copies.
    int64_t next_version = 0;
    // Staleness summed over the step ends completed here, and their count.
    double staleness = 0;
    int64_t staleness_ends = 0;
  };
  // Ends step `clock`, whose gradients (in the model) were computed on
  // weights of `version`: waits for the previous step's end, whose weights
  // (which lack this step's update: one more version of staleness) the next
  // step computes on, then sends this step's gradients and asks for the
  // next weights without waiting, or, for the `last` step, sends them and
  // ends the step before returning. After the first step the next step
  // computes on the same weights. `rows` (the step's row gradients) and
  // `next_rows` (rows it asks back) travel with it; their buffers must stay
  // valid until the next EndStep or Drain returns.
  absl::StatusOr<Ended> EndStep(int64_t clock, int64_t version, bool last,
                                std::vector<client::SparsePush> rows = {},
                                std::vector<client::SparsePull> next_rows = {});

  // Waits for the step end on its way, if any: its weights become the
  // model's (or the staging copies'), as the next EndStep would take them.
  // Nothing on its way: next_version -1.
  absl::StatusOr<Ended> Drain();

 private:
  OverlapStepEnd(TrainableModel* model, ParameterStaging* staging,
                 client::ParameterAccess* params)
      : model_(model), staging_(staging), params_(params) {}
  // The previous step end's weights become the model's (or the staging
  // copies').
  absl::StatusOr<client::CallResult> TakeArrivedWeights();

  TrainableModel* const model_;
  ParameterStaging* const staging_;
  client::ParameterAccess* const params_;
  // Direct: buffers swapped with the model's. Otherwise host copies.
  std::vector<kernels::DeviceBuffer> spare_grads_, spare_weights_;
  std::vector<std::vector<float>> host_grads_, host_weights_;
  std::optional<client::Handle> in_flight_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_OVERLAP_STEP_END_H_
