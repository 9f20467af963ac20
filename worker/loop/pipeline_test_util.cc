#include "worker/loop/pipeline_test_util.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/config.pb.h"
#include "worker/model/layer_model.h"

namespace ps::worker {

std::unique_ptr<TrainableModel> TinyModel(kernels::Backend* backend) {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(kTinyInput);
  spec.mutable_mlp()->add_hidden(3);
  spec.mutable_mlp()->set_num_classes(2);
  absl::StatusOr<std::unique_ptr<TrainableModel>> model =
      model::CreateLayerModel(spec, kTinyInput, backend);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  for (int i = 0; i < (*model)->num_parameters(); ++i) {
    std::vector<float> w((*model)->parameters()[i].size);
    for (size_t j = 0; j < w.size(); ++j) {
      w[j] = 0.1f * static_cast<float>((j * 7 + i * 3) % 11) - 0.5f;
    }
    EXPECT_TRUE((*model)->SetParameterRange(i, 0, w).ok());
  }
  return *std::move(model);
}

std::vector<float> ReadParameter(kernels::Backend* backend,
                                 TrainableModel* model, int index) {
  kernels::DeviceSpan<float> p = model->parameter(index);
  std::vector<float> out(p.size);
  EXPECT_TRUE(
      backend->CopyToHost(p.data, out.data(), p.size * sizeof(float)).ok());
  return out;
}

double GradientSum(TrainableModel* model, int index) {
  std::vector<float> g(model->parameters()[index].size);
  EXPECT_TRUE(model->GetGradientRange(index, 0, absl::MakeSpan(g)).ok());
  double sum = 0;
  for (float x : g) sum += x;
  return sum;
}

data::Batch TinyBatch(int size, int seed) {
  data::Batch b;
  b.size = size;
  b.dense_dim = kTinyInput;
  b.dense.resize(static_cast<size_t>(size) * kTinyInput);
  for (int i = 0; i < size * kTinyInput; ++i) {
    b.dense[i] = 0.25f * static_cast<float>((i * 5 + seed * 3) % 9) - 1.0f;
  }
  b.label_kind = data::LabelKind::kClass;
  for (int i = 0; i < size; ++i) b.classes.push_back((i + seed) % 2);
  return b;
}

RecordingAccess::RecordingAccess(const TrainableModel& model) {
  for (const ParameterInfo& p : model.parameters()) {
    sizes_.push_back(p.size);
  }
}

absl::StatusOr<int64_t> RecordingAccess::Fill(
    int64_t clock, const std::vector<absl::Span<float>>& tensors) {
  log.push_back(absl::StrCat("pull ", clock));
  if (tensors.size() != sizes_.size()) {
    return absl::InvalidArgumentError("tensor count");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (static_cast<int64_t>(tensors[i].size()) != sizes_[i]) {
      return absl::InvalidArgumentError("tensor size");
    }
    for (float& x : tensors[i]) x = PulledValue(clock);
  }
  return version_at ? version_at(clock) : finishes;
}

client::Handle RecordingAccess::Pull(client::PullArgs request) {
  if (!request.rows.empty()) {
    return client::Handle(absl::UnimplementedError("no sparse tables"));
  }
  absl::StatusOr<int64_t> version = Fill(request.clock, request.tensors);
  if (!version.ok()) return client::Handle(version.status());
  return client::Handle(client::CallResult{.version = *version});
}

absl::Status RecordingAccess::Take(const client::StepArgs& request) {
  if (!request.rows.empty() || !request.next_rows.empty()) {
    return absl::UnimplementedError("no sparse tables");
  }
  for (const client::TensorGrad& g : request.dense) {
    log.push_back(absl::StrCat("push ", request.clock, " ",
                               request.base_version, " ", g.tensor_index, " ",
                               g.grad.size()));
    double& sum = grad_sums[{request.clock, g.tensor_index}];
    for (float x : g.grad) sum += x;
    if (!push_status.ok()) return push_status;
  }
  return absl::OkStatus();
}

absl::Status RecordingAccess::Push(client::StepArgs request) {
  return Take(request);
}

client::Handle RecordingAccess::EndStep(client::StepArgs request) {
  if (absl::Status s = Take(request); !s.ok()) return client::Handle(s);
  log.push_back(absl::StrCat("finish ", request.clock));
  ++finishes;
  client::CallResult end{.staleness = staleness};
  if (!request.next_weights.empty()) {
    absl::StatusOr<int64_t> version =
        Fill(request.clock + 1, request.next_weights);
    if (!version.ok()) return client::Handle(version.status());
    end.version = *version;
  }
  return client::Handle(end);
}

std::vector<std::string> Lines(const std::vector<std::string>& log,
                               const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& l : log) {
    if (absl::StartsWith(l, prefix)) out.push_back(l);
  }
  return out;
}

}  // namespace ps::worker
