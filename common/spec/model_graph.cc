#include "common/spec/model_graph.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/model_graph_rules.h"

namespace ps {
namespace {

using model_graph_internal::InferOutputShape;
using model_graph_internal::LayerRuleContext;
using model_graph_internal::LayerTensors;
using model_graph_internal::ShapeText;

constexpr char kDenseInput[] = "dense";
constexpr char kImageInput[] = "image";

// Collects issues; the layer-independent ones.
class Issues {
 public:
  explicit Issues(std::vector<ModelIssue>* out) : out_(out) {}
  void Add(std::vector<FieldStep> path, std::string message) {
    out_->push_back({std::move(path), std::move(message)});
  }

 private:
  std::vector<ModelIssue>* out_;
};

void AddInputs(const ModelSpec& m, ModelGraph& g, Issues& issues) {
  int dense = -1, image = -1;
  for (int i = 0; i < m.inputs_size(); ++i) {
    const ModelInputSpec& in = m.inputs(i);
    GraphNode node;
    node.name = in.name();
    node.shape.assign(in.shape().begin(), in.shape().end());
    const std::string where = absl::StrCat("input '", in.name(), "'");
    bool positive = true;
    for (int64_t d : node.shape) positive = positive && d > 0 && d < (1 << 30);
    if (in.name().empty()) {
      issues.Add({{"inputs", i}, {"name"}},
                 "a model input needs a name: \"dense\", \"image\" or a "
                 "sparse field's");
    } else if (in.name() == kDenseInput) {
      node.kind = NodeKind::kDense;
      dense = i;
      if (node.shape.size() != 1 || !positive) {
        issues.Add({{"inputs", i}, {"shape"}},
                   absl::StrCat(where, " has shape ", ShapeText(node.shape),
                                "; it takes one dimension > 0, [features]"));
      }
    } else if (in.name() == kImageInput) {
      node.kind = NodeKind::kImage;
      image = i;
      if (node.shape.size() != 3 || !positive) {
        issues.Add({{"inputs", i}, {"shape"}},
                   absl::StrCat(where, " has shape ", ShapeText(node.shape),
                                "; it takes three dimensions > 0, [height, "
                                "width, channels]"));
      }
    } else {
      node.kind = NodeKind::kSparse;
      if (!node.shape.empty()) {
        issues.Add({{"inputs", i}, {"shape"}},
                   absl::StrCat(where,
                                " is a sparse field (only \"dense\" and "
                                "\"image\" are dense), which has no shape"));
      }
      node.shape.clear();
    }
    g.nodes.push_back(std::move(node));
  }
  if (dense >= 0 && image >= 0 && g.nodes[dense].shape.size() == 1 &&
      g.nodes[image].shape.size() == 3 &&
      g.nodes[dense].width() != g.nodes[image].width()) {
    issues.Add({{"inputs", image}, {"shape"}},
               absl::StrCat("input 'image' ", ShapeText(g.nodes[image].shape),
                            " reads the dense features, but input 'dense' "
                            "has ",
                            g.nodes[dense].width(), " of them"));
  }
}

// Names the layers' nodes and resolves their inputs.
void AddLayers(const ModelSpec& m, ModelGraph& g, Issues& issues) {
  std::map<std::string, int> by_name;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (!g.nodes[n].name.empty()) by_name.emplace(g.nodes[n].name, n);
  }
  // Duplicate input names.
  for (int i = 0; i < m.inputs_size(); ++i) {
    const auto it = by_name.find(m.inputs(i).name());
    if (it != by_name.end() && it->second != i) {
      issues.Add(
          {{"inputs", i}, {"name"}},
          absl::StrCat("duplicate input name '", m.inputs(i).name(), "'"));
    }
  }
  for (int i = 0; i < m.layers_size(); ++i) {
    const LayerSpec& spec = m.layers(i);
    GraphLayer layer;
    layer.spec = spec;
    layer.node = static_cast<int>(g.nodes.size());
    if (spec.name().empty()) {
      issues.Add({{"layers", i}, {"name"}},
                 "every layer needs a name (it names the layer's tensors)");
    } else if (!by_name.emplace(spec.name(), layer.node).second) {
      issues.Add({{"layers", i}, {"name"}},
                 absl::StrCat("duplicate name '", spec.name(),
                              "' (layers and model inputs share one "
                              "namespace)"));
    } else if (spec.name().find('/') != std::string::npos) {
      issues.Add({{"layers", i}, {"name"}},
                 absl::StrCat("layer name '", spec.name(),
                              "' must not contain '/' (it prefixes tensor "
                              "names)"));
    }
    GraphNode node;
    node.name = spec.name();
    node.kind = NodeKind::kLayer;
    node.layer = i;
    g.nodes.push_back(std::move(node));
    g.layers.push_back(std::move(layer));
  }
  for (int i = 0; i < m.layers_size(); ++i) {
    const LayerSpec& spec = m.layers(i);
    for (int k = 0; k < spec.inputs_size(); ++k) {
      const auto it = by_name.find(spec.inputs(k));
      if (it == by_name.end()) {
        issues.Add({{"layers", i}, {"inputs", k}},
                   absl::StrCat("layer '", spec.name(), "': unknown input '",
                                spec.inputs(k),
                                "' (neither a model input nor a layer)"));
        g.layers[i].inputs.push_back(-1);
      } else {
        g.layers[i].inputs.push_back(it->second);
      }
    }
  }
}

// Kahn's algorithm, lowest written index first; reports one cycle among
// the layers left over.
void Order(ModelGraph& g, Issues& issues) {
  const int n = static_cast<int>(g.layers.size());
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> readers(n);
  for (int i = 0; i < n; ++i) {
    for (int node : g.layers[i].inputs) {
      if (node < 0 || g.nodes[node].kind != NodeKind::kLayer) continue;
      ++pending[i];
      readers[g.nodes[node].layer].push_back(i);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    g.order.push_back(i);
    for (int r : readers[i]) {
      if (--pending[r] == 0) ready.push(r);
    }
  }
  if (static_cast<int>(g.order.size()) == n) return;
  // Walk inputs that are still pending from a left-over layer until a layer
  // repeats: the walk from there is a cycle.
  int at = 0;
  while (pending[at] == 0) ++at;
  std::vector<int> walk;
  std::vector<int> seen_at(n, -1);
  while (seen_at[at] < 0) {
    seen_at[at] = static_cast<int>(walk.size());
    walk.push_back(at);
    for (int node : g.layers[at].inputs) {
      if (node >= 0 && g.nodes[node].kind == NodeKind::kLayer &&
          pending[g.nodes[node].layer] > 0) {
        at = g.nodes[node].layer;
        break;
      }
    }
  }
  std::vector<int> cycle(walk.begin() + seen_at[at], walk.end());
  // In data-flow order, from the layer written first.
  std::reverse(cycle.begin(), cycle.end());
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()),
              cycle.end());
  std::vector<std::string> names;
  for (int i : cycle) {
    names.push_back(absl::StrCat("'", g.layers[i].spec.name(), "'"));
  }
  names.push_back(names.front());
  const int first = cycle.front();
  issues.Add(
      {{"layers", first}, {"inputs"}},
      absl::StrCat("layers ", absl::StrJoin(names, " -> "), " form a cycle"));
}

void CheckHead(const ModelSpec& m, ModelGraph& g,
               const std::vector<bool>& resolved, Issues& issues) {
  const HeadSpec& head = m.head();
  g.loss = head.loss();
  if (g.loss == HeadSpec::LOSS_UNSPECIFIED) {
    issues.Add({{"head"}, {"loss"}},
               "a layer model needs a head loss: SOFTMAX_CROSS_ENTROPY, "
               "SIGMOID_CROSS_ENTROPY or MEAN_SQUARED_ERROR");
  }
  if (g.layers.empty()) {
    issues.Add({{"layers"}}, "a layer model needs at least one layer");
    return;
  }
  if (head.input().empty()) {
    g.head_node = g.layers.back().node;
  } else {
    g.head_node = g.FindNode(head.input());
    if (g.head_node < 0 || g.nodes[g.head_node].kind != NodeKind::kLayer) {
      issues.Add({{"head"}, {"input"}},
                 absl::StrCat("the head reads '", head.input(),
                              "', which is not a layer"));
      g.head_node = -1;
      return;
    }
  }
  const GraphNode& in = g.nodes[g.head_node];
  if (!resolved[in.layer]) return;  // its problem is reported already
  const std::string what = absl::StrCat("the head reads layer '", in.name,
                                        "' of shape ", ShapeText(in.shape));
  if (g.loss == HeadSpec::SOFTMAX_CROSS_ENTROPY &&
      (in.shape.size() != 1 || in.shape[0] < 2)) {
    issues.Add({{"head"}, {"loss"}},
               absl::StrCat(what,
                            ", but SOFTMAX_CROSS_ENTROPY takes one logit per "
                            "class, [classes] with at least 2 classes"));
  }
  if ((g.loss == HeadSpec::SIGMOID_CROSS_ENTROPY ||
       g.loss == HeadSpec::MEAN_SQUARED_ERROR) &&
      in.shape != std::vector<int64_t>{1}) {
    issues.Add({{"head"}, {"loss"}},
               absl::StrCat(what, ", but ", HeadSpec::Loss_Name(g.loss),
                            " takes one value per example, [1]"));
  }
}

// Layers whose output no path leads from to the head. Only those otherwise
// fine are reported (a layer with a problem has its message already).
void CheckReachesHead(ModelGraph& g, const std::vector<bool>& resolved,
                      Issues& issues) {
  if (g.head_node < 0) return;
  std::vector<bool> used(g.nodes.size(), false);
  std::vector<int> stack = {g.head_node};
  used[g.head_node] = true;
  while (!stack.empty()) {
    const GraphNode& node = g.nodes[stack.back()];
    stack.pop_back();
    if (node.kind != NodeKind::kLayer) continue;
    for (int in : g.layers[node.layer].inputs) {
      if (in >= 0 && !used[in]) {
        used[in] = true;
        stack.push_back(in);
      }
    }
  }
  for (size_t i = 0; i < g.layers.size(); ++i) {
    if (resolved[i] && !used[g.layers[i].node]) {
      issues.Add({{"layers", static_cast<int>(i)}},
                 absl::StrCat("layer '", g.layers[i].spec.name(),
                              "': its output does not lead to the head (no "
                              "layer on the way there reads it)"));
    }
  }
}

ModelSpec MlpLayers(const MlpSpec& mlp) {
  ModelSpec m;
  ModelInputSpec* in = m.add_inputs();
  in->set_name(kDenseInput);
  in->add_shape(mlp.input_dim());
  const Activation act = mlp.activation() == TANH ? TANH : RELU;
  std::vector<int64_t> widths(mlp.hidden().begin(), mlp.hidden().end());
  widths.push_back(mlp.num_classes());
  std::string prev = kDenseInput;
  for (size_t i = 0; i < widths.size(); ++i) {
    LayerSpec* l = m.add_layers();
    l->set_name(absl::StrCat("fc", i));
    l->add_inputs(prev);
    DenseLayerSpec* d = l->mutable_dense();
    d->set_units(widths[i]);
    if (i + 1 < widths.size()) d->set_activation(act);
    // MlpTensors' initialisers: by the MLP's activation, the output layer's
    // included.
    d->mutable_weight_init()->set_kind(act == TANH
                                           ? InitializerSpec::XAVIER_UNIFORM
                                           : InitializerSpec::HE_UNIFORM);
    prev = l->name();
  }
  m.mutable_head()->set_loss(HeadSpec::SOFTMAX_CROSS_ENTROPY);
  m.mutable_head()->set_input(prev);
  return m;
}

}  // namespace

std::vector<SparseTableRef> SparseTablesOf(const ModelSpec& model) {
  std::vector<SparseTableRef> tables;
  for (const SparseTableSpec& t : model.sparse_tables()) {
    tables.push_back({t.name(), t.dim()});
  }
  return tables;
}

int64_t GraphNode::width() const {
  if (kind == NodeKind::kSparse) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int ModelGraph::FindNode(const std::string& name) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool HasLayers(const ModelSpec& model) {
  return model.layers_size() > 0 || model.inputs_size() > 0 || model.has_head();
}

ModelSpec LayerModelOf(const ModelSpec& model) {
  if (model.has_mlp() && !HasLayers(model)) return MlpLayers(model.mlp());
  ModelSpec m;
  *m.mutable_inputs() = model.inputs();
  *m.mutable_layers() = model.layers();
  if (model.has_head()) *m.mutable_head() = model.head();
  return m;
}

std::string IssuePath(const ModelIssue& issue) {
  std::string path = "model";
  for (const FieldStep& s : issue.path) {
    absl::StrAppend(&path, ".", s.field);
    if (s.index >= 0) absl::StrAppend(&path, "[", s.index, "]");
  }
  return path;
}

absl::StatusOr<ModelGraph> ResolveModelGraph(
    const ModelSpec& model, const std::vector<SparseTableRef>& tables,
    std::vector<ModelIssue>* issues_out) {
  std::vector<ModelIssue> found;
  Issues issues(&found);
  if (model.has_mlp() && HasLayers(model)) {
    issues.Add({{"mlp"}},
               "set model.mlp (the shorthand) or model.layers, not both");
  }
  const ModelSpec m = LayerModelOf(model);
  ModelGraph g;
  g.tables = tables;
  AddInputs(m, g, issues);
  AddLayers(m, g, issues);
  Order(g, issues);
  // Shapes in run order; a layer whose inputs failed is skipped quietly
  // (the failure is reported where it happened).
  std::vector<bool> resolved(g.layers.size(), false);
  for (int i : g.order) {
    GraphLayer& layer = g.layers[i];
    bool inputs_ok = true;
    for (int node : layer.inputs) {
      inputs_ok = inputs_ok && node >= 0 &&
                  (g.nodes[node].kind != NodeKind::kLayer ||
                   resolved[g.nodes[node].layer]);
    }
    if (!inputs_ok) continue;
    LayerRuleContext ctx{i, &layer, &g.nodes, &g.tables, &found};
    std::vector<int64_t> shape = InferOutputShape(ctx, &layer.table);
    if (shape.empty()) continue;
    g.nodes[layer.node].shape = std::move(shape);
    resolved[i] = true;
  }
  CheckHead(m, g, resolved, issues);
  CheckReachesHead(g, resolved, issues);
  if (issues_out != nullptr) *issues_out = found;
  if (!found.empty()) {
    std::vector<std::string> lines;
    for (const ModelIssue& issue : found) {
      lines.push_back(absl::StrCat(IssuePath(issue), ": ", issue.message));
    }
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  for (size_t i = 0; i < g.layers.size(); ++i) {
    GraphLayer& layer = g.layers[i];
    LayerRuleContext ctx{static_cast<int>(i), &layer, &g.nodes, &g.tables,
                         &found};
    layer.first_tensor = static_cast<int>(g.tensors.size());
    for (TensorSpec& t : LayerTensors(ctx)) g.tensors.push_back(std::move(t));
    layer.num_tensors = static_cast<int>(g.tensors.size()) - layer.first_tensor;
  }
  return g;
}

}  // namespace ps
