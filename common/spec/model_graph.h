// Layer models resolved: the DAG of named layers over named model inputs
// that ModelSpec.layers (or the MlpSpec shorthand) describes, with every
// node's shape, an order to run the layers in, each layer's dense tensors
// and sparse table, and the head. Config validation (common/spec/config.h)
// reports its problems with their lines; the worker's model layer
// (worker/model/) builds the runnable model from it; ExpandModel
// (common/spec/model.h) takes the dense tensors from it.
#ifndef PS_COMMON_SPEC_MODEL_GRAPH_H_
#define PS_COMMON_SPEC_MODEL_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace ps {

// A sparse table a layer model may read by name.
struct SparseTableRef {
  std::string name;
  int64_t dim = 0;  // values per row
};

// The model's sparse tables (ModelSpec.sparse_tables, in order: the index
// is the table's id on the wire); layers refer to them by name.
std::vector<SparseTableRef> SparseTablesOf(const ModelSpec& model);

// One step of a field path below ModelSpec, e.g. {"layers", 3}.
struct FieldStep {
  std::string field;
  int index = -1;  // for repeated fields
};

// A problem with a model: where (below ModelSpec), and what. Messages name
// the layer.
struct ModelIssue {
  std::vector<FieldStep> path;
  std::string message;
};

enum class NodeKind {
  kDense,   // model input "dense": the batch's dense features
  kImage,   // model input "image": the same values as an NHWC image
  kSparse,  // model input: a sparse field of the batch, by name
  kLayer,   // a layer's output
};

struct GraphNode {
  std::string name;
  NodeKind kind = NodeKind::kLayer;
  int layer = -1;              // kLayer: index in ModelGraph::layers
  std::vector<int64_t> shape;  // per example; empty for kSparse
  // Values per example (the product of the shape; 0 for kSparse).
  int64_t width() const;
};

struct GraphLayer {
  LayerSpec spec;           // as written (defaults not filled in)
  int node = -1;            // its output, in ModelGraph::nodes
  std::vector<int> inputs;  // node ids, in the order written
  // Its dense tensors: ModelGraph::tensors[first_tensor, + num_tensors).
  int first_tensor = 0;
  int num_tensors = 0;
  int table = -1;  // embedding_bag: index in ModelGraph::tables
};

struct ModelGraph {
  // The model inputs in the order written, then one node per layer in the
  // order written.
  std::vector<GraphNode> nodes;
  std::vector<GraphLayer> layers;  // in the order written
  // Layer indices in an order where every layer comes after its inputs
  // (the written order where it already is one).
  std::vector<int> order;
  HeadSpec::Loss loss = HeadSpec::LOSS_UNSPECIFIED;
  int head_node = -1;  // the node the head reads
  // The dense tensors, layer by layer in the written order, each layer's
  // in its own order (weight, then bias), initialisers filled in.
  std::vector<TensorSpec> tensors;
  std::vector<SparseTableRef> tables;  // as given

  // Index of the node named `name`, or -1.
  int FindNode(const std::string& name) const;
};

// The layer model `model` describes: its inputs, layers and head as
// written, or those the MlpSpec shorthand expands to (input "dense", Dense
// layers "fc<i>" whose tensors are common/spec/model.h's MlpTensors, a softmax
// cross-entropy head). The result has no `mlp` and no `tensors`.
ModelSpec LayerModelOf(const ModelSpec& model);

// Whether `model` is a layer model written out (ModelSpec.layers), as
// opposed to the MLP shorthand or a list of tensors only.
bool HasLayers(const ModelSpec& model);

// Resolves LayerModelOf(model) against `tables`. Every problem is found, not
// only the first: unknown or duplicate names, a layer without its kind or
// with the wrong number or kinds of inputs, shapes that do not fit (with
// both shapes in the message), a cycle (naming its layers), an embedding
// bag whose table is not in `tables`, a layer whose output does not lead to
// the head, a head that does not fit its input. INVALID_ARGUMENT listing
// them one per line as "model.<path>: <message>"; `issues`, if given,
// receives them with their paths (for errors that carry lines).
absl::StatusOr<ModelGraph> ResolveModelGraph(
    const ModelSpec& model, const std::vector<SparseTableRef>& tables,
    std::vector<ModelIssue>* issues = nullptr);

// "model.layers[2].inputs[0]".
std::string IssuePath(const ModelIssue& issue);

}  // namespace ps

#endif  // PS_COMMON_SPEC_MODEL_GRAPH_H_
