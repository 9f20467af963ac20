#include "worker/model/embedding_bag_layer.h"

#include <utility>

#include "common/platform/status.h"

namespace ps::worker::model {
namespace {

class EmbeddingBagLayer final : public Layer {
 public:
  EmbeddingBagLayer(const SparseBatch* sparse, int table, std::vector<int> uses,
                    kernels::EmbeddingBagMode mode)
      : sparse_(sparse), table_(table), uses_(std::move(uses)), mode_(mode) {}

  absl::Status Forward(kernels::Backend& b, const LayerIo& io) override {
    const int64_t dim = sparse_->table(table_).dim;
    const int64_t width = dim * static_cast<int64_t>(uses_.size());
    for (size_t k = 0; k < uses_.size(); ++k) {
      PS_RETURN_IF_ERROR(b.EmbeddingBagForward(
          mode_, sparse_->rows(table_), sparse_->indices(uses_[k]),
          sparse_->offsets(uses_[k]), sparse_->weights(uses_[k]),
          kernels::DeviceMatrix<float>(io.output.data + k * dim, io.batch, dim,
                                       width)));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(kernels::Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    const kernels::DeviceMatrix<float> grad = sparse_->gradient(table_);
    if (grad.rows == 0) return absl::OkStatus();  // no ids in the batch
    const int64_t dim = grad.cols;
    const int64_t width = dim * static_cast<int64_t>(uses_.size());
    const kernels::DeviceMatrix<float> scratch = sparse_->scratch(table_);
    for (size_t k = 0; k < uses_.size(); ++k) {
      PS_RETURN_IF_ERROR(b.EmbeddingBagBackward(
          mode_, sparse_->indices(uses_[k]), sparse_->offsets(uses_[k]),
          sparse_->weights(uses_[k]),
          kernels::DeviceMatrix<const float>(g.doutput.data + k * dim, io.batch,
                                             dim, width),
          scratch));
      PS_RETURN_IF_ERROR(b.Axpy(1.0f, scratch.flat(), grad.flat()));
    }
    return absl::OkStatus();
  }

 private:
  const SparseBatch* const sparse_;
  const int table_;
  const std::vector<int> uses_;
  const kernels::EmbeddingBagMode mode_;
};

}  // namespace

std::vector<SparseBatch::FieldUse> EmbeddingBagUses(const ModelGraph& graph,
                                                    int index) {
  const GraphLayer& layer = graph.layers[index];
  std::vector<SparseBatch::FieldUse> uses;
  for (int node : layer.inputs) {
    uses.push_back({graph.nodes[node].name, layer.table,
                    layer.spec.embedding_bag().weighted()});
  }
  return uses;
}

std::unique_ptr<Layer> MakeEmbeddingBagLayer(const ModelGraph& graph, int index,
                                             const SparseBatch* sparse) {
  const GraphLayer& layer = graph.layers[index];
  std::vector<int> uses;
  for (const SparseBatch::FieldUse& u : EmbeddingBagUses(graph, index)) {
    uses.push_back(sparse->FindUse(u.field, u.table, u.weighted));
  }
  const kernels::EmbeddingBagMode mode =
      layer.spec.embedding_bag().mode() == EmbeddingBagLayerSpec::MEAN
          ? kernels::EmbeddingBagMode::kMean
          : kernels::EmbeddingBagMode::kSum;
  return std::make_unique<EmbeddingBagLayer>(sparse, layer.table,
                                             std::move(uses), mode);
}

}  // namespace ps::worker::model
