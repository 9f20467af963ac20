#include "worker/model/mlp_model.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/model/mlp.h"

namespace ps::worker::model {
namespace {

kernels::Activation ToKernels(Activation a) {
  return a == TANH ? kernels::Activation::kTanh : kernels::Activation::kRelu;
}

// Forwards to Mlp; the hooks map onto Mlp::StepHooks (only
// fc0/weight, parameter 0, has row blocks there).
class MlpModel final : public TrainableModel {
 public:
  explicit MlpModel(std::unique_ptr<Mlp> mlp) : mlp_(std::move(mlp)) {}

  const std::vector<ParameterInfo>& parameters() const override {
    return mlp_->parameters();
  }
  bool SplitsRows(int index) const override { return index == 0; }
  kernels::DeviceSpan<float> parameter(int index) override {
    return mlp_->parameter(index);
  }
  kernels::DeviceSpan<const float> gradient(int index) const override {
    return mlp_->gradient(index);
  }
  absl::Status SetParameterRange(int index, int64_t offset,
                                 absl::Span<const float> host) override {
    return mlp_->SetParameterRange(index, offset, host);
  }
  absl::Status GetGradientRange(int index, int64_t offset,
                                absl::Span<float> host) override {
    return mlp_->GetGradientRange(index, offset, host);
  }
  absl::Status SwapParameterBuffer(int index,
                                   kernels::DeviceBuffer& other) override {
    return mlp_->SwapParameterBuffer(index, other);
  }
  absl::Status SwapGradientBuffer(int index,
                                  kernels::DeviceBuffer& other) override {
    return mlp_->SwapGradientBuffer(index, other);
  }

  absl::StatusOr<float> TrainStep(const Batch& batch,
                                  const ModelStepHooks& hooks) override {
    Mlp::StepHooks h;
    if (!hooks.row_splits.empty()) {
      h.first_weight_row_splits = hooks.row_splits[0];
    }
    h.before_use = hooks.before_use;
    h.before_backward = hooks.before_backward;
    h.on_gradient_part = hooks.on_gradient_part;
    return mlp_->TrainStep(batch.images(), batch.labels(), h);
  }

  absl::StatusOr<ModelEvaluation> Evaluate(const Dataset& data, int64_t begin,
                                           int64_t count) override {
    if (begin < 0 || count < 0 || begin + count > data.num_examples) {
      return absl::InvalidArgumentError(
          absl::StrCat("examples [", begin, ", ", begin + count,
                       ") outside the dataset's ", data.num_examples));
    }
    const int64_t size = data.example_size();
    PS_ASSIGN_OR_RETURN(
        Mlp::Evaluation e,
        mlp_->Evaluate(absl::MakeConstSpan(data.images)
                           .subspan(begin * size, count * size),
                       absl::MakeConstSpan(data.labels).subspan(begin, count)));
    ModelEvaluation out;
    out.loss = e.loss;
    out.correct = e.correct;
    out.examples = e.examples;
    return out;
  }

 private:
  const std::unique_ptr<Mlp> mlp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainableModel>> CreateMlpModel(
    const ModelSpec& spec, int64_t example_size, kernels::Backend* backend) {
  if (!spec.has_mlp()) {
    return absl::UnimplementedError(
        "this worker trains MLP models only (model.mlp)");
  }
  MlpOptions options;
  options.layer_sizes.push_back(spec.mlp().input_dim());
  for (int64_t h : spec.mlp().hidden()) options.layer_sizes.push_back(h);
  options.layer_sizes.push_back(spec.mlp().num_classes());
  options.activation = ToKernels(spec.mlp().activation());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp, Mlp::Create(backend, options));
  if (example_size != spec.mlp().input_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.mlp.input_dim is ", spec.mlp().input_dim(),
        " but the dataset's examples have ", example_size, " values"));
  }
  return std::unique_ptr<TrainableModel>(
      std::make_unique<MlpModel>(std::move(mlp)));
}

}  // namespace ps::worker::model
