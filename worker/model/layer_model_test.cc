#include "worker/model/layer_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/model.h"
#include "kernels/cpu_backend.h"
#include "worker/model/model_test_util.h"

namespace ps::worker::model {
namespace {

std::unique_ptr<kernels::Backend> Cpu() {
  auto b = kernels::CreateCpuBackend({});
  EXPECT_TRUE(b.ok());
  return *std::move(b);
}

void SetRandomParameters(TrainableModel* m, uint64_t seed) {
  for (int i = 0; i < m->num_parameters(); ++i) {
    ASSERT_TRUE(
        m->SetParameterRange(
             i, 0, RandomValues(m->parameters()[i].size, 0.4f, seed + i))
            .ok());
  }
}

// One SGD step on the model's own buffers: w -= lr * g.
void Sgd(kernels::Backend* b, TrainableModel* m, float lr) {
  for (int i = 0; i < m->num_parameters(); ++i) {
    ASSERT_TRUE(b->Axpy(-lr, m->gradient(i), m->parameter(i)).ok());
  }
}

class MlpShorthandTest : public ::testing::TestWithParam<Activation> {};

// The MLP shorthand is the same network as its Dense layers written out
// (common/spec/model_graph.h expands it so): the same losses, gradients and
// evaluation bit for bit, first layer in row blocks or not.
TEST_P(MlpShorthandTest, MatchesItsLayersWrittenOutBitForBit) {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(12);
  spec.mutable_mlp()->add_hidden(8);
  spec.mutable_mlp()->add_hidden(6);
  spec.mutable_mlp()->set_num_classes(4);
  spec.mutable_mlp()->set_activation(GetParam());
  const std::string act = GetParam() == TANH ? "TANH" : "RELU";
  const std::string init = GetParam() == TANH ? "XAVIER_UNIFORM" : "HE_UNIFORM";
  auto dense = [&](const std::string& name, const std::string& in, int units,
                   bool last) {
    return absl::StrCat("layers { name: '", name, "' inputs: '", in,
                        "' dense { units: ", units,
                        last ? "" : absl::StrCat(" activation: ", act),
                        " weight_init { kind: ", init, " } } } ");
  };
  const ModelSpec written = SpecFromText(absl::StrCat(
      "inputs { name: 'dense' shape: 12 } ", dense("fc0", "dense", 8, false),
      dense("fc1", "fc0", 6, false), dense("fc2", "fc1", 4, true),
      "head { loss: SOFTMAX_CROSS_ENTROPY input: 'fc2' }"));
  auto backend = Cpu();
  auto layers = CreateLayerModel(spec, 12, backend.get());
  auto mlp = CreateLayerModel(written, 12, backend.get());
  ASSERT_TRUE(layers.ok()) << layers.status();
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  // The parameter servers' tensors too: names, shapes, order, initialisers.
  absl::StatusOr<std::vector<TensorSpec>> ta = ExpandModel(spec);
  absl::StatusOr<std::vector<TensorSpec>> tb = ExpandModel(written);
  ASSERT_TRUE(ta.ok() && tb.ok());
  ASSERT_EQ(ta->size(), tb->size());
  for (size_t i = 0; i < ta->size(); ++i) {
    EXPECT_EQ((*ta)[i].SerializeAsString(), (*tb)[i].SerializeAsString())
        << (*ta)[i].name();
  }
  TrainableModel* a = layers->get();
  TrainableModel* b = mlp->get();
  ASSERT_EQ(a->num_parameters(), b->num_parameters());
  for (int i = 0; i < a->num_parameters(); ++i) {
    EXPECT_EQ(a->parameters()[i].name, b->parameters()[i].name);
    EXPECT_EQ(a->parameters()[i].shape, b->parameters()[i].shape);
  }
  SetRandomParameters(a, 7);
  SetRandomParameters(b, 7);
  const Dataset data = RandomData(40, 12, 4, 3);
  for (int step = 0; step < 4; ++step) {
    const data::Batch batch = BatchOf(data, step * 10, 10);
    ModelStepHooks hooks;
    if (step % 2 == 1) hooks.row_splits = {{5}};
    absl::StatusOr<float> la = a->TrainStep(batch, hooks);
    absl::StatusOr<float> lb = b->TrainStep(batch, hooks);
    ASSERT_TRUE(la.ok()) << la.status();
    ASSERT_TRUE(lb.ok()) << lb.status();
    EXPECT_EQ(*la, *lb) << "step " << step;
    for (int i = 0; i < a->num_parameters(); ++i) {
      const std::vector<float> ga = GradientOf(a, i), gb = GradientOf(b, i);
      EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * 4))
          << a->parameters()[i].name << " at step " << step;
    }
    Sgd(backend.get(), a, 0.1f);
    Sgd(backend.get(), b, 0.1f);
  }
  absl::StatusOr<ModelEvaluation> ea = EvaluateRange(*a, data, 0, 40);
  absl::StatusOr<ModelEvaluation> eb = EvaluateRange(*b, data, 0, 40);
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_EQ(ea->loss, eb->loss);
  EXPECT_EQ(ea->correct, eb->correct);
  EXPECT_EQ(ea->examples, 40);
}

INSTANTIATE_TEST_SUITE_P(Activations, MlpShorthandTest,
                         ::testing::Values(RELU, TANH));

// A DAG with fan-out (the input read by two layers, a layer read by two
// others), Concat and Add: the whole model's gradient of the mean loss
// against finite differences of Evaluate's loss.
TEST(LayerModel, DagGradientMatchesFiniteDifferences) {
  const ModelSpec spec = SpecFromText(R"pb(
    inputs {
      name: "image"
      shape: [ 4, 4, 1 ]
    }
    inputs { name: "dense" shape: 16 }
    layers {
      name: "c"
      inputs: "image"
      conv2d { filters: 2 kernel_size: 3 padding: 1 activation: TANH }
    }
    layers {
      name: "p"
      inputs: "c"
      avg_pool2d { window: 2 }
    }
    layers {
      name: "f"
      inputs: "p"
      flatten {}
    }
    layers {
      name: "d"
      inputs: "dense"
      dense { units: 8 activation: TANH }
    }
    layers {
      name: "s"
      inputs: [ "f", "d" ]
      add {}
    }
    layers {
      name: "j"
      inputs: [ "s", "d" ]
      concat {}
    }
    layers {
      name: "out"
      inputs: "j"
      dense { units: 3 }
    }
    head { loss: SOFTMAX_CROSS_ENTROPY }
  )pb");
  auto backend = Cpu();
  auto made = CreateLayerModel(spec, 16, backend.get());
  ASSERT_TRUE(made.ok()) << made.status();
  TrainableModel* m = made->get();
  SetRandomParameters(m, 11);
  const Dataset data = RandomData(5, 16, 3, 5);
  ASSERT_TRUE(m->TrainStep(BatchOf(data, 0, 5), {}).ok());
  constexpr float kEps = 1e-3f;
  for (int i = 0; i < m->num_parameters(); ++i) {
    const std::vector<float> grad = GradientOf(m, i);
    for (int64_t j = 0; j < m->parameters()[i].size; ++j) {
      std::vector<float> w(1);
      const std::vector<float> all = RandomValues(
          m->parameters()[i].size, 0.4f, 11 + static_cast<uint64_t>(i));
      const float saved = all[j];
      auto loss_at = [&](float v) {
        w[0] = v;
        EXPECT_TRUE(m->SetParameterRange(i, j, w).ok());
        return static_cast<double>(EvaluateRange(*m, data, 0, 5)->loss);
      };
      const double numeric =
          (loss_at(saved + kEps) - loss_at(saved - kEps)) / (2 * kEps);
      loss_at(saved);
      EXPECT_NEAR(grad[j], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << m->parameters()[i].name << " element " << j;
    }
  }
}

// The hooks see every parameter once, whole: before_use in forward order
// before backward, on_gradient_part after.
TEST(LayerModel, HooksSeeEveryParameterOnce) {
  const ModelSpec spec = SpecFromText(R"pb(
    inputs {
      name: "image"
      shape: [ 4, 4, 1 ]
    }
    layers {
      name: "c"
      inputs: "image"
      conv2d { filters: 2 kernel_size: 3 }
    }
    layers {
      name: "f"
      inputs: "c"
      flatten {}
    }
    layers {
      name: "out"
      inputs: "f"
      dense { units: 2 }
    }
    head { loss: SOFTMAX_CROSS_ENTROPY }
  )pb");
  auto backend = Cpu();
  auto made = CreateLayerModel(spec, 16, backend.get());
  ASSERT_TRUE(made.ok()) << made.status();
  TrainableModel* m = made->get();
  std::vector<std::string> events;
  ModelStepHooks hooks;
  hooks.before_use = [&](int i, int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, m->parameters()[i].size);
    events.push_back("use " + m->parameters()[i].name);
    return absl::OkStatus();
  };
  hooks.before_backward = [&] {
    events.push_back("backward");
    return absl::OkStatus();
  };
  hooks.on_gradient_part = [&](int i, int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, m->parameters()[i].size);
    events.push_back("grad " + m->parameters()[i].name);
  };
  ASSERT_TRUE(m->TrainStep(BatchOf(RandomData(3, 16, 2, 1), 0, 3), hooks).ok());
  EXPECT_EQ(events, (std::vector<std::string>{
                        "use c/weight", "use c/bias", "use out/weight",
                        "use out/bias", "backward", "grad out/weight",
                        "grad out/bias", "grad c/weight", "grad c/bias"}));
  EXPECT_FALSE(m->SplitsRows(0));
}

// A small CNN learns a pattern a dense layer on its own would need more
// steps for: which quadrant of a 6x6 image holds a bright 2x2 block.
TEST(LayerModel, SmallCnnLearns) {
  const ModelSpec spec = SpecFromText(R"pb(
    inputs {
      name: "image"
      shape: [ 6, 6, 1 ]
    }
    layers {
      name: "c"
      inputs: "image"
      conv2d { filters: 4 kernel_size: 3 padding: 1 activation: RELU }
    }
    layers {
      name: "p"
      inputs: "c"
      max_pool2d { window: 3 }
    }
    layers {
      name: "f"
      inputs: "p"
      flatten {}
    }
    layers {
      name: "out"
      inputs: "f"
      dense { units: 4 }
    }
    head { loss: SOFTMAX_CROSS_ENTROPY }
  )pb");
  Dataset data;
  data.num_examples = 200;
  data.rows = data.cols = 6;
  data.num_classes = 4;
  data.images = RandomValues(200 * 36, 0.1f, 4);
  for (int64_t i = 0; i < 200; ++i) {
    const int q = static_cast<int>((i * 7 + i / 5) % 4);
    const int r0 = (q / 2) * 3 + static_cast<int>(i % 2);
    const int c0 = (q % 2) * 3 + static_cast<int>((i / 2) % 2);
    for (int r = r0; r < r0 + 2; ++r) {
      for (int c = c0; c < c0 + 2; ++c) data.images[i * 36 + r * 6 + c] = 1.0f;
    }
    data.labels.push_back(q);
  }
  auto backend = Cpu();
  auto made = CreateLayerModel(spec, 36, backend.get());
  ASSERT_TRUE(made.ok()) << made.status();
  TrainableModel* m = made->get();
  SetRandomParameters(m, 21);
  for (int step = 0; step < 150; ++step) {
    ASSERT_TRUE(m->TrainStep(BatchOf(data, (step % 10) * 20, 20), {}).ok());
    Sgd(backend.get(), m, 0.2f);
  }
  absl::StatusOr<ModelEvaluation> e = EvaluateRange(*m, data, 0, 200);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_GE(e->correct, 190) << "loss " << e->loss;
}

// The heads' evaluations: a constant prediction b (zero weights, bias b)
// against labels 0/1 gives known values.
TEST(LayerModel, HeadsReportTheirMetrics) {
  const std::string layers = R"pb(
    inputs { name: "dense" shape: 3 }
    layers {
      name: "out"
      inputs: "dense"
      dense { units: 1 }
    }
  )pb";
  const Dataset data = RandomData(8, 3, 2, 9);
  double ones = 0;
  for (int32_t y : data.labels) ones += y;
  auto backend = Cpu();
  {
    auto m = CreateLayerModel(
        SpecFromText(layers + "head { loss: MEAN_SQUARED_ERROR }"), 3,
        backend.get());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->SetParameterRange(1, 0, std::vector<float>{0.25f}).ok());
    absl::StatusOr<ModelEvaluation> e = EvaluateRange(**m, data, 0, 8);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->head, HeadSpec::MEAN_SQUARED_ERROR);
    const double mse = (ones * 0.75 * 0.75 + (8 - ones) * 0.25 * 0.25) / 8;
    EXPECT_NEAR(e->rmse.Value(), std::sqrt(mse), 1e-6);
    EXPECT_NEAR(e->loss, mse, 1e-6);
    EXPECT_EQ(e->auc.positives() + e->auc.negatives(), 0);
  }
  {
    auto m = CreateLayerModel(
        SpecFromText(layers + "head { loss: SIGMOID_CROSS_ENTROPY }"), 3,
        backend.get());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->SetParameterRange(1, 0, std::vector<float>{1.0f}).ok());
    absl::StatusOr<ModelEvaluation> e = EvaluateRange(**m, data, 0, 8);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->head, HeadSpec::SIGMOID_CROSS_ENTROPY);
    EXPECT_EQ(e->auc.positives(), static_cast<int64_t>(ones));
    EXPECT_NEAR(e->auc.Value(), 0.5, 1e-9);  // every score ties
    const double p = 1 / (1 + std::exp(-1.0));
    const double logloss =
        -(ones * std::log(p) + (8 - ones) * std::log(1 - p)) / 8;
    EXPECT_NEAR(e->log_loss.Value(), logloss, 1e-6);
    EXPECT_NEAR(e->loss, logloss, 1e-5);
    EXPECT_EQ(e->correct, static_cast<int64_t>(ones));  // p >= 0.5: all 1
  }
}

TEST(LayerModel, RejectsWhatItCannotRun) {
  auto backend = Cpu();
  const ModelSpec sparse = SpecFromText(R"pb(
    inputs { name: "user" }
    layers {
      name: "e"
      inputs: "user"
      embedding_bag { table: "users" }
    }
    layers {
      name: "out"
      inputs: "e"
      dense { units: 1 }
    }
    head { loss: MEAN_SQUARED_ERROR }
  )pb");
  EXPECT_FALSE(CreateLayerModel(sparse, 4, backend.get()).ok());
  const ModelSpec dense = SpecFromText(R"pb(
    inputs { name: "dense" shape: 4 }
    layers {
      name: "out"
      inputs: "dense"
      dense { units: 3 }
    }
    head { loss: SOFTMAX_CROSS_ENTROPY }
  )pb");
  EXPECT_EQ(CreateLayerModel(dense, 5, backend.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateLayerModel(dense, 4, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  ModelSpec cycle = SpecFromText(R"pb(
    inputs { name: "dense" shape: 4 }
    layers {
      name: "a"
      inputs: "b"
      dense { units: 4 }
    }
    layers {
      name: "b"
      inputs: "a"
      dense { units: 4 }
    }
    head { loss: SOFTMAX_CROSS_ENTROPY input: "b" }
  )pb");
  EXPECT_EQ(CreateLayerModel(cycle, 4, backend.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto m = CreateLayerModel(dense, 4, backend.get());
  ASSERT_TRUE(m.ok());
  Dataset bad = RandomData(2, 4, 3, 1);
  bad.labels[1] = 3;
  absl::StatusOr<float> loss = (*m)->TrainStep(BatchOf(bad, 0, 2), {});
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loss.status().message().find("example 1"), std::string::npos);
  EXPECT_FALSE(EvaluateRange(**m, bad, 1, 2).ok());
}

}  // namespace
}  // namespace ps::worker::model
