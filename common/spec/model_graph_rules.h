// Private to common/spec/model_graph.cc: the rules of each layer kind (how many
// inputs of which kinds and shapes, the output shape, the dense tensors).
#ifndef PS_COMMON_SPEC_MODEL_GRAPH_RULES_H_
#define PS_COMMON_SPEC_MODEL_GRAPH_RULES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/spec/model_graph.h"
#include "proto/config.pb.h"

namespace ps::model_graph_internal {

// What one layer's rules need: the layer (index in ModelSpec.layers), the
// nodes so far (its inputs' shapes known), the tables, and where problems
// go.
struct LayerRuleContext {
  int index = 0;
  const GraphLayer* layer = nullptr;
  const std::vector<GraphNode>* nodes = nullptr;
  const std::vector<SparseTableRef>* tables = nullptr;
  std::vector<ModelIssue>* issues = nullptr;

  const GraphNode& input(size_t k) const { return (*nodes)[layer->inputs[k]]; }
  // Adds "layer '<name>': <message>" at model.layers[index] + `sub`.
  void Fail(std::vector<FieldStep> sub, const std::string& message) const;
};

// The output shape of ctx.layer (all inputs resolved), or an empty shape
// after reporting why not. Sets *table for an embedding bag.
std::vector<int64_t> InferOutputShape(const LayerRuleContext& ctx, int* table);

// The layer's dense tensors (names "<layer>/weight", "<layer>/bias"),
// initialisers filled in. Inputs' shapes must be valid (InferOutputShape
// succeeded).
std::vector<TensorSpec> LayerTensors(const LayerRuleContext& ctx);

// "[28, 28, 1]".
std::string ShapeText(const std::vector<int64_t>& shape);

// Name of the oneof field set in `layer` ("dense", "conv2d", ...), or "".
std::string KindName(const LayerSpec& layer);

}  // namespace ps::model_graph_internal

#endif  // PS_COMMON_SPEC_MODEL_GRAPH_RULES_H_
