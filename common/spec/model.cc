#include "common/spec/model.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/model_graph.h"

namespace ps {

std::vector<TensorSpec> MlpTensors(const MlpSpec& mlp) {
  std::vector<int64_t> sizes;
  sizes.push_back(mlp.input_dim());
  for (int64_t h : mlp.hidden()) sizes.push_back(h);
  sizes.push_back(mlp.num_classes());
  const InitializerSpec::Kind weight_init =
      mlp.activation() == TANH ? InitializerSpec::XAVIER_UNIFORM
                               : InitializerSpec::HE_UNIFORM;
  std::vector<TensorSpec> tensors;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    TensorSpec w;
    w.set_name(absl::StrCat("fc", i, "/weight"));
    w.add_shape(sizes[i]);
    w.add_shape(sizes[i + 1]);
    w.mutable_init()->set_kind(weight_init);
    tensors.push_back(std::move(w));
    TensorSpec b;
    b.set_name(absl::StrCat("fc", i, "/bias"));
    b.add_shape(sizes[i + 1]);
    b.mutable_init()->set_kind(InitializerSpec::ZEROS);
    tensors.push_back(std::move(b));
  }
  return tensors;
}

absl::StatusOr<std::vector<TensorSpec>> ExpandModel(const ModelSpec& model) {
  const bool has_mlp = model.has_mlp();
  const bool has_layers = HasLayers(model);
  if (!has_mlp && !has_layers && model.tensors().empty()) {
    // A model of sparse tables only has no dense tensors.
    if (!model.sparse_tables().empty()) return std::vector<TensorSpec>();
    return absl::InvalidArgumentError(
        "model: empty model; set model.mlp or model.layers, or list "
        "model.tensors or model.sparse_tables");
  }
  if (!has_mlp && !has_layers) {
    return std::vector<TensorSpec>(model.tensors().begin(),
                                   model.tensors().end());
  }
  std::vector<TensorSpec> derived;
  if (has_layers) {
    absl::StatusOr<ModelGraph> graph =
        ResolveModelGraph(model, SparseTablesOf(model));
    if (!graph.ok()) return graph.status();
    derived = std::move(graph->tensors);
  } else {
    derived = MlpTensors(model.mlp());
  }
  const char* source = has_layers ? "model.layers imply" : "model.mlp implies";
  if (model.tensors().empty()) return derived;
  if (static_cast<size_t>(model.tensors_size()) != derived.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.tensors: lists ", model.tensors_size(),
                     " tensors but ", source, " ", derived.size()));
  }
  for (size_t i = 0; i < derived.size(); ++i) {
    const TensorSpec& given = model.tensors(static_cast<int>(i));
    if (given.name() != derived[i].name() ||
        ShapeString(given) != ShapeString(derived[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.tensors[", i, "]: mismatched layer shape: ", given.name(), " ",
          ShapeString(given), " but ", source, " ", derived[i].name(), " ",
          ShapeString(derived[i])));
    }
    if (given.has_init()) *derived[i].mutable_init() = given.init();
  }
  return derived;
}

int64_t NumElements(const TensorSpec& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape()) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string ShapeString(const TensorSpec& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.shape(), ", "), "]");
}

}  // namespace ps
