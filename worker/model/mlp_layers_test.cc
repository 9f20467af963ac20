// The MLP shorthand (ModelSpec.mlp) through the layer model: its numerics
// against a double-precision reference, its hooks, the first layer's row
// blocks against the unsplit step, and its buffers, on the CPU backend and
// the CUDA kernels' source run on the host. (These were the tests of the
// MLP's own class, which the layer model replaced.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/model.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_emulated_backend.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker::model {
namespace {

using kernels::Backend;
using kernels::DeviceBuffer;

using Params = std::vector<std::vector<double>>;

std::unique_ptr<Backend> MakeBackend(const std::string& which) {
  absl::StatusOr<std::unique_ptr<Backend>> b =
      which == "cpu" ? kernels::CreateCpuBackend({})
                     : kernels::CreateCudaEmulatedBackend();
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

std::unique_ptr<TrainableModel> MakeMlp(Backend* backend,
                                        const std::vector<int64_t>& sizes,
                                        Activation act = RELU) {
  absl::StatusOr<std::unique_ptr<TrainableModel>> m =
      CreateLayerModel(MlpOf(sizes, act), sizes.front(), backend);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

// Double-precision reference: mean softmax cross-entropy of the MLP, and the
// logits. Parameters in the servers' order: fc<i>/weight [in, out],
// fc<i>/bias [out].
double ReferenceLoss(const std::vector<int64_t>& sizes, Activation act,
                     const Params& params, const std::vector<float>& images,
                     const std::vector<int32_t>& labels,
                     std::vector<std::vector<double>>* logits_out = nullptr) {
  const int64_t batch = static_cast<int64_t>(labels.size());
  double total = 0.0;
  for (int64_t r = 0; r < batch; ++r) {
    std::vector<double> a(images.begin() + r * sizes[0],
                          images.begin() + (r + 1) * sizes[0]);
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      const std::vector<double>& w = params[2 * l];
      const std::vector<double>& b = params[2 * l + 1];
      std::vector<double> z(b);
      for (int64_t i = 0; i < sizes[l]; ++i) {
        for (int64_t j = 0; j < sizes[l + 1]; ++j) {
          z[j] += a[i] * w[i * sizes[l + 1] + j];
        }
      }
      if (l + 2 < sizes.size()) {
        for (double& v : z) v = act == RELU ? std::max(v, 0.0) : std::tanh(v);
      }
      a = std::move(z);
    }
    double mx = a[0];
    for (double v : a) mx = std::max(mx, v);
    double sum = 0.0;
    for (double v : a) sum += std::exp(v - mx);
    total += std::log(sum) - (a[labels[r]] - mx);
    if (logits_out != nullptr) logits_out->push_back(a);
  }
  return total / batch;
}

// `batch` examples of `in` values in [-1, 1) and labels below `classes`.
Dataset RandomBatch(int64_t batch, int64_t in, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> images(batch * in);
  for (float& x : images) x = dist(rng);
  std::vector<int32_t> labels(batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng() % classes);
  return DatasetOf(std::move(images), std::move(labels), in,
                   static_cast<int>(classes));
}

data::Batch AllOf(const Dataset& d) {
  return BatchOf(d, 0, static_cast<int>(d.num_examples));
}

struct Case {
  const char* backend;
  Activation act;
  std::vector<int64_t> sizes;
};

class MlpLayersTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    backend_ = MakeBackend(GetParam().backend);
    ASSERT_NE(backend_, nullptr);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(MlpLayersTest, GradientsMatchCentralFiniteDifferences) {
  const Case& c = GetParam();
  std::unique_ptr<TrainableModel> made =
      MakeMlp(backend_.get(), c.sizes, c.act);
  ASSERT_NE(made, nullptr);
  TrainableModel& m = *made;
  InitializeMlp(backend_.get(), &m, c.act, 11);
  // Non-zero biases so that their gradients are exercised too.
  Params params;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
  for (int i = 0; i < m.num_parameters(); ++i) {
    std::vector<float> p = ParameterOf(backend_.get(), &m, i);
    if (m.parameters()[i].shape.size() == 1) {
      for (float& v : p) v = dist(rng);
      ASSERT_TRUE(m.SetParameterRange(i, 0, p).ok());
    }
    params.emplace_back(p.begin(), p.end());
  }
  const Dataset data = RandomBatch(6, c.sizes.front(), c.sizes.back(), 9);

  absl::StatusOr<float> loss = m.TrainStep(AllOf(data), {});
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double ref_loss =
      ReferenceLoss(c.sizes, c.act, params, data.images, data.labels);
  EXPECT_NEAR(*loss, ref_loss, 1e-5 + 1e-5 * std::abs(ref_loss));

  const double h = 1e-5;
  for (int i = 0; i < m.num_parameters(); ++i) {
    const std::vector<float> grad = GradientOf(&m, i);
    for (size_t j = 0; j < grad.size(); ++j) {
      Params plus = params;
      Params minus = params;
      plus[i][j] += h;
      minus[i][j] -= h;
      const double fd =
          (ReferenceLoss(c.sizes, c.act, plus, data.images, data.labels) -
           ReferenceLoss(c.sizes, c.act, minus, data.images, data.labels)) /
          (2 * h);
      EXPECT_NEAR(grad[j], fd, 2e-5 + 1e-3 * std::abs(fd))
          << m.parameters()[i].name << "[" << j << "]";
    }
  }
}

TEST_P(MlpLayersTest, EvaluateCountsArgmaxHitsAndMatchesTheLoss) {
  const Case& c = GetParam();
  std::unique_ptr<TrainableModel> m = MakeMlp(backend_.get(), c.sizes, c.act);
  ASSERT_NE(m, nullptr);
  InitializeMlp(backend_.get(), m.get(), c.act, 2);
  Params params;
  for (int i = 0; i < m->num_parameters(); ++i) {
    const std::vector<float> p = ParameterOf(backend_.get(), m.get(), i);
    params.emplace_back(p.begin(), p.end());
  }
  const Dataset data = RandomBatch(50, c.sizes.front(), c.sizes.back(), 4);
  std::vector<std::vector<double>> logits;
  const double ref_loss =
      ReferenceLoss(c.sizes, c.act, params, data.images, data.labels, &logits);
  int64_t ref_correct = 0;
  for (size_t r = 0; r < data.labels.size(); ++r) {
    const auto it = std::max_element(logits[r].begin(), logits[r].end());
    ref_correct += (it - logits[r].begin()) == data.labels[r];
  }
  absl::StatusOr<ModelEvaluation> eval = EvaluateRange(*m, data, 0, 50);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->examples, 50);
  EXPECT_EQ(eval->correct, ref_correct);
  EXPECT_NEAR(eval->loss, ref_loss, 1e-5 + 1e-5 * ref_loss);
}

TEST_P(MlpLayersTest, SgdStepsReduceTheLoss) {
  const Case& c = GetParam();
  std::unique_ptr<TrainableModel> m = MakeMlp(backend_.get(), c.sizes, c.act);
  ASSERT_NE(m, nullptr);
  InitializeMlp(backend_.get(), m.get(), c.act, 1);
  Dataset data = RandomBatch(16, c.sizes.front(), c.sizes.back(), 3);
  // A learnable rule: the label is the largest of the first `classes` inputs.
  const int64_t in = c.sizes.front();
  for (size_t r = 0; r < data.labels.size(); ++r) {
    const float* x = data.images.data() + r * in;
    data.labels[r] =
        static_cast<int32_t>(std::max_element(x, x + c.sizes.back()) - x);
  }
  const data::Batch batch = AllOf(data);
  absl::StatusOr<float> first = m->TrainStep(batch, {});
  ASSERT_TRUE(first.ok());
  float last = *first;
  for (int step = 0; step < 100; ++step) {
    for (int i = 0; i < m->num_parameters(); ++i) {
      ASSERT_TRUE(backend_->Axpy(-0.5f, m->gradient(i), m->parameter(i)).ok());
    }
    absl::StatusOr<float> loss = m->TrainStep(batch, {});
    ASSERT_TRUE(loss.ok());
    last = *loss;
  }
  EXPECT_LT(last, 0.5f * *first);
}

INSTANTIATE_TEST_SUITE_P(
    All, MlpLayersTest,
    testing::Values(Case{"cpu", RELU, {5, 4, 3}},
                    Case{"cpu", TANH, {4, 5, 3, 3}},
                    Case{"cuda_emulated", RELU, {4, 6, 5, 3}},
                    Case{"cuda_emulated", TANH, {5, 4, 3}}),
    [](const testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.backend, "_",
                          info.param.act == RELU ? "relu" : "tanh", "_",
                          info.param.sizes.size() - 1, "layers");
    });

TEST(MlpLayers, NamesParametersLikeTheParameterServer) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  std::unique_ptr<TrainableModel> m =
      MakeMlp(backend.get(), {784, 256, 128, 10});
  ASSERT_NE(m, nullptr);
  const std::vector<ParameterInfo>& p = m->parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].name, "fc0/weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{784, 256}));
  EXPECT_EQ(p[1].name, "fc0/bias");
  EXPECT_EQ(p[1].shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(p[2].name, "fc1/weight");
  EXPECT_EQ(p[5].name, "fc2/bias");
  EXPECT_EQ(p[5].size, 10);
  for (const ParameterInfo& q : p) EXPECT_NE(q.name, "fc9/weight");
}

// The tensors, names, order and shapes are common/spec/model.h's (the parameter
// servers place and initialise those); only the first layer's weight is
// used in row blocks.
TEST(MlpLayers, ParametersAreTheServersTensorsInTheirOrder) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  const ModelSpec spec = MlpOf({784, 64, 32, 10});
  auto model = CreateLayerModel(spec, 784, backend.get());
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
    EXPECT_EQ((*model)->SplitsRows(i), i == 0) << p.name;
  }
  EXPECT_FALSE((*model)->SplitsRows(-1));
  EXPECT_FALSE((*model)->SplitsRows(6));
}

TEST(MlpLayers, RejectsOtherModelsAndMismatchedInput) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  EXPECT_EQ(CreateLayerModel(ModelSpec(), 784, backend.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s =
      CreateLayerModel(MlpOf({100, 8, 10}), 784, backend.get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has 100 values"), std::string::npos) << s;
  EXPECT_NE(s.message().find("784"), std::string::npos) << s;
}

TEST(MlpLayers, RejectsBadInput) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  Backend* b = backend.get();
  EXPECT_FALSE(CreateLayerModel(MlpOf({3, 0}), 3, b).ok());
  EXPECT_FALSE(CreateLayerModel(MlpOf({3, 0, 2}), 3, b).ok());
  EXPECT_FALSE(CreateLayerModel(MlpOf({3, 2}), 3, nullptr).ok());
  std::unique_ptr<TrainableModel> made = MakeMlp(b, {3, 2});
  ASSERT_NE(made, nullptr);
  TrainableModel& m = *made;
  const std::vector<float> images(6, 0.5f);
  const auto invalid = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument;
  };
  const auto data = [&](std::vector<int32_t> labels) {
    return DatasetOf(images, std::move(labels), 3, 2);
  };
  EXPECT_PRED1(invalid, m.TrainStep(AllOf(data({0, 2})), {}).status());
  EXPECT_PRED1(invalid, m.TrainStep(AllOf(data({0, -1})), {}).status());
  // One example of 6 values.
  EXPECT_PRED1(invalid,
               m.TrainStep(AllOf(DatasetOf(images, {0}, 6, 2)), {}).status());
  EXPECT_PRED1(invalid, m.TrainStep(BatchOf(data({0, 1}), 0, 0), {}).status());
  EXPECT_PRED1(invalid, EvaluateRange(m, data({0, 5}), 0, 2).status());
  EXPECT_PRED1(invalid, m.SetParameterRange(0, 0, std::vector<float>(7)));
  EXPECT_PRED1(invalid, m.SetParameterRange(7, 0, std::vector<float>(6)));
  DeviceBuffer none;
  EXPECT_PRED1(invalid, m.SwapParameterBuffer(1, none));
  std::vector<float> small(2);
  EXPECT_PRED1(invalid, m.GetGradientRange(0, 5, absl::MakeSpan(small)));
  EXPECT_EQ(m.gradient(9).data, nullptr);
  EXPECT_EQ(m.parameter(-1).data, nullptr);
  // Still usable after the errors.
  EXPECT_TRUE(m.TrainStep(AllOf(data({0, 1})), {}).ok());
}

// Without row blocks each gradient is handed out whole as soon as backward
// has produced it, output layer first, and is complete then.
TEST(MlpLayers, ReportsEachGradientAsSoonAsItIsReady) {
  std::unique_ptr<Backend> backend = MakeBackend("cuda_emulated");
  std::unique_ptr<TrainableModel> made = MakeMlp(backend.get(), {6, 5, 4, 3});
  ASSERT_NE(made, nullptr);
  TrainableModel& m = *made;
  InitializeMlp(backend.get(), &m, RELU, 8);
  const Dataset data = RandomBatch(7, 6, 3, 12);
  std::vector<int> order;
  std::vector<std::vector<float>> seen(m.num_parameters());
  ModelStepHooks hooks;
  hooks.on_gradient_part = [&](int index, int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, m.parameters()[index].size);
    order.push_back(index);
    seen[index] = GradientOf(&m, index);
  };
  absl::StatusOr<float> loss = m.TrainStep(AllOf(data), hooks);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(order, (std::vector<int>{4, 5, 2, 3, 0, 1}));
  for (int i = 0; i < m.num_parameters(); ++i) {
    EXPECT_EQ(seen[i], GradientOf(&m, i)) << m.parameters()[i].name;
  }
}

// The parameters in the order their gradients completed, from the parts
// on_gradient_part announced.
std::vector<int> Completed(const std::vector<std::vector<int64_t>>& parts,
                           const TrainableModel& m) {
  std::vector<int64_t> done(m.num_parameters(), 0);
  std::vector<int> order;
  for (const std::vector<int64_t>& p : parts) {
    done[p[0]] += p[2] - p[1];
    if (done[p[0]] == m.parameters()[p[0]].size) {
      order.push_back(static_cast<int>(p[0]));
    }
  }
  return order;
}

// The first layer in row blocks: forward waits for each block before it
// reads it, backward hands out the gradient block by block, and the loss and
// gradients equal those of the unsplit step; weights written from the
// before_use hook (as a worker's pull arriving) are the ones used.
TEST(MlpLayers, StepHooksSplitTheFirstLayerIntoRowBlocks) {
  for (const char* which : {"cpu", "cuda_emulated"}) {
    SCOPED_TRACE(which);
    std::unique_ptr<Backend> backend = MakeBackend(which);
    ASSERT_NE(backend, nullptr);
    const std::vector<int64_t> sizes = {7, 5, 4, 3};
    std::unique_ptr<TrainableModel> plain = MakeMlp(backend.get(), sizes);
    std::unique_ptr<TrainableModel> split = MakeMlp(backend.get(), sizes);
    ASSERT_TRUE(plain != nullptr && split != nullptr);
    InitializeMlp(backend.get(), plain.get(), RELU, 3);
    const Dataset data = RandomBatch(11, 7, 3, 9);
    absl::StatusOr<float> want = plain->TrainStep(AllOf(data), {});
    ASSERT_TRUE(want.ok()) << want.status();

    // The split model starts with zero weights; the hook "receives" the
    // plain model's weights just before each use.
    TrainableModel& m = *split;
    std::vector<std::vector<float>> weights(m.num_parameters());
    for (int i = 0; i < m.num_parameters(); ++i) {
      weights[i] = ParameterOf(backend.get(), plain.get(), i);
    }
    std::vector<std::vector<int64_t>> used, parts;
    bool between = false;
    ModelStepHooks hooks;
    hooks.row_splits = {{2, 3, 6}};
    hooks.before_use = [&](int index, int64_t begin, int64_t end) {
      used.push_back({index, begin, end});
      return m.SetParameterRange(
          index, begin,
          absl::MakeConstSpan(weights[index]).subspan(begin, end - begin));
    };
    hooks.before_backward = [&] {
      between = used.size() == 9 && parts.empty();
      return absl::OkStatus();
    };
    hooks.on_gradient_part = [&](int index, int64_t begin, int64_t end) {
      parts.push_back({index, begin, end});
      std::vector<float> got(end - begin);
      ASSERT_TRUE(m.GetGradientRange(index, begin, absl::MakeSpan(got)).ok());
      const std::vector<float> full = GradientOf(plain.get(), index);
      for (int64_t e = begin; e < end; ++e) {
        EXPECT_NEAR(got[e - begin], full[e], 1e-5) << index << " " << e;
      }
    };
    absl::StatusOr<float> got = m.TrainStep(AllOf(data), hooks);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, *want, 1e-5);
    EXPECT_TRUE(between);
    // fc0/weight is [7, 5]: rows {0,2}, {2,3}, {3,6}, {6,7}.
    EXPECT_EQ(used, (std::vector<std::vector<int64_t>>{{0, 0, 10},
                                                       {0, 10, 15},
                                                       {0, 15, 30},
                                                       {0, 30, 35},
                                                       {1, 0, 5},
                                                       {2, 0, 20},
                                                       {3, 0, 4},
                                                       {4, 0, 12},
                                                       {5, 0, 3}}));
    EXPECT_EQ(parts, (std::vector<std::vector<int64_t>>{{4, 0, 12},
                                                        {5, 0, 3},
                                                        {2, 0, 20},
                                                        {3, 0, 4},
                                                        {0, 0, 10},
                                                        {0, 10, 15},
                                                        {0, 15, 30},
                                                        {0, 30, 35},
                                                        {1, 0, 5}}));
    EXPECT_EQ(Completed(parts, m), (std::vector<int>{4, 5, 2, 3, 0, 1}));

    // An error from a hook ends the step with it; bad splits are refused,
    // and so are splits of a parameter that does not split.
    hooks.before_use = [](int index, int64_t, int64_t) {
      return index == 2 ? absl::CancelledError("stop") : absl::OkStatus();
    };
    EXPECT_EQ(m.TrainStep(AllOf(data), hooks).status().code(),
              absl::StatusCode::kCancelled);
    hooks.before_use = nullptr;
    for (std::vector<int64_t> bad :
         {std::vector<int64_t>{0}, std::vector<int64_t>{3, 3},
          std::vector<int64_t>{7}}) {
      hooks.row_splits = {bad};
      EXPECT_EQ(m.TrainStep(AllOf(data), hooks).status().code(),
                absl::StatusCode::kInvalidArgument);
    }
    hooks.row_splits = {{}, {}, {2}};
    EXPECT_EQ(m.TrainStep(AllOf(data), hooks).status().code(),
              absl::StatusCode::kInvalidArgument);
    hooks.row_splits = std::vector<std::vector<int64_t>>(7);
    EXPECT_EQ(m.TrainStep(AllOf(data), hooks).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(m.SetParameterRange(0, 30, std::vector<float>(6)).code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<float> out(2);
    EXPECT_EQ(m.GetGradientRange(1, -1, absl::MakeSpan(out)).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Split and unsplit steps of the MLP at the worker's shapes (784-256-128-10,
// fc0/weight in the step pipeline's two blocks of 392 rows) agree over a few
// SGD steps, and evaluation (never split) is unaffected.
TEST(MlpLayers, SplitStepsTrainAsTheUnsplitOnes) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  const std::vector<int64_t> sizes = {784, 256, 128, 10};
  std::unique_ptr<TrainableModel> plain = MakeMlp(backend.get(), sizes);
  std::unique_ptr<TrainableModel> split = MakeMlp(backend.get(), sizes);
  ASSERT_TRUE(plain != nullptr && split != nullptr);
  InitializeMlp(backend.get(), plain.get(), RELU, 4);
  InitializeMlp(backend.get(), split.get(), RELU, 4);
  const Dataset data = RandomData(96, 784, 10, 6);
  ModelStepHooks hooks;
  hooks.row_splits = {{392}};
  for (int step = 0; step < 3; ++step) {
    const data::Batch batch = BatchOf(data, step * 32, 32);
    absl::StatusOr<float> a = plain->TrainStep(batch, {});
    absl::StatusOr<float> b = split->TrainStep(batch, hooks);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(*b, *a, 1e-5 * std::abs(*a)) << "step " << step;
    for (int i = 0; i < plain->num_parameters(); ++i) {
      const std::vector<float> ga = GradientOf(plain.get(), i);
      const std::vector<float> gb = GradientOf(split.get(), i);
      for (size_t j = 0; j < ga.size(); ++j) {
        ASSERT_NEAR(gb[j], ga[j], 1e-6 + 1e-4 * std::abs(ga[j]))
            << plain->parameters()[i].name << "[" << j << "] step " << step;
      }
      ASSERT_TRUE(
          backend->Axpy(-0.1f, plain->gradient(i), plain->parameter(i)).ok());
      ASSERT_TRUE(
          backend->Axpy(-0.1f, split->gradient(i), split->parameter(i)).ok());
    }
  }
  absl::StatusOr<ModelEvaluation> ea = EvaluateRange(*plain, data, 0, 96);
  absl::StatusOr<ModelEvaluation> eb = EvaluateRange(*split, data, 0, 96);
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_NEAR(eb->loss, ea->loss, 1e-5 * ea->loss);
  EXPECT_EQ(eb->examples, 96);
}

// Swapped-in buffers serve as the model's own: weights swapped in are the
// ones the step computes on, and a gradient buffer full of NaN before the
// swap holds the same gradient after the step as a fresh model's. The
// buffers swapped out keep what they held.
TEST(MlpLayers, SwapsParameterAndGradientBuffersWithoutCopies) {
  for (const char* which : {"cpu", "cuda_emulated"}) {
    SCOPED_TRACE(which);
    std::unique_ptr<Backend> backend = MakeBackend(which);
    ASSERT_NE(backend, nullptr);
    Backend* b = backend.get();
    const std::vector<int64_t> sizes = {7, 5, 3};
    std::unique_ptr<TrainableModel> reference = MakeMlp(b, sizes);
    std::unique_ptr<TrainableModel> swapped = MakeMlp(b, sizes);
    ASSERT_TRUE(reference != nullptr && swapped != nullptr);
    TrainableModel& ref = *reference;
    TrainableModel& m = *swapped;
    InitializeMlp(b, &ref, RELU, 3);
    const Dataset data = RandomBatch(6, 7, 3, 5);
    const float nan = std::nanf("");
    for (int i = 0; i < m.num_parameters(); ++i) {
      const int64_t n = m.parameters()[i].size;
      const std::vector<float> w = ParameterOf(b, &ref, i);
      auto weights = b->AllocateArray<float>(n);
      auto grads = b->AllocateArray<float>(n);
      ASSERT_TRUE(weights.ok() && grads.ok());
      const void* weights_memory = weights->data();
      ASSERT_TRUE(b->CopyToDevice(w.data(), weights->data(), n * 4).ok());
      ASSERT_TRUE(b->Fill(nan, grads->Span<float>(n)).ok());
      ASSERT_TRUE(m.SwapParameterBuffer(i, *weights).ok());
      ASSERT_TRUE(m.SwapGradientBuffer(i, *grads).ok());
      EXPECT_EQ(m.parameter(i).data, weights_memory);
      // What was swapped out is the model's previous (zero) buffer.
      std::vector<float> old(n, 1.0f);
      ASSERT_TRUE(b->CopyToHost(weights->data(), old.data(), n * 4).ok());
      EXPECT_EQ(old, std::vector<float>(n, 0.0f));
    }
    absl::StatusOr<float> want = ref.TrainStep(AllOf(data), {});
    absl::StatusOr<float> got = m.TrainStep(AllOf(data), {});
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(*got, *want);
    for (int i = 0; i < m.num_parameters(); ++i) {
      EXPECT_EQ(GradientOf(&m, i), GradientOf(&ref, i)) << "parameter " << i;
    }
    // A buffer too small, or none, is refused.
    auto small = b->AllocateArray<float>(2);
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(m.SwapParameterBuffer(0, *small).code(),
              absl::StatusCode::kInvalidArgument);
    DeviceBuffer none;
    EXPECT_EQ(m.SwapGradientBuffer(1, none).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(m.SwapGradientBuffer(99, *small).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(MlpLayers, GrowsToLargerBatches) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  std::unique_ptr<TrainableModel> m = MakeMlp(backend.get(), {3, 4, 2});
  ASSERT_NE(m, nullptr);
  InitializeMlp(backend.get(), m.get(), RELU, 0);
  for (int64_t batch : {2, 9, 1, 30}) {
    const Dataset data = DatasetOf(std::vector<float>(batch * 3, 0.25f),
                                   std::vector<int32_t>(batch, 1), 3, 2);
    absl::StatusOr<float> loss = m->TrainStep(AllOf(data), {});
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(std::isfinite(*loss));
  }
}

// The hooks as the step pipeline drives them on a worker's model: the
// weight's blocks, then the rest whole in forward order; the gradients
// output layer first, the weight's blocks in the splits' order.
TEST(MlpLayers, HooksSeeTheFirstWeightInRowBlocks) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  // fc0/weight [4, 3], fc0/bias [3], fc1/weight [3, 2], fc1/bias [2].
  std::unique_ptr<TrainableModel> m = MakeMlp(backend.get(), {4, 3, 2});
  ASSERT_NE(m, nullptr);
  for (int i = 0; i < m->num_parameters(); ++i) {
    std::vector<float> w(m->parameters()[i].size);
    for (size_t j = 0; j < w.size(); ++j) {
      w[j] = 0.1f * static_cast<float>((j * 5 + i) % 7) - 0.3f;
    }
    ASSERT_TRUE(m->SetParameterRange(i, 0, w).ok());
  }
  const Dataset d = RandomData(6, 4, 2, 1);
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
  absl::StatusOr<float> loss = m->TrainStep(BatchOf(d, 0, 6), hooks);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_GT(*loss, 0);
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "use 0 0 3", "use 0 3 9", "use 0 9 12", "use 1 0 3",
                       "use 2 0 6", "use 3 0 2", "backward", "grad 2 0 6",
                       "grad 3 0 2", "grad 0 0 3", "grad 0 3 9", "grad 0 9 12",
                       "grad 1 0 3"}));
  // The gradient the hooks announced is there.
  double sum = 0;
  for (float x : GradientOf(m.get(), 0)) sum += x * x;
  EXPECT_GT(sum, 0);

  // An error from a hook ends the step with it.
  hooks.before_backward = [] { return absl::AbortedError("stop"); };
  EXPECT_EQ(m->TrainStep(BatchOf(d, 0, 6), hooks).status().code(),
            absl::StatusCode::kAborted);
}

TEST(MlpLayers, EvaluatesARangeOfTheDataset) {
  std::unique_ptr<Backend> backend = MakeBackend("cpu");
  std::unique_ptr<TrainableModel> m = MakeMlp(backend.get(), {4, 3, 2});
  ASSERT_NE(m, nullptr);
  InitializeMlp(backend.get(), m.get(), RELU, 5);
  const Dataset d = RandomData(6, 4, 2, 2);
  auto all = EvaluateRange(*m, d, 0, 6);
  auto first = EvaluateRange(*m, d, 0, 2);
  auto rest = EvaluateRange(*m, d, 2, 4);
  ASSERT_TRUE(all.ok() && first.ok() && rest.ok()) << all.status();
  EXPECT_EQ(all->examples, 6);
  EXPECT_EQ(first->examples, 2);
  EXPECT_EQ(rest->examples, 4);
  EXPECT_EQ(all->correct, first->correct + rest->correct);
  EXPECT_NEAR(all->loss * 6, first->loss * 2 + rest->loss * 4, 1e-5);
  EXPECT_GT(all->loss, 0);
  // Outside the dataset.
  EXPECT_EQ(EvaluateRange(*m, d, 4, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EvaluateRange(*m, d, -1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker::model
