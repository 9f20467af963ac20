#include "common/spec/model_graph.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/spec/model.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace {

ModelSpec Parse(const std::string& text) {
  ModelSpec m;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &m)) << text;
  return m;
}

std::vector<std::string> TensorNames(const ModelGraph& g) {
  std::vector<std::string> names;
  for (const TensorSpec& t : g.tensors) {
    names.push_back(t.name() + " " + ShapeString(t));
  }
  return names;
}

std::vector<std::string> OrderNames(const ModelGraph& g) {
  std::vector<std::string> names;
  for (int i : g.order) names.push_back(g.layers[i].spec.name());
  return names;
}

const char kCnn[] = R"pb(
  inputs {
    name: "image"
    shape: [ 28, 28, 1 ]
  }
  layers {
    name: "conv1"
    inputs: "image"
    conv2d { filters: 32 kernel_size: 5 padding: 2 activation: RELU }
  }
  layers {
    name: "pool1"
    inputs: "conv1"
    max_pool2d {}
  }
  layers {
    name: "conv2"
    inputs: "pool1"
    conv2d { filters: 64 kernel_size: 5 padding: 2 activation: RELU }
  }
  layers {
    name: "pool2"
    inputs: "conv2"
    max_pool2d { window: 2 }
  }
  layers {
    name: "flat"
    inputs: "pool2"
    flatten {}
  }
  layers {
    name: "fc1"
    inputs: "flat"
    dense { units: 256 activation: RELU }
  }
  layers {
    name: "fc2"
    inputs: "fc1"
    dense { units: 10 }
  }
  head { loss: SOFTMAX_CROSS_ENTROPY }
)pb";

TEST(ModelGraph, MlpShorthandIsDenseLayersWithTheMlpTensors) {
  for (const char* text :
       {"mlp { input_dim: 784 hidden: 256 hidden: 128 num_classes: 10 }",
        "mlp { input_dim: 5 num_classes: 3 activation: TANH }",
        "mlp { input_dim: 6 hidden: 4 num_classes: 2 activation: RELU }"}) {
    SCOPED_TRACE(text);
    const ModelSpec m = Parse(text);
    absl::StatusOr<ModelGraph> g = ResolveModelGraph(m, {});
    ASSERT_TRUE(g.ok()) << g.status();
    const std::vector<TensorSpec> want = MlpTensors(m.mlp());
    ASSERT_EQ(g->tensors.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(g->tensors[i].SerializeAsString(), want[i].SerializeAsString())
          << want[i].name();
    }
    EXPECT_EQ(g->loss, HeadSpec::SOFTMAX_CROSS_ENTROPY);
    EXPECT_EQ(g->nodes[g->head_node].shape,
              std::vector<int64_t>{m.mlp().num_classes()});
    EXPECT_EQ(g->nodes[0].kind, NodeKind::kDense);
    // The hidden layers carry the activation, the output layer none.
    const int layers = static_cast<int>(g->layers.size());
    for (int i = 0; i < layers; ++i) {
      const Activation want_act =
          i + 1 == layers ? ACTIVATION_UNSPECIFIED
                          : (m.mlp().activation() == TANH ? TANH : RELU);
      EXPECT_EQ(g->layers[i].spec.dense().activation(), want_act) << i;
    }
  }
}

TEST(ModelGraph, CnnShapesAndTensors) {
  absl::StatusOr<ModelGraph> g = ResolveModelGraph(Parse(kCnn), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto shape = [&](const char* name) {
    return g->nodes[g->FindNode(name)].shape;
  };
  EXPECT_EQ(shape("conv1"), (std::vector<int64_t>{28, 28, 32}));
  EXPECT_EQ(shape("pool1"), (std::vector<int64_t>{14, 14, 32}));
  EXPECT_EQ(shape("pool2"), (std::vector<int64_t>{7, 7, 64}));
  EXPECT_EQ(shape("flat"), (std::vector<int64_t>{3136}));
  EXPECT_EQ(TensorNames(*g), (std::vector<std::string>{
                                 "conv1/weight [25, 32]", "conv1/bias [32]",
                                 "conv2/weight [800, 64]", "conv2/bias [64]",
                                 "fc1/weight [3136, 256]", "fc1/bias [256]",
                                 "fc2/weight [256, 10]", "fc2/bias [10]"}));
  EXPECT_EQ(g->tensors[0].init().kind(), InitializerSpec::HE_UNIFORM);
  EXPECT_EQ(g->tensors[1].init().kind(), InitializerSpec::ZEROS);
  EXPECT_EQ(g->layers[6].first_tensor, 6);
  EXPECT_EQ(g->layers[6].num_tensors, 2);
  EXPECT_EQ(g->layers[1].num_tensors, 0);
  // ExpandModel takes the same tensors.
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpandModel(Parse(kCnn));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), 8u);
}

// DLRM written out of order: two towers and the interaction; the run order
// puts every layer after its inputs, the written order where it can.
TEST(ModelGraph, DlrmRunsInDependencyOrder) {
  const ModelSpec m = Parse(R"pb(
    inputs { name: "dense" shape: 13 }
    inputs { name: "C1" }
    inputs { name: "C2" }
    layers {
      name: "top"
      inputs: "cat"
      dense { units: 1 }
    }
    layers {
      name: "bottom"
      inputs: "dense"
      dense { units: 8 activation: RELU }
    }
    layers {
      name: "emb"
      inputs: [ "C1", "C2" ]
      embedding_bag { table: "t" mode: MEAN }
    }
    layers {
      name: "dot"
      inputs: [ "bottom", "emb" ]
      dot_interaction {}
    }
    layers {
      name: "cat"
      inputs: [ "bottom", "dot" ]
      concat {}
    }
    head { loss: SIGMOID_CROSS_ENTROPY input: "top" }
  )pb");
  absl::StatusOr<ModelGraph> g = ResolveModelGraph(m, {{"other", 4}, {"t", 8}});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(OrderNames(*g),
            (std::vector<std::string>{"bottom", "emb", "dot", "cat", "top"}));
  EXPECT_EQ(g->nodes[g->FindNode("emb")].shape, std::vector<int64_t>{16});
  EXPECT_EQ(g->nodes[g->FindNode("dot")].shape, std::vector<int64_t>{3});
  EXPECT_EQ(g->nodes[g->FindNode("cat")].shape, std::vector<int64_t>{11});
  EXPECT_EQ(g->layers[2].table, 1);
  EXPECT_EQ(g->nodes[g->FindNode("C1")].kind, NodeKind::kSparse);
  EXPECT_EQ(TensorNames(*g), (std::vector<std::string>{
                                 "top/weight [11, 1]", "top/bias [1]",
                                 "bottom/weight [13, 8]", "bottom/bias [8]"}));
}

TEST(ModelGraph, MatrixFactorizationAndFm) {
  absl::StatusOr<ModelGraph> mf =
      ResolveModelGraph(Parse(R"pb(
                          inputs { name: "user" }
                          inputs { name: "item" }
                          layers {
                            name: "u"
                            inputs: "user"
                            embedding_bag { table: "users" }
                          }
                          layers {
                            name: "v"
                            inputs: "item"
                            embedding_bag { table: "items" }
                          }
                          layers {
                            name: "ub"
                            inputs: "user"
                            embedding_bag { table: "user_bias" }
                          }
                          layers {
                            name: "r"
                            inputs: [ "u", "v", "ub" ]
                            dot {}
                          }
                          head { loss: MEAN_SQUARED_ERROR }
                        )pb"),
                        {{"users", 16}, {"items", 16}, {"user_bias", 1}});
  ASSERT_TRUE(mf.ok()) << mf.status();
  EXPECT_EQ(TensorNames(*mf), std::vector<std::string>{"r/bias [1]"});

  absl::StatusOr<ModelGraph> fm =
      ResolveModelGraph(Parse(R"pb(
                          inputs { name: "features" }
                          layers {
                            name: "v"
                            inputs: "features"
                            embedding_bag { table: "v" weighted: true }
                          }
                          layers {
                            name: "w"
                            inputs: "features"
                            embedding_bag { table: "w" weighted: true }
                          }
                          layers {
                            name: "fm"
                            inputs: [ "v", "v" ]
                            fm_interaction {}
                          }
                          layers {
                            name: "sum"
                            inputs: [ "fm", "w" ]
                            add {}
                          }
                          head { loss: SIGMOID_CROSS_ENTROPY }
                        )pb"),
                        {{"v", 4}, {"w", 1}});
  ASSERT_TRUE(fm.ok()) << fm.status();
  EXPECT_TRUE(fm->tensors.empty());  // sparse tables only
}

// Every problem at once, each naming its layer and field.
TEST(ModelGraph, ReportsEveryProblemAtOnce) {
  std::vector<ModelIssue> issues;
  absl::StatusOr<ModelGraph> g =
      ResolveModelGraph(Parse(R"pb(
                          inputs {
                            name: "image"
                            shape: [ 28, 28 ]
                          }
                          inputs { name: "dense" shape: 784 }
                          inputs { name: "C1" }
                          layers {
                            name: "fc"
                            inputs: "dense"
                            dense { units: 64 }
                          }
                          layers {
                            name: "bad"
                            inputs: "nowhere"
                            dense { units: 4 }
                          }
                          layers {
                            name: "emb"
                            inputs: "C1"
                            embedding_bag { table: "missing" }
                          }
                          layers {
                            name: "cat"
                            inputs: [ "fc", "emb" ]
                            concat {}
                          }
                          layers {
                            name: "a"
                            inputs: "b"
                            activation {}
                          }
                          layers {
                            name: "b"
                            inputs: "a"
                            activation {}
                          }
                          layers {
                            name: "pool"
                            inputs: "dense"
                            max_pool2d {}
                          }
                          layers {
                            name: "fc"
                            inputs: "fc"
                            dense { units: 3 }
                          }
                          layers { name: "nokind" inputs: "fc" }
                          layers {
                            name: "out"
                            inputs: "fc"
                            dense { units: 1 }
                          }
                          head { loss: SOFTMAX_CROSS_ENTROPY }
                        )pb"),
                        {}, &issues);
  ASSERT_FALSE(g.ok());
  const std::string msg(g.status().message());
  const char* want[] = {
      "model.inputs[0].shape: input 'image' has shape [28, 28]",
      "model.layers[7].name: duplicate name 'fc'",
      "model.layers[1].inputs[0]: layer 'bad': unknown input 'nowhere'",
      "model.layers[4].inputs: layers 'a' -> 'b' -> 'a' form a cycle",
      "model.layers[2].embedding_bag.table: layer 'emb': no sparse table "
      "'missing' in model.sparse_tables (the model has none)",
      "model.layers[6].inputs[0]: layer 'pool': a max_pool2d layer takes "
      "images [height, width, channels], but input 'dense' has shape [784]",
      "model.layers[8]: layer 'nokind': no layer kind set",
      "model.head.loss: the head reads layer 'out' of shape [1], but "
      "SOFTMAX_CROSS_ENTROPY takes one logit per class",
      "model.layers[7]: layer 'fc': its output does not lead to the head",
  };
  for (const char* w : want) {
    EXPECT_NE(msg.find(w), std::string::npos) << w << "\nin:\n" << msg;
  }
  // One issue per line, each with its path.
  EXPECT_EQ(static_cast<size_t>(std::count(msg.begin(), msg.end(), '\n') + 1),
            issues.size());
  EXPECT_GE(issues.size(), std::size(want));
  EXPECT_EQ(IssuePath(issues[0]), "model.inputs[0].shape");
}

TEST(ModelGraph, ShapeMismatchesNameBothShapes) {
  std::vector<ModelIssue> issues;
  absl::StatusOr<ModelGraph> g =
      ResolveModelGraph(Parse(R"pb(
                          inputs {
                            name: "image"
                            shape: [ 8, 8, 1 ]
                          }
                          inputs { name: "u" }
                          inputs { name: "v" }
                          layers {
                            name: "conv"
                            inputs: "image"
                            conv2d { filters: 2 kernel_size: 9 }
                          }
                          layers {
                            name: "fc"
                            inputs: "image"
                            dense { units: 2 }
                          }
                          layers {
                            name: "eu"
                            inputs: "u"
                            embedding_bag { table: "a" }
                          }
                          layers {
                            name: "ev"
                            inputs: "v"
                            embedding_bag { table: "b" }
                          }
                          layers {
                            name: "dot"
                            inputs: [ "eu", "ev" ]
                            dot {}
                          }
                          layers {
                            name: "inter"
                            inputs: [ "eu", "ev" ]
                            dot_interaction {}
                          }
                          layers {
                            name: "sum"
                            inputs: [ "dot", "inter", "fc", "conv" ]
                            add {}
                          }
                          head { loss: MEAN_SQUARED_ERROR }
                        )pb"),
                        {{"a", 4}, {"b", 6}}, &issues);
  ASSERT_FALSE(g.ok());
  const std::string msg(g.status().message());
  for (const char* w : {
           "layer 'conv': a 9x9 kernel with padding 0 does not fit input "
           "'image' of shape [8, 8, 1]",
           "layer 'fc': a dense layer takes vectors [features], but input "
           "'image' has shape [8, 8, 1] (flatten it first)",
           "layer 'dot': a dot layer takes two vectors of one dim, but 'eu' "
           "has shape [4] and 'ev' has shape [6]",
           "layer 'inter': input 'ev' of shape [6] is not a whole number of "
           "vectors of dim 4",
       }) {
    EXPECT_NE(msg.find(w), std::string::npos) << w << "\nin:\n" << msg;
  }
  // 'sum' reads failed layers: not reported again.
  EXPECT_EQ(msg.find("layer 'sum'"), std::string::npos) << msg;
}

TEST(ModelGraph, HeadAndStructureRules) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"inputs { name: \"dense\" shape: 4 } head { loss: MEAN_SQUARED_ERROR }",
       "model.layers: a layer model needs at least one layer"},
      {"inputs { name: \"dense\" shape: 4 } layers { name: \"x\" inputs: "
       "\"dense\" dense { units: 1 } }",
       "model.head.loss: a layer model needs a head loss"},
      {"inputs { name: \"dense\" shape: 4 } layers { name: \"x\" inputs: "
       "\"dense\" dense { units: 1 } } head { loss: SIGMOID_CROSS_ENTROPY "
       "input: \"dense\" }",
       "model.head.input: the head reads 'dense', which is not a layer"},
      {"mlp { input_dim: 4 num_classes: 2 } inputs { name: \"dense\" shape: 4 "
       "} layers { name: \"x\" inputs: \"dense\" dense { units: 2 } } head { "
       "loss: SOFTMAX_CROSS_ENTROPY }",
       "model.mlp: set model.mlp (the shorthand) or model.layers, not both"},
      {"inputs { name: \"C1\" shape: 3 } inputs { name: \"dense\" shape: 4 } "
       "layers { name: \"x\" inputs: \"C1\" dense { units: 1 } } head { loss: "
       "MEAN_SQUARED_ERROR }",
       "input 'C1' is a sparse field (only \"dense\" and \"image\" are "
       "dense), which has no shape"},
      {"inputs { name: \"C1\" } layers { name: \"x\" inputs: \"C1\" dense { "
       "units: 1 } } head { loss: MEAN_SQUARED_ERROR }",
       "layer 'x': input 'C1' is a sparse field; only embedding_bag layers "
       "read sparse fields"},
      {"inputs { name: \"dense\" shape: 4 } layers { name: \"e\" inputs: "
       "\"dense\" embedding_bag { table: \"t\" } } head { loss: "
       "MEAN_SQUARED_ERROR }",
       "layer 'e': an embedding_bag layer reads sparse fields, but input "
       "'dense' is the batch's dense features"},
      {"inputs { name: \"image\" shape: [ 4, 4, 1 ] } layers { name: \"p\" "
       "inputs: \"image\" avg_pool2d { window: 2 padding: 2 } } head { loss: "
       "MEAN_SQUARED_ERROR }",
       "model.layers[0].avg_pool2d.padding: layer 'p': padding must be in [0, "
       "window / 2 = 1], got 2"},
      {"inputs { name: \"dense\" shape: 4 } layers { name: \"a/b\" inputs: "
       "\"dense\" dense { units: 1 } } head { loss: MEAN_SQUARED_ERROR }",
       "must not contain '/'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelGraph> g = ResolveModelGraph(Parse(c.text), {});
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.error), std::string::npos)
        << c.error << "\nin:\n"
        << g.status().message();
  }
}

TEST(ModelGraph, ExplicitTensorsMustMatchTheLayers) {
  ModelSpec m = Parse(kCnn);
  absl::StatusOr<std::vector<TensorSpec>> derived = ExpandModel(m);
  ASSERT_TRUE(derived.ok());
  for (const TensorSpec& t : *derived) *m.add_tensors() = t;
  m.mutable_tensors(0)->mutable_init()->set_kind(InitializerSpec::NORMAL);
  m.mutable_tensors(0)->mutable_init()->set_scale(0.1f);
  absl::StatusOr<std::vector<TensorSpec>> given = ExpandModel(m);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ((*given)[0].init().kind(), InitializerSpec::NORMAL);
  m.mutable_tensors(4)->set_shape(0, 3000);
  absl::StatusOr<std::vector<TensorSpec>> bad = ExpandModel(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "fc1/weight [3000, 256] but model.layers imply fc1/weight "
                "[3136, 256]"),
            std::string::npos)
      << bad.status();
}

TEST(ModelGraph, SparseTablesComeFromTheSpec) {
  ModelSpec m;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        sparse_tables { name: "users" dim: 8 }
        sparse_tables { name: "items" dim: 8 }
        inputs { name: "user" }
        inputs { name: "item" }
        layers {
          name: "u"
          inputs: "user"
          embedding_bag { table: "users" }
        }
        layers {
          name: "v"
          inputs: "item"
          embedding_bag { table: "items" }
        }
        layers {
          name: "r"
          inputs: [ "u", "v" ]
          dot {}
        }
        head { loss: MEAN_SQUARED_ERROR }
      )pb",
      &m));
  const std::vector<SparseTableRef> tables = SparseTablesOf(m);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[1].name, "items");
  EXPECT_EQ(tables[1].dim, 8);
  absl::StatusOr<ModelGraph> g = ResolveModelGraph(m, tables);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->layers[0].table, 0);
  EXPECT_EQ(g->layers[1].table, 1);
  EXPECT_EQ(g->nodes[g->layers[0].node].shape, std::vector<int64_t>{8});
}

}  // namespace
}  // namespace ps
