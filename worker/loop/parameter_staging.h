// Where pulled weights land and pushed gradients are read from. On a
// host-memory backend (kernels::Backend::HostAddressable) that is the
// model's own buffers: no copies. Otherwise host fp32 copies, moved to and
// from the device by range.
#ifndef PS_WORKER_LOOP_PARAMETER_STAGING_H_
#define PS_WORKER_LOOP_PARAMETER_STAGING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/trainable_model.h"

namespace ps::worker {

// `model` is not owned and must outlive the staging. Thread-compatible.
class ParameterStaging {
 public:
  // `direct`: the model's memory is the host's (no staging copies).
  ParameterStaging(TrainableModel* model, bool direct);

  bool direct() const { return direct_; }

  // The buffers pulls write, one per parameter in model order: the model's
  // parameters when direct (as they are now: a swapped buffer shows), the
  // host copies otherwise.
  std::vector<absl::Span<float>> Weights();

  // The host copies into the model: all of them, or elements [begin, end)
  // of parameter `index`. Nothing to do when direct.
  absl::Status LoadAll();
  absl::Status Load(int index, int64_t begin, int64_t end);

  // Elements [begin, end) of parameter `index`'s gradient, in host memory
  // (copied out of the model unless direct). Valid until the next call for
  // the same elements or the next step's backward.
  absl::StatusOr<absl::Span<const float>> Gradient(int index, int64_t begin,
                                                   int64_t end);

 private:
  TrainableModel* const model_;
  const bool direct_;
  // Host copies, one per parameter; empty when direct.
  std::vector<std::vector<float>> weights_, grads_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_PARAMETER_STAGING_H_
