#include "worker/model/mlp_model.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model.h"
#include "kernels/cpu_backend.h"
#include "worker/batch_prefetcher.h"

namespace ps::worker::model {
namespace {

ModelSpec Mlp(int64_t input, std::vector<int64_t> hidden, int64_t classes) {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(input);
  for (int64_t h : hidden) spec.mutable_mlp()->add_hidden(h);
  spec.mutable_mlp()->set_num_classes(classes);
  return spec;
}

// Fixed small weights, so that the model computes something.
void SetWeights(TrainableModel* model) {
  for (int i = 0; i < model->num_parameters(); ++i) {
    std::vector<float> w(model->parameters()[i].size);
    for (size_t j = 0; j < w.size(); ++j) {
      w[j] = 0.1f * static_cast<float>((j * 5 + i) % 7) - 0.3f;
    }
    ASSERT_TRUE(model->SetParameterRange(i, 0, w).ok());
  }
}

// `n` examples of `size` values with labels in [0, classes).
Dataset Data(int64_t n, int64_t size, int classes) {
  Dataset d;
  d.num_examples = n;
  d.rows = 1;
  d.cols = static_cast<int>(size);
  d.num_classes = classes;
  for (int64_t i = 0; i < n * size; ++i) {
    d.images.push_back(0.2f * static_cast<float>((i * 3) % 11) - 1.0f);
  }
  for (int64_t i = 0; i < n; ++i) d.labels.push_back((i * 7) % classes);
  return d;
}

// The first `n` examples of `d` as a batch.
Batch BatchOf(const Dataset& d, int n) {
  Batch b;
  b.size = n;
  b.example_size = d.example_size();
  b.buffer =
      HeapHostBuffer(n * (d.example_size() * sizeof(float) + sizeof(int32_t)));
  float* x = static_cast<float*>(b.buffer.data());
  std::copy(d.images.begin(), d.images.begin() + n * d.example_size(), x);
  std::copy(d.labels.begin(), d.labels.begin() + n,
            reinterpret_cast<int32_t*>(x + n * d.example_size()));
  return b;
}

TEST(MlpModel, ParametersAreTheServersTensorsInTheirOrder) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  const ModelSpec spec = Mlp(784, {64, 32}, 10);
  auto model = CreateMlpModel(spec, 784, backend->get());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpandModel(spec);
  ASSERT_TRUE(tensors.ok());
  ASSERT_EQ((*model)->num_parameters(), static_cast<int>(tensors->size()));
  for (int i = 0; i < (*model)->num_parameters(); ++i) {
    const ParameterInfo& p = (*model)->parameters()[i];
    const TensorSpec& t = (*tensors)[i];
    EXPECT_EQ(p.name, t.name());
    EXPECT_EQ(p.shape, std::vector<int64_t>(t.shape().begin(), t.shape().end()))
        << p.name;
    EXPECT_EQ(p.size, NumElements(t)) << p.name;
    // Only the first layer's weight is used in row blocks.
    EXPECT_EQ((*model)->SplitsRows(i), i == 0) << p.name;
  }
}

TEST(MlpModel, RejectsOtherModelsAndMismatchedInput) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ(CreateMlpModel(ModelSpec(), 784, backend->get()).status().code(),
            absl::StatusCode::kUnimplemented);
  absl::Status s =
      CreateMlpModel(Mlp(100, {8}, 10), 784, backend->get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("input_dim is 100"), std::string::npos) << s;
  EXPECT_NE(s.message().find("784"), std::string::npos) << s;
}

TEST(MlpModel, HooksSeeTheFirstWeightInRowBlocks) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  // fc0/weight [4, 3], fc0/bias [3], fc1/weight [3, 2], fc1/bias [2].
  auto model = CreateMlpModel(Mlp(4, {3}, 2), 4, backend->get());
  ASSERT_TRUE(model.ok()) << model.status();
  SetWeights(model->get());
  const Dataset d = Data(6, 4, 2);
  std::vector<std::string> calls;
  ModelStepHooks hooks;
  hooks.row_splits = {{1, 3}};
  hooks.before_use = [&](int i, int64_t b, int64_t e) {
    calls.push_back(absl::StrCat("use ", i, " ", b, " ", e));
    return absl::OkStatus();
  };
  hooks.before_backward = [&] {
    calls.push_back("backward");
    return absl::OkStatus();
  };
  hooks.on_gradient_part = [&](int i, int64_t b, int64_t e) {
    calls.push_back(absl::StrCat("grad ", i, " ", b, " ", e));
  };
  absl::StatusOr<float> loss = (*model)->TrainStep(BatchOf(d, 6), hooks);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_GT(*loss, 0);
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "use 0 0 3", "use 0 3 9", "use 0 9 12", "use 1 0 3",
                       "use 2 0 6", "use 3 0 2", "backward", "grad 2 0 6",
                       "grad 3 0 2", "grad 0 0 3", "grad 0 3 9", "grad 0 9 12",
                       "grad 1 0 3"}));
  // The gradient the hooks announced is there.
  std::vector<float> g(12);
  ASSERT_TRUE((*model)->GetGradientRange(0, 0, absl::MakeSpan(g)).ok());
  double sum = 0;
  for (float x : g) sum += x * x;
  EXPECT_GT(sum, 0);

  // An error from a hook ends the step with it.
  hooks.before_backward = [] { return absl::AbortedError("stop"); };
  EXPECT_EQ((*model)->TrainStep(BatchOf(d, 6), hooks).status().code(),
            absl::StatusCode::kAborted);
}

TEST(MlpModel, EvaluatesARangeOfTheDataset) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  auto model = CreateMlpModel(Mlp(4, {3}, 2), 4, backend->get());
  ASSERT_TRUE(model.ok()) << model.status();
  SetWeights(model->get());
  const Dataset d = Data(6, 4, 2);
  auto all = (*model)->Evaluate(d, 0, 6);
  auto first = (*model)->Evaluate(d, 0, 2);
  auto rest = (*model)->Evaluate(d, 2, 4);
  ASSERT_TRUE(all.ok() && first.ok() && rest.ok()) << all.status();
  EXPECT_EQ(all->examples, 6);
  EXPECT_EQ(first->examples, 2);
  EXPECT_EQ(rest->examples, 4);
  EXPECT_EQ(all->correct, first->correct + rest->correct);
  EXPECT_NEAR(all->loss * 6, first->loss * 2 + rest->loss * 4, 1e-5);
  EXPECT_GT(all->loss, 0);
  // Outside the dataset.
  EXPECT_EQ((*model)->Evaluate(d, 4, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->Evaluate(d, -1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker::model
