// Test fakes for the step pipeline: a tiny MLP, batches made up on the spot,
// and a ParameterAccess held in-process that logs its calls.
#ifndef PS_WORKER_PIPELINE_TEST_UTIL_H_
#define PS_WORKER_PIPELINE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/batch_prefetcher.h"
#include "worker/parameter_access.h"
#include "worker/trainable_model.h"

namespace ps::worker {

// An MLP 4-3-2 (fc0/weight [4, 3], fc0/bias, fc1/weight [3, 2], fc1/bias)
// on `backend`, its weights set to small fixed values. Fails the test
// (and returns null) if it cannot be made.
std::unique_ptr<TrainableModel> TinyModel(kernels::Backend* backend);
inline constexpr int64_t kTinyInput = 4;

// Parameter `index` of `model`, read back through `backend`; the sum of
// its gradient's elements.
std::vector<float> ReadParameter(kernels::Backend* backend,
                                 TrainableModel* model, int index);
double GradientSum(TrainableModel* model, int index);

// `size` examples of kTinyInput values, varying with `seed`, labels in
// {0, 1}.
Batch TinyBatch(int size, int seed);

// Tensors shaped like the model's. Pull fills them all with
// PulledValue(clock) (so that which pull landed shows) and returns
// version_at(clock) (default: the number of Finish calls so far). Push
// records the sum of the gradient's elements. Every call is logged:
// "pull <clock>", "push <clock> <base_version> <index> <size>",
// "finish <clock>"; CancelCalls is counted.
inline float PulledValue(int64_t clock) {
  return static_cast<float>(clock + 1) / 8;
}
class RecordingAccess : public ParameterAccess {
 public:
  explicit RecordingAccess(const TrainableModel& model);

  absl::StatusOr<int64_t> Pull(int64_t clock,
                               std::vector<absl::Span<float>> tensors) override;
  absl::Status Push(int64_t clock, int64_t base_version, int index,
                    absl::Span<const float> grad) override;
  absl::StatusOr<int64_t> Finish(int64_t clock) override;
  void CancelCalls() override { ++cancels; }

  std::function<int64_t(int64_t clock)> version_at;
  int64_t staleness = 0;     // what Finish returns
  absl::Status push_status;  // what Push returns
  std::vector<std::string> log;
  std::map<std::pair<int64_t, int>, double> grad_sums;  // by (clock, index)
  int finishes = 0;
  int cancels = 0;

 private:
  std::vector<int64_t> sizes_;
};

// Only the log lines that start with `prefix`.
std::vector<std::string> Lines(const std::vector<std::string>& log,
                               const std::string& prefix);

}  // namespace ps::worker

#endif  // PS_WORKER_PIPELINE_TEST_UTIL_H_
