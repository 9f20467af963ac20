// Every layer's gradients against central finite differences of
// f = sum(output * r) for a random r, and the CPU backend against the
// emulated CUDA one (the CUDA kernels' source run on the host).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/model_graph.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_emulated_backend.h"
#include "worker/model/layer.h"
#include "worker/model/model_test_util.h"

namespace ps::worker::model {
namespace {

using kernels::Backend;
using kernels::DeviceBuffer;
using kernels::DeviceSpan;

constexpr int64_t kBatch = 2;

struct LayerCase {
  std::string name;
  std::string spec;   // text format; ends in a layer "out" [1] and MSE
  std::string layer;  // the layer under test
};

std::string Model(const std::string& inputs, const std::string& layers) {
  return absl::StrCat(inputs, layers,
                      " head { loss: MEAN_SQUARED_ERROR input: \"out\" }");
}

std::string Out(const std::string& from) {
  return absl::StrCat(" layers { name: \"out\" inputs: \"", from,
                      "\" dense { units: 1 } }");
}

const char kDense4[] = "inputs { name: \"dense\" shape: 4 }";
const char kImage[] = "inputs { name: \"image\" shape: [5, 5, 2] }";

std::vector<LayerCase> Cases() {
  auto dense = [](const char* act) {
    return Model(kDense4,
                 absl::StrCat(" layers { name: \"d\" inputs: \"dense\" dense "
                              "{ units: 3 activation: ",
                              act, " } }", Out("d")));
  };
  auto image = [](const std::string& layer, const std::string& kind,
                  const std::string& body) {
    return Model(
        kImage,
        absl::StrCat(" layers { name: \"", layer, "\" inputs: \"image\" ", kind,
                     " { ", body, " } }", " layers { name: \"f\" inputs: \"",
                     layer, "\" flatten {} }", Out("f")));
  };
  const std::string two = absl::StrCat(
      " layers { name: \"a\" inputs: \"dense\" dense { units: 4 } }",
      " layers { name: \"b\" inputs: \"dense\" dense { units: 2 } }");
  return {
      {"DenseLinear", dense("ACTIVATION_UNSPECIFIED"), "d"},
      {"DenseRelu", dense("RELU"), "d"},
      {"DenseTanh", dense("TANH"), "d"},
      {"DenseSigmoid", dense("SIGMOID"), "d"},
      {"ActivationSigmoid",
       Model(kDense4,
             absl::StrCat(" layers { name: \"s\" inputs: \"dense\" activation "
                          "{ function: SIGMOID } }",
                          Out("s"))),
       "s"},
      {"Conv2DPadded",
       image("c", "conv2d",
             "filters: 3 kernel_size: 3 padding: 1 "
             "activation: RELU"),
       "c"},
      {"Conv2DStrided",
       image("c", "conv2d", "filters: 2 kernel_size: 2 stride: 2"), "c"},
      {"MaxPool", image("p", "max_pool2d", "window: 2"), "p"},
      {"MaxPoolPadded",
       image("p", "max_pool2d", "window: 3 stride: 2 padding: 1"), "p"},
      {"AvgPool", image("p", "avg_pool2d", "window: 2"), "p"},
      {"AvgPoolPadded",
       image("p", "avg_pool2d", "window: 3 stride: 2 padding: 1"), "p"},
      {"Flatten", image("p", "avg_pool2d", "window: 1"), "f"},
      {"Concat",
       Model(kDense4,
             absl::StrCat(two,
                          " layers { name: \"c\" inputs: [\"a\", \"b\"] "
                          "concat {} }",
                          Out("c"))),
       "c"},
      {"Add",
       Model(kDense4,
             absl::StrCat(" layers { name: \"a\" inputs: \"dense\" dense { "
                          "units: 3 } }",
                          " layers { name: \"b\" inputs: \"dense\" dense { "
                          "units: 3 } }",
                          " layers { name: \"s\" inputs: [\"a\", \"b\"] add {} "
                          "}",
                          Out("s"))),
       "s"},
      {"DotInteraction",
       Model(kDense4,
             absl::StrCat(two,
                          " layers { name: \"i\" inputs: [\"b\", \"a\"] "
                          "dot_interaction {} }",
                          Out("i"))),
       "i"},
      {"FmInteraction",
       Model(kDense4,
             absl::StrCat(two,
                          " layers { name: \"i\" inputs: [\"b\", \"a\"] "
                          "fm_interaction {} }",
                          Out("i"))),
       "i"},
      {"Dot",
       Model(kDense4,
             " layers { name: \"u\" inputs: \"dense\" dense { units: 3 } }"
             " layers { name: \"v\" inputs: \"dense\" dense { units: 3 } }"
             " layers { name: \"bu\" inputs: \"dense\" dense { units: 1 } }"
             " layers { name: \"out\" inputs: [\"u\", \"v\", \"bu\"] dot {} }"),
       "out"},
  };
}

// One layer on one backend with host copies of everything.
class LayerRun {
 public:
  LayerRun(Backend* backend, const ModelGraph& graph, int index)
      : backend_(backend), graph_(graph), index_(index) {
    const GraphLayer& l = graph.layers[index];
    auto made = MakeLayer(graph, index);
    EXPECT_TRUE(made.ok()) << made.status();
    layer_ = *std::move(made);
    EXPECT_TRUE(layer_->Reserve(*backend, kBatch).ok());
    uint64_t seed = 1;
    for (int node : l.inputs) {
      inputs_.push_back(
          RandomValues(kBatch * graph.nodes[node].width(), 1.0f, seed++));
    }
    for (int t = 0; t < l.num_tensors; ++t) {
      int64_t size = 1;
      for (int64_t d : graph.tensors[l.first_tensor + t].shape()) size *= d;
      params_.push_back(RandomValues(size, 0.5f, seed++));
    }
    cotangent_ = RandomValues(kBatch * graph.nodes[l.node].width(), 1.0f, 99);
  }

  std::vector<std::vector<float>>& inputs() { return inputs_; }
  std::vector<std::vector<float>>& params() { return params_; }

  // The output of a forward pass over the current inputs and params.
  std::vector<float> Forward() {
    LayerIo io = Io();
    absl::Status s = layer_->Forward(*backend_, io);
    EXPECT_TRUE(s.ok()) << s;
    return Host(io.output);
  }
  double Objective() {
    const std::vector<float> out = Forward();
    double f = 0;
    for (size_t i = 0; i < out.size(); ++i) f += double{out[i]} * cotangent_[i];
    return f;
  }
  // Forward, then backward with doutput = r: the inputs' then the params'
  // gradients.
  std::vector<std::vector<float>> Gradients() {
    LayerIo io = Io();
    EXPECT_TRUE(layer_->Forward(*backend_, io).ok());
    LayerGrads g;
    g.doutput = Upload(cotangent_);
    for (const auto& in : inputs_) g.dinputs.push_back(Upload(in));
    for (const auto& p : params_) g.dparams.push_back(Upload(p));
    absl::Status s = layer_->Backward(*backend_, io, g);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<std::vector<float>> out;
    for (const auto& d : g.dinputs) out.push_back(Host(d));
    for (const auto& d : g.dparams) out.push_back(Host(d));
    return out;
  }

 private:
  DeviceSpan<float> Upload(const std::vector<float>& v) {
    auto b = backend_->AllocateArray<float>(static_cast<int64_t>(v.size()));
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE(backend_
                    ->CopyToDevice(v.data(), b->data(),
                                   static_cast<int64_t>(v.size() * 4))
                    .ok());
    buffers_.push_back(*std::move(b));
    return buffers_.back().Span<float>(static_cast<int64_t>(v.size()));
  }
  std::vector<float> Host(DeviceSpan<const float> d) {
    std::vector<float> v(static_cast<size_t>(d.size));
    EXPECT_TRUE(backend_->CopyToHost(d.data, v.data(), d.size * 4).ok());
    return v;
  }
  LayerIo Io() {
    const GraphLayer& l = graph_.layers[index_];
    LayerIo io;
    io.batch = kBatch;
    for (const auto& in : inputs_) io.inputs.push_back(Upload(in));
    for (const auto& p : params_) io.params.push_back(Upload(p));
    io.output = Upload(std::vector<float>(
        static_cast<size_t>(kBatch * graph_.nodes[l.node].width())));
    return io;
  }

  Backend* backend_;
  const ModelGraph& graph_;
  int index_;
  std::unique_ptr<Layer> layer_;
  std::vector<std::vector<float>> inputs_;
  std::vector<std::vector<float>> params_;
  std::vector<float> cotangent_;
  std::vector<DeviceBuffer> buffers_;
};

ModelGraph Resolve(const LayerCase& c, int* index) {
  *index = -1;
  absl::StatusOr<ModelGraph> g = ResolveModelGraph(SpecFromText(c.spec), {});
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return {};
  for (int i = 0; i < static_cast<int>(g->layers.size()); ++i) {
    if (g->layers[i].spec.name() == c.layer) *index = i;
  }
  EXPECT_GE(*index, 0);
  return *std::move(g);
}

class LayerGradientTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerGradientTest, MatchesFiniteDifferences) {
  int index = 0;
  const ModelGraph graph = Resolve(GetParam(), &index);
  ASSERT_GE(index, 0);
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  LayerRun run(backend->get(), graph, index);
  const std::vector<std::vector<float>> grads = run.Gradients();
  const size_t num_inputs = run.inputs().size();
  constexpr float kEps = 1e-3f;
  for (size_t k = 0; k < grads.size(); ++k) {
    std::vector<float>& x =
        k < num_inputs ? run.inputs()[k] : run.params()[k - num_inputs];
    ASSERT_EQ(x.size(), grads[k].size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      x[i] = saved + kEps;
      const double up = run.Objective();
      x[i] = saved - kEps;
      const double down = run.Objective();
      x[i] = saved;
      const double numeric = (up - down) / (2 * kEps);
      EXPECT_NEAR(grads[k][i], numeric, 5e-3 + 5e-3 * std::fabs(numeric))
          << (k < num_inputs ? "input " : "param ")
          << (k < num_inputs ? k : k - num_inputs) << " element " << i;
    }
  }
}

TEST_P(LayerGradientTest, CpuAndEmulatedCudaAgree) {
  int index = 0;
  const ModelGraph graph = Resolve(GetParam(), &index);
  ASSERT_GE(index, 0);
  auto cpu = kernels::CreateCpuBackend({});
  auto cuda = kernels::CreateCudaEmulatedBackend();
  ASSERT_TRUE(cpu.ok());
  ASSERT_TRUE(cuda.ok());
  LayerRun a(cpu->get(), graph, index);
  LayerRun b(cuda->get(), graph, index);
  const std::vector<float> ya = a.Forward(), yb = b.Forward();
  ASSERT_EQ(ya.size(), yb.size());
  for (size_t i = 0; i < ya.size(); ++i) {
    EXPECT_NEAR(ya[i], yb[i], 1e-5 + 1e-5 * std::fabs(ya[i])) << i;
  }
  const auto ga = a.Gradients(), gb = b.Gradients();
  ASSERT_EQ(ga.size(), gb.size());
  for (size_t k = 0; k < ga.size(); ++k) {
    for (size_t i = 0; i < ga[k].size(); ++i) {
      EXPECT_NEAR(ga[k][i], gb[k][i], 1e-5 + 1e-5 * std::fabs(ga[k][i]))
          << "gradient " << k << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, LayerGradientTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& info) {
                           return info.param.name;
                         });

TEST(MakeLayer, EmbeddingBagIsNotRunByTheDenseLayers) {
  ModelGraph graph;
  GraphNode in;
  in.name = "ids";
  in.kind = NodeKind::kSparse;
  graph.nodes.push_back(in);
  GraphLayer l;
  l.spec.set_name("emb");
  l.spec.mutable_embedding_bag()->set_table("t");
  l.inputs = {0};
  graph.layers.push_back(l);
  absl::StatusOr<std::unique_ptr<Layer>> made = MakeLayer(graph, 0);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(made.status().message().find("emb"), std::string::npos);
}

}  // namespace
}  // namespace ps::worker::model
