#include "worker/model/mlp.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_emulated_backend.h"

namespace ps::worker::model {

using kernels::Activation;
using kernels::Backend;
using kernels::CreateCpuBackend;
using kernels::CreateCudaEmulatedBackend;
using kernels::DeviceBuffer;
namespace {

using Params = std::vector<std::vector<double>>;

// Double-precision reference: mean softmax cross-entropy of the MLP, and the
// logits. Parameters in Mlp order: fc<i>/weight [in, out], fc<i>/bias [out].
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
        for (double& v : z)
          v = act == Activation::kRelu ? std::max(v, 0.0) : std::tanh(v);
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

struct Case {
  const char* backend;
  Activation act;
  std::vector<int64_t> sizes;
};

class MlpTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> b =
        std::string(GetParam().backend) == "cpu" ? CreateCpuBackend({})
                                                 : CreateCudaEmulatedBackend();
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
  }
  std::unique_ptr<Backend> backend_;
};

void RandomBatch(int64_t batch, int64_t in, int64_t classes, uint32_t seed,
                 std::vector<float>* images, std::vector<int32_t>* labels) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  images->resize(batch * in);
  for (float& x : *images) x = dist(rng);
  labels->resize(batch);
  for (int32_t& l : *labels) l = static_cast<int32_t>(rng() % classes);
}

TEST_P(MlpTest, GradientsMatchCentralFiniteDifferences) {
  const Case& c = GetParam();
  auto mlp = Mlp::Create(backend_.get(),
                         {.layer_sizes = c.sizes, .activation = c.act});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  Mlp& m = **mlp;
  ASSERT_TRUE(m.InitializeParameters(11).ok());
  // Non-zero biases so that their gradients are exercised too.
  Params params;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
  for (int i = 0; i < m.num_parameters(); ++i) {
    std::vector<float> p(m.parameters()[i].size);
    ASSERT_TRUE(m.GetParameter(i, absl::MakeSpan(p)).ok());
    if (m.parameters()[i].shape.size() == 1) {
      for (float& v : p) v = dist(rng);
      ASSERT_TRUE(m.SetParameter(i, p).ok());
    }
    params.emplace_back(p.begin(), p.end());
  }
  std::vector<float> images;
  std::vector<int32_t> labels;
  RandomBatch(6, c.sizes.front(), c.sizes.back(), 9, &images, &labels);

  absl::StatusOr<float> loss = m.TrainStep(images, labels);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double ref_loss = ReferenceLoss(c.sizes, c.act, params, images, labels);
  EXPECT_NEAR(*loss, ref_loss, 1e-5 + 1e-5 * std::abs(ref_loss));

  const double h = 1e-5;
  for (int i = 0; i < m.num_parameters(); ++i) {
    std::vector<float> grad(m.parameters()[i].size);
    ASSERT_TRUE(m.GetGradient(i, absl::MakeSpan(grad)).ok());
    for (size_t j = 0; j < grad.size(); ++j) {
      Params plus = params;
      Params minus = params;
      plus[i][j] += h;
      minus[i][j] -= h;
      const double fd = (ReferenceLoss(c.sizes, c.act, plus, images, labels) -
                         ReferenceLoss(c.sizes, c.act, minus, images, labels)) /
                        (2 * h);
      EXPECT_NEAR(grad[j], fd, 2e-5 + 1e-3 * std::abs(fd))
          << m.parameters()[i].name << "[" << j << "]";
    }
  }
}

TEST_P(MlpTest, EvaluateCountsArgmaxHitsAndMatchesTheLoss) {
  const Case& c = GetParam();
  auto mlp = Mlp::Create(backend_.get(),
                         {.layer_sizes = c.sizes, .activation = c.act});
  ASSERT_TRUE(mlp.ok());
  ASSERT_TRUE((*mlp)->InitializeParameters(2).ok());
  Params params;
  for (int i = 0; i < (*mlp)->num_parameters(); ++i) {
    std::vector<float> p((*mlp)->parameters()[i].size);
    ASSERT_TRUE((*mlp)->GetParameter(i, absl::MakeSpan(p)).ok());
    params.emplace_back(p.begin(), p.end());
  }
  std::vector<float> images;
  std::vector<int32_t> labels;
  RandomBatch(50, c.sizes.front(), c.sizes.back(), 4, &images, &labels);
  std::vector<std::vector<double>> logits;
  const double ref_loss =
      ReferenceLoss(c.sizes, c.act, params, images, labels, &logits);
  int64_t ref_correct = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    const auto it = std::max_element(logits[r].begin(), logits[r].end());
    ref_correct += (it - logits[r].begin()) == labels[r];
  }
  absl::StatusOr<Mlp::Evaluation> eval = (*mlp)->Evaluate(images, labels);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->examples, 50);
  EXPECT_EQ(eval->correct, ref_correct);
  EXPECT_NEAR(eval->loss, ref_loss, 1e-5 + 1e-5 * ref_loss);
}

TEST_P(MlpTest, SgdStepsReduceTheLoss) {
  const Case& c = GetParam();
  auto mlp = Mlp::Create(backend_.get(),
                         {.layer_sizes = c.sizes, .activation = c.act});
  ASSERT_TRUE(mlp.ok());
  Mlp& m = **mlp;
  ASSERT_TRUE(m.InitializeParameters(1).ok());
  std::vector<float> images;
  std::vector<int32_t> labels;
  RandomBatch(16, c.sizes.front(), c.sizes.back(), 3, &images, &labels);
  // A learnable rule: the label is the largest of the first `classes` inputs.
  const int64_t in = c.sizes.front();
  for (size_t r = 0; r < labels.size(); ++r) {
    const float* x = images.data() + r * in;
    labels[r] =
        static_cast<int32_t>(std::max_element(x, x + c.sizes.back()) - x);
  }
  absl::StatusOr<float> first = m.TrainStep(images, labels);
  ASSERT_TRUE(first.ok());
  float last = *first;
  for (int step = 0; step < 100; ++step) {
    for (int i = 0; i < m.num_parameters(); ++i) {
      ASSERT_TRUE(backend_->Axpy(-0.5f, m.gradient(i), m.parameter(i)).ok());
    }
    absl::StatusOr<float> loss = m.TrainStep(images, labels);
    ASSERT_TRUE(loss.ok());
    last = *loss;
  }
  EXPECT_LT(last, 0.5f * *first);
}

INSTANTIATE_TEST_SUITE_P(
    All, MlpTest,
    testing::Values(Case{"cpu", Activation::kRelu, {5, 4, 3}},
                    Case{"cpu", Activation::kTanh, {4, 5, 3, 3}},
                    Case{"cuda_emulated", Activation::kRelu, {4, 6, 5, 3}},
                    Case{"cuda_emulated", Activation::kTanh, {5, 4, 3}}),
    [](const testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.backend, "_",
                          info.param.act == Activation::kRelu ? "relu" : "tanh",
                          "_", info.param.sizes.size() - 1, "layers");
    });

TEST(Mlp, NamesParametersLikeTheParameterServer) {
  auto backend = CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  auto mlp = Mlp::Create(backend->get(), {.layer_sizes = {784, 256, 128, 10}});
  ASSERT_TRUE(mlp.ok());
  const std::vector<ParameterInfo>& p = (*mlp)->parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].name, "fc0/weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{784, 256}));
  EXPECT_EQ(p[1].name, "fc0/bias");
  EXPECT_EQ(p[1].shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(p[5].name, "fc2/bias");
  EXPECT_EQ(p[5].size, 10);
  EXPECT_EQ((*mlp)->FindParameter("fc1/weight"), 2);
  EXPECT_EQ((*mlp)->FindParameter("fc9/weight"), -1);
}

TEST(Mlp, RejectsBadInput) {
  auto backend = CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  EXPECT_FALSE(Mlp::Create(backend->get(), {.layer_sizes = {3}}).ok());
  EXPECT_FALSE(Mlp::Create(backend->get(), {.layer_sizes = {3, 0, 2}}).ok());
  EXPECT_FALSE(Mlp::Create(nullptr, {.layer_sizes = {3, 2}}).ok());
  auto mlp = Mlp::Create(backend->get(), {.layer_sizes = {3, 2}});
  ASSERT_TRUE(mlp.ok());
  Mlp& m = **mlp;
  const std::vector<float> images(6, 0.5f);
  const auto invalid = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_PRED1(invalid,
               m.TrainStep(images, std::vector<int32_t>{0, 2}).status());
  EXPECT_PRED1(invalid,
               m.TrainStep(images, std::vector<int32_t>{0, -1}).status());
  EXPECT_PRED1(invalid, m.TrainStep(images, std::vector<int32_t>{0}).status());
  EXPECT_PRED1(invalid, m.TrainStep({}, {}).status());
  EXPECT_PRED1(invalid,
               m.Evaluate(images, std::vector<int32_t>{0, 5}).status());
  EXPECT_PRED1(invalid, m.SetParameter(0, std::vector<float>(5)));
  EXPECT_PRED1(invalid, m.SetParameter(7, std::vector<float>(6)));
  EXPECT_PRED1(invalid, m.SetParameterFromDevice(1, {}));
  std::vector<float> small(1);
  EXPECT_PRED1(invalid, m.GetGradient(0, absl::MakeSpan(small)));
  EXPECT_EQ(m.gradient(9).data, nullptr);
  // Still usable after the errors.
  EXPECT_TRUE(m.TrainStep(images, std::vector<int32_t>{0, 1}).ok());
}

TEST(Mlp, ReportsEachGradientAsSoonAsItIsReady) {
  auto backend = CreateCudaEmulatedBackend();
  ASSERT_TRUE(backend.ok());
  auto mlp = Mlp::Create(backend->get(), {.layer_sizes = {6, 5, 4, 3}});
  ASSERT_TRUE(mlp.ok());
  Mlp& m = **mlp;
  ASSERT_TRUE(m.InitializeParameters(8).ok());
  std::vector<float> images;
  std::vector<int32_t> labels;
  RandomBatch(7, 6, 3, 12, &images, &labels);
  std::vector<int> order;
  std::vector<std::vector<float>> seen(m.num_parameters());
  absl::StatusOr<float> loss = m.TrainStep(images, labels, [&](int index) {
    order.push_back(index);
    seen[index].resize(m.parameters()[index].size);
    EXPECT_TRUE(m.GetGradient(index, absl::MakeSpan(seen[index])).ok());
  });
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(order, (std::vector<int>{4, 5, 2, 3, 0, 1}));
  for (int i = 0; i < m.num_parameters(); ++i) {
    std::vector<float> final_grad(m.parameters()[i].size);
    ASSERT_TRUE(m.GetGradient(i, absl::MakeSpan(final_grad)).ok());
    EXPECT_EQ(seen[i], final_grad) << m.parameters()[i].name;
  }
}

// The first layer in row blocks: forward waits for each block before it
// reads it, backward hands out the gradient block by block, and the loss and
// gradients equal those of the unsplit step; weights written from the
// before_use hook (as a worker's pull arriving) are the ones used.
TEST(Mlp, StepHooksSplitTheFirstLayerIntoRowBlocks) {
  for (const char* which : {"cpu", "cuda-emulated"}) {
    SCOPED_TRACE(which);
    auto backend = std::string(which) == "cpu" ? CreateCpuBackend({})
                                               : CreateCudaEmulatedBackend();
    ASSERT_TRUE(backend.ok());
    const std::vector<int64_t> sizes = {7, 5, 4, 3};
    auto plain = Mlp::Create(backend->get(), {.layer_sizes = sizes});
    auto split = Mlp::Create(backend->get(), {.layer_sizes = sizes});
    ASSERT_TRUE(plain.ok() && split.ok());
    ASSERT_TRUE((*plain)->InitializeParameters(3).ok());
    std::vector<float> images;
    std::vector<int32_t> labels;
    RandomBatch(11, 7, 3, 9, &images, &labels);
    absl::StatusOr<float> want = (*plain)->TrainStep(images, labels);
    ASSERT_TRUE(want.ok()) << want.status();

    // The split model starts with zero weights; the hook "receives" the
    // plain model's weights just before each use.
    Mlp& m = **split;
    std::vector<std::vector<float>> weights(m.num_parameters());
    for (int i = 0; i < m.num_parameters(); ++i) {
      weights[i].resize(m.parameters()[i].size);
      ASSERT_TRUE((*plain)->GetParameter(i, absl::MakeSpan(weights[i])).ok());
    }
    std::vector<std::vector<int64_t>> used, parts;
    std::vector<int> ready;
    bool between = false;
    Mlp::StepHooks hooks;
    hooks.first_weight_row_splits = {2, 3, 6};
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
      std::vector<float> got(end - begin), full(m.parameters()[index].size);
      ASSERT_TRUE(m.GetGradientRange(index, begin, absl::MakeSpan(got)).ok());
      ASSERT_TRUE((*plain)->GetGradient(index, absl::MakeSpan(full)).ok());
      for (int64_t e = begin; e < end; ++e) {
        EXPECT_NEAR(got[e - begin], full[e], 1e-5) << index << " " << e;
      }
    };
    hooks.on_gradient_ready = [&](int index) { ready.push_back(index); };
    absl::StatusOr<float> got = m.TrainStep(images, labels, hooks);
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
    EXPECT_EQ(ready, (std::vector<int>{4, 5, 2, 3, 0, 1}));

    // An error from a hook ends the step with it; bad splits are refused.
    hooks.before_use = [](int index, int64_t, int64_t) {
      return index == 2 ? absl::CancelledError("stop") : absl::OkStatus();
    };
    EXPECT_EQ(m.TrainStep(images, labels, hooks).status().code(),
              absl::StatusCode::kCancelled);
    hooks.before_use = nullptr;
    for (std::vector<int64_t> bad :
         {std::vector<int64_t>{0}, std::vector<int64_t>{3, 3},
          std::vector<int64_t>{7}}) {
      hooks.first_weight_row_splits = bad;
      EXPECT_EQ(m.TrainStep(images, labels, hooks).status().code(),
                absl::StatusCode::kInvalidArgument);
    }
    EXPECT_EQ(m.SetParameterRange(0, 30, std::vector<float>(6)).code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<float> out(2);
    EXPECT_EQ(m.GetGradientRange(1, -1, absl::MakeSpan(out)).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Swapped-in buffers serve as the model's own: weights swapped in are the
// ones the step computes on, and a gradient buffer full of NaN before the
// swap holds the same gradient after the step as a fresh model's. The
// buffers swapped out keep what they held.
TEST(Mlp, SwapsParameterAndGradientBuffersWithoutCopies) {
  for (const char* which : {"cpu", "cuda-emulated"}) {
    SCOPED_TRACE(which);
    auto backend = std::string(which) == "cpu" ? CreateCpuBackend({})
                                               : CreateCudaEmulatedBackend();
    ASSERT_TRUE(backend.ok());
    Backend* b = backend->get();
    const std::vector<int64_t> sizes = {7, 5, 3};
    auto reference = Mlp::Create(b, {.layer_sizes = sizes});
    auto swapped = Mlp::Create(b, {.layer_sizes = sizes});
    ASSERT_TRUE(reference.ok() && swapped.ok());
    Mlp& ref = **reference;
    Mlp& m = **swapped;
    ASSERT_TRUE(ref.InitializeParameters(3).ok());
    std::vector<float> images;
    std::vector<int32_t> labels;
    RandomBatch(6, 7, 3, 5, &images, &labels);
    const float nan = std::nanf("");
    for (int i = 0; i < m.num_parameters(); ++i) {
      const int64_t n = m.parameters()[i].size;
      std::vector<float> w(n);
      ASSERT_TRUE(ref.GetParameter(i, absl::MakeSpan(w)).ok());
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
    absl::StatusOr<float> want = ref.TrainStep(images, labels);
    absl::StatusOr<float> got = m.TrainStep(images, labels);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(*got, *want);
    for (int i = 0; i < m.num_parameters(); ++i) {
      const int64_t n = m.parameters()[i].size;
      std::vector<float> g_want(n), g_got(n);
      ASSERT_TRUE(ref.GetGradient(i, absl::MakeSpan(g_want)).ok());
      ASSERT_TRUE(m.GetGradient(i, absl::MakeSpan(g_got)).ok());
      EXPECT_EQ(g_got, g_want) << "parameter " << i;
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

TEST(Mlp, GrowsToLargerBatches) {
  auto backend = CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  auto mlp = Mlp::Create(backend->get(), {.layer_sizes = {3, 4, 2}});
  ASSERT_TRUE(mlp.ok());
  ASSERT_TRUE((*mlp)->InitializeParameters(0).ok());
  for (int64_t batch : {2, 9, 1, 30}) {
    std::vector<float> images(batch * 3, 0.25f);
    std::vector<int32_t> labels(batch, 1);
    absl::StatusOr<float> loss = (*mlp)->TrainStep(images, labels);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(std::isfinite(*loss));
  }
}

}  // namespace
}  // namespace ps::worker::model
