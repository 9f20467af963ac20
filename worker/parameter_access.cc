#include "worker/parameter_access.h"

#include <utility>

#include "common/platform/status.h"

namespace ps::worker {
namespace {

// A step end that was over before StartFinishAndPull returned.
class StepEndDone final : public ParameterAccess::StepEndInProgress {
 public:
  explicit StepEndDone(absl::StatusOr<ParameterAccess::StepEnd> end)
      : end_(std::move(end)) {}
  absl::Status AwaitWeights(int, int64_t, int64_t) override {
    return end_.status();
  }
  absl::StatusOr<ParameterAccess::StepEnd> Wait() override { return end_; }

 private:
  const absl::StatusOr<ParameterAccess::StepEnd> end_;
};

}  // namespace

absl::StatusOr<ParameterAccess::StepEnd> ParameterAccess::FinishAndPull(
    int64_t clock, std::vector<absl::Span<float>> tensors) {
  StepEnd end;
  PS_ASSIGN_OR_RETURN(end.staleness, Finish(clock));
  PS_ASSIGN_OR_RETURN(end.version, Pull(clock + 1, std::move(tensors)));
  return end;
}

absl::Status ParameterAccess::PushPart(int64_t clock, int64_t base_version,
                                       int index, int64_t offset,
                                       absl::Span<const float> grad) {
  if (offset != 0) {
    return absl::UnimplementedError(
        "this ParameterAccess takes whole tensors only (no PartBoundaries)");
  }
  return Push(clock, base_version, index, grad);
}

std::unique_ptr<ParameterAccess::StepEndInProgress>
ParameterAccess::StartFinishAndPull(int64_t clock,
                                    std::vector<absl::Span<float>> tensors) {
  return std::make_unique<StepEndDone>(
      FinishAndPull(clock, std::move(tensors)));
}

absl::Status ParameterAccess::PullSparse(int64_t, int,
                                         absl::Span<const uint64_t>,
                                         absl::Span<float>) {
  return absl::UnimplementedError(
      "this ParameterAccess holds dense tensors only (no sparse tables)");
}

absl::Status ParameterAccess::PushSparse(int64_t, int64_t, int,
                                         absl::Span<const uint64_t>,
                                         absl::Span<const float>) {
  return absl::UnimplementedError(
      "this ParameterAccess holds dense tensors only (no sparse tables)");
}

ParameterAccess::PendingStepEnd ParameterAccess::StartStepEnd(
    int64_t clock, int64_t base_version,
    std::vector<absl::Span<const float>> grads,
    std::vector<absl::Span<float>> tensors) {
  absl::StatusOr<StepEnd> end = [&]() -> absl::StatusOr<StepEnd> {
    for (size_t i = 0; i < grads.size(); ++i) {
      PS_RETURN_IF_ERROR(
          Push(clock, base_version, static_cast<int>(i), grads[i]));
    }
    return FinishAndPull(clock, std::move(tensors));
  }();
  return [end = std::move(end)] { return end; };
}

}  // namespace ps::worker
