// Test fakes for the step pipeline: a tiny MLP, batches made up on the spot,
// and a client::ParameterAccess held in-process that logs its calls.
#ifndef PS_WORKER_LOOP_PIPELINE_TEST_UTIL_H_
#define PS_WORKER_LOOP_PIPELINE_TEST_UTIL_H_

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
#include "worker/client/parameter_access.h"
#include "worker/data/batch.h"
#include "worker/model/trainable_model.h"

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
data::Batch TinyBatch(int size, int seed);

// Tensors shaped like the model's, and the three calls of
// client::ParameterAccess over them, logged:
//   Pull     "pull <clock>"; fills every tensor with PulledValue(clock)
//            (so that which pull landed shows) and answers version
//            version_at(clock) (default: the number of steps ended so far);
//   Push     "push <clock> <base_version> <index> <size>" per dense part,
//            whose gradient's elements it sums into grad_sums; the weights
//            a push asks back (next_weights) come with the step's end;
//   EndStep  a "push" line per dense part it carries, then "finish
//            <clock>", then, when next_weights is not empty, fills them
//            with PulledValue(clock + 1) and logs "pull <clock + 1>" (a
//            step end that fetches the next step's weights is a finish and
//            a pull of the next step's). It answers `staleness` and the
//            version the pull of clock + 1 would (0 without one).
// Push and EndStep take their dense parts in order and stop at the first
// one push_status refuses, with that error (no part after it is logged).
// Dense tensors only: a request with rows is UNIMPLEMENTED. Every Handle
// it returns is over. CancelCalls is counted.
inline float PulledValue(int64_t clock) {
  return static_cast<float>(clock + 1) / 8;
}
class RecordingAccess : public client::ParameterAccess {
 public:
  explicit RecordingAccess(const TrainableModel& model);

  client::Handle Pull(client::PullArgs request) override;
  absl::Status Push(client::StepArgs request) override;
  client::Handle EndStep(client::StepArgs request) override;
  // Whole tensors only.
  std::vector<int64_t> PartBoundaries(int) const override { return {}; }
  void CancelCalls() override { ++cancels; }

  std::function<int64_t(int64_t clock)> version_at;
  int64_t staleness = 0;     // what each step end answers
  absl::Status push_status;  // what each dense part meets
  std::vector<std::string> log;
  std::map<std::pair<int64_t, int>, double> grad_sums;  // by (clock, index)
  int finishes = 0;
  int cancels = 0;

 private:
  // Logs "pull <clock>" and fills `tensors`; their version.
  absl::StatusOr<int64_t> Fill(int64_t clock,
                               const std::vector<absl::Span<float>>& tensors);
  // Logs and sums the dense parts of `request`.
  absl::Status Take(const client::StepArgs& request);

  std::vector<int64_t> sizes_;
};

// Only the log lines that start with `prefix`.
std::vector<std::string> Lines(const std::vector<std::string>& log,
                               const std::string& prefix);

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_PIPELINE_TEST_UTIL_H_
