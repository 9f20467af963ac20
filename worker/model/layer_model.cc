#include "worker/model/layer_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/spec/model_graph.h"
#include "worker/model/embedding_bag_layer.h"
#include "worker/model/head.h"
#include "worker/model/layer.h"
#include "worker/model/sparse_batch.h"

namespace ps::worker::model {
namespace {

using kernels::Backend;
using kernels::DeviceBuffer;
using kernels::DeviceSpan;

// Owns the graph's parameters, gradients and per-node activations and
// gradients (grown to the largest batch seen). Not thread-safe.
class LayerModel final : public TrainableModel {
 public:
  LayerModel(Backend* backend, ModelGraph graph)
      : backend_(backend),
        graph_(std::move(graph)),
        sparse_(graph_.tables, SparseUses(graph_)),
        head_(graph_.loss, graph_.nodes[graph_.head_node].width()) {
    for (const GraphLayer& l : graph_.layers) {
      max_inputs_ = std::max(max_inputs_, static_cast<int>(l.inputs.size()));
    }
    for (const TensorSpec& t : graph_.tensors) {
      ParameterInfo p{t.name(), {t.shape().begin(), t.shape().end()}, 1};
      for (int64_t d : p.shape) p.size *= d;
      info_.push_back(std::move(p));
    }
    layer_of_tensor_.assign(info_.size(), -1);
    for (int i = 0; i < static_cast<int>(graph_.layers.size()); ++i) {
      const GraphLayer& l = graph_.layers[i];
      for (int t = 0; t < l.num_tensors; ++t) {
        layer_of_tensor_[l.first_tensor + t] = i;
      }
    }
    for (const SparseTableRef& t : graph_.tables) {
      tables_.push_back({t.name, t.dim});
    }
    for (const GraphNode& node : graph_.nodes) {
      if (node.kind == NodeKind::kSparse) has_sparse_inputs_ = true;
    }
  }

  // Makes the layers and the parameters.
  absl::Status Init() {
    for (int i = 0; i < static_cast<int>(graph_.layers.size()); ++i) {
      if (graph_.layers[i].spec.has_embedding_bag()) {
        layers_.push_back(MakeEmbeddingBagLayer(graph_, i, &sparse_));
        continue;
      }
      PS_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer, MakeLayer(graph_, i));
      layers_.push_back(std::move(layer));
    }
    // A layer's weight splits in row blocks where the layer can take them
    // and reads only model inputs (the MLP's first layer): no input
    // gradient reads the weight in backward, and the model keeps its
    // numerics, block sums included, for every existing MLP config.
    splits_rows_.assign(info_.size(), false);
    for (int i = 0; i < static_cast<int>(graph_.layers.size()); ++i) {
      const GraphLayer& l = graph_.layers[i];
      bool model_inputs = true;
      for (int node : l.inputs) {
        model_inputs &= graph_.nodes[node].kind != NodeKind::kLayer;
      }
      if (layers_[i]->SplitsRows() && model_inputs && l.num_tensors > 0 &&
          info_[l.first_tensor].shape.size() == 2) {
        splits_rows_[l.first_tensor] = true;
      }
    }
    for (const ParameterInfo& p : info_) {
      for (std::vector<DeviceBuffer>* v : {&params_, &grads_}) {
        PS_ASSIGN_OR_RETURN(DeviceBuffer b,
                            backend_->AllocateArray<float>(p.size));
        PS_RETURN_IF_ERROR(backend_->Fill(0.0f, b.Span<float>(p.size)));
        v->push_back(std::move(b));
      }
    }
    return absl::OkStatus();
  }

  const std::vector<ParameterInfo>& parameters() const override {
    return info_;
  }
  bool SplitsRows(int index) const override {
    return Valid(index) && splits_rows_[index];
  }
  DeviceSpan<float> parameter(int index) override {
    if (!Valid(index)) return {};
    return params_[index].Span<float>(info_[index].size);
  }
  DeviceSpan<const float> gradient(int index) const override {
    if (!Valid(index)) return {};
    return grads_[index].Span<float>(info_[index].size);
  }
  absl::Status SetParameterRange(int index, int64_t offset,
                                 absl::Span<const float> host) override {
    PS_RETURN_IF_ERROR(CheckRange(index, offset, host.size()));
    if (host.empty()) return absl::OkStatus();
    return backend_->CopyToDevice(host.data(), parameter(index).data + offset,
                                  Bytes(host.size()));
  }
  absl::Status GetGradientRange(int index, int64_t offset,
                                absl::Span<float> host) override {
    PS_RETURN_IF_ERROR(CheckRange(index, offset, host.size()));
    if (host.empty()) return absl::OkStatus();
    return backend_->CopyToHost(gradient(index).data + offset, host.data(),
                                Bytes(host.size()));
  }
  absl::Status SwapParameterBuffer(int index, DeviceBuffer& other) override {
    return Swap(params_, index, other);
  }
  absl::Status SwapGradientBuffer(int index, DeviceBuffer& other) override {
    return Swap(grads_, index, other);
  }

  const std::vector<SparseTableInfo>& sparse_tables() const override {
    return tables_;
  }
  absl::StatusOr<std::vector<std::vector<uint64_t>>> PrepareSparse(
      const data::Batch& batch) override {
    prepared_size_ = -1;
    PS_RETURN_IF_ERROR(sparse_.Load(*backend_, batch));
    prepared_size_ = batch.size;
    std::vector<std::vector<uint64_t>> keys;
    for (int t = 0; t < sparse_.num_tables(); ++t) {
      keys.push_back(sparse_.keys(t));
    }
    return keys;
  }
  absl::Status SetSparseRows(int table, absl::Span<const float> rows) override {
    PS_RETURN_IF_ERROR(CheckTable(table));
    return sparse_.SetRows(*backend_, table, rows);
  }
  absl::Status GetSparseGradient(int table, absl::Span<float> rows) override {
    PS_RETURN_IF_ERROR(CheckTable(table));
    return sparse_.GetGradient(*backend_, table, rows);
  }
  absl::StatusOr<float> TrainStep(const data::Batch& batch,
                                  const ModelStepHooks& hooks) override {
    PS_RETURN_IF_ERROR(LoadData(batch));
    return Step(batch.size, hooks);
  }
  absl::StatusOr<ModelEvaluation> Evaluate(const data::Batch& batch) override {
    PS_RETURN_IF_ERROR(LoadData(batch));
    PS_RETURN_IF_ERROR(Forward(batch.size, nullptr, {}));
    return head_.Evaluate(*backend_, batch.size, HeadOutput(batch.size));
  }

 private:
  static std::vector<SparseBatch::FieldUse> SparseUses(const ModelGraph& g) {
    std::vector<SparseBatch::FieldUse> uses;
    for (int i = 0; i < static_cast<int>(g.layers.size()); ++i) {
      if (!g.layers[i].spec.has_embedding_bag()) continue;
      for (const SparseBatch::FieldUse& u : EmbeddingBagUses(g, i)) {
        bool seen = false;
        for (const SparseBatch::FieldUse& v : uses) {
          seen |= v.field == u.field && v.table == u.table &&
                  v.weighted == u.weighted;
        }
        if (!seen) uses.push_back(u);
      }
    }
    return uses;
  }
  absl::Status CheckTable(int table) const {
    if (table < 0 || table >= sparse_.num_tables()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", table, " outside [0, ", sparse_.num_tables(), ")"));
    }
    return absl::OkStatus();
  }
  // Forward, the head's loss, backward.
  absl::StatusOr<float> Step(int64_t n, const ModelStepHooks& hooks) {
    PS_ASSIGN_OR_RETURN(const std::vector<RowBlocks> blocks, BlocksOf(hooks));
    PS_RETURN_IF_ERROR(Forward(n, &hooks, blocks));
    PS_RETURN_IF_ERROR(
        head_.Loss(*backend_, n, HeadOutput(n), Gradient(graph_.head_node, n)));
    if (hooks.before_backward) PS_RETURN_IF_ERROR(hooks.before_backward());
    PS_RETURN_IF_ERROR(Backward(n, hooks, blocks));
    return head_.LastLoss(*backend_);
  }
  // Per layer, the row blocks of its weight `hooks` ask for (rows empty:
  // whole), announcing to the hooks by parameter index.
  absl::StatusOr<std::vector<RowBlocks>> BlocksOf(
      const ModelStepHooks& hooks) const {
    std::vector<RowBlocks> blocks;
    if (hooks.row_splits.size() > info_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("row_splits names ", hooks.row_splits.size(),
                       " parameters; the model has ", info_.size()));
    }
    for (int i = 0; i < static_cast<int>(hooks.row_splits.size()); ++i) {
      const std::vector<int64_t>& splits = hooks.row_splits[i];
      if (splits.empty()) continue;
      if (!splits_rows_[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(info_[i].name, " does not split in row blocks"));
      }
      if (blocks.empty()) blocks.resize(graph_.layers.size());
      const int li = layer_of_tensor_[i];
      RowBlocks& b = blocks[li];
      const int64_t rows = info_[i].shape[0];
      b.rows = {0};
      for (int64_t r : splits) {
        if (r <= b.rows.back() || r >= rows) {
          return absl::InvalidArgumentError(absl::StrCat(
              "row splits of ", info_[i].name, " must ascend inside (0, ", rows,
              "), got ", r, " after ", b.rows.back()));
        }
        b.rows.push_back(r);
      }
      b.rows.push_back(rows);
      if (hooks.before_use) {
        b.before_use = [&hooks, i](int t, int64_t begin, int64_t end) {
          return hooks.before_use(i + t, begin, end);
        };
      }
      if (hooks.on_gradient_part) {
        b.on_gradient_part = [&hooks, i](int t, int64_t begin, int64_t end) {
          hooks.on_gradient_part(i + t, begin, end);
        };
      }
    }
    return blocks;
  }
  // The row blocks of layer `li` in `blocks` (BlocksOf), or null.
  static const RowBlocks* BlocksAt(const std::vector<RowBlocks>& blocks,
                                   int li) {
    if (blocks.empty() || blocks[li].rows.empty()) return nullptr;
    return &blocks[li];
  }
  // A data reader's batch: its dense values, its labels, and (checked)
  // the sparse fields PrepareSparse loaded.
  absl::Status LoadData(const data::Batch& batch) {
    if (has_sparse_inputs_ && prepared_size_ != batch.size) {
      return absl::FailedPreconditionError(
          "PrepareSparse(batch) must come before the batch's step");
    }
    PS_RETURN_IF_ERROR(Load(batch.dense, batch.size));
    switch (batch.label_kind) {
      case data::LabelKind::kClass:
        return head_.SetLabels(*backend_, batch.classes);
      case data::LabelKind::kFloat:
        return head_.SetTargets(*backend_, batch.labels);
      default:
        return absl::InvalidArgumentError("the batch has no labels");
    }
  }
  static int64_t Bytes(size_t floats) {
    return static_cast<int64_t>(floats * sizeof(float));
  }
  bool Valid(int index) const { return index >= 0 && index < num_parameters(); }
  absl::Status CheckRange(int index, int64_t offset, size_t size) const {
    if (!Valid(index)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter index ", index, " outside [0, ", num_parameters(), ")"));
    }
    const ParameterInfo& p = info_[index];
    if (offset < 0 || offset > p.size ||
        static_cast<int64_t>(size) > p.size - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("elements [", offset, ", ", offset + size, ") of ",
                       p.name, " are outside its ", p.size));
    }
    return absl::OkStatus();
  }
  absl::Status Swap(std::vector<DeviceBuffer>& buffers, int index,
                    DeviceBuffer& other) {
    PS_RETURN_IF_ERROR(CheckRange(index, 0, 0));
    if (other.bytes() < Bytes(info_[index].size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a buffer of ", other.bytes(), " bytes cannot hold ",
                       info_[index].name, " (", info_[index].size, " floats)"));
    }
    std::swap(buffers[index], other);
    return absl::OkStatus();
  }

  // Grows the activations and their gradients to `batch` examples.
  absl::Status Reserve(int64_t batch) {
    if (batch <= capacity_) return absl::OkStatus();
    int64_t widest = 1;
    std::vector<DeviceBuffer> acts, grads;
    for (const GraphNode& node : graph_.nodes) {
      widest = std::max(widest, node.width());
      const bool layer = node.kind == NodeKind::kLayer;
      PS_ASSIGN_OR_RETURN(DeviceBuffer a,
                          backend_->AllocateArray<float>(
                              batch * std::max<int64_t>(node.width(), 1)));
      acts.push_back(std::move(a));
      if (layer) {
        PS_ASSIGN_OR_RETURN(DeviceBuffer g, backend_->AllocateArray<float>(
                                                batch * node.width()));
        grads.push_back(std::move(g));
      } else {
        grads.emplace_back();
      }
    }
    std::vector<DeviceBuffer> scratch;
    for (int k = 0; k < max_inputs_; ++k) {
      PS_ASSIGN_OR_RETURN(DeviceBuffer s,
                          backend_->AllocateArray<float>(batch * widest));
      scratch.push_back(std::move(s));
    }
    for (const std::unique_ptr<Layer>& layer : layers_) {
      PS_RETURN_IF_ERROR(layer->Reserve(*backend_, batch));
    }
    PS_RETURN_IF_ERROR(head_.Reserve(*backend_, batch));
    acts_ = std::move(acts);
    dacts_ = std::move(grads);
    scratch_ = std::move(scratch);
    capacity_ = batch;
    return absl::OkStatus();
  }

  // Checks the batch's dense values and uploads them (the inputs "dense"
  // and "image" share them).
  absl::Status Load(absl::Span<const float> values, int64_t n) {
    if (n <= 0) return absl::InvalidArgumentError("empty batch");
    PS_RETURN_IF_ERROR(Reserve(n));
    for (int id = 0; id < static_cast<int>(graph_.nodes.size()); ++id) {
      const GraphNode& node = graph_.nodes[id];
      if (node.kind == NodeKind::kLayer || node.kind == NodeKind::kSparse) {
        continue;
      }
      if (static_cast<int64_t>(values.size()) != n * node.width()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", node.name, "' takes ", node.width(),
            " values per example; a batch of ", n, " has ", values.size()));
      }
      PS_RETURN_IF_ERROR(backend_->CopyToDevice(values.data(), acts_[id].data(),
                                                Bytes(values.size())));
    }
    return absl::OkStatus();
  }

  DeviceSpan<float> Activation(int node, int64_t batch) {
    return acts_[node].Span<float>(batch * graph_.nodes[node].width());
  }
  DeviceSpan<float> Gradient(int node, int64_t batch) {
    return dacts_[node].Span<float>(batch * graph_.nodes[node].width());
  }
  DeviceSpan<const float> HeadOutput(int64_t batch) {
    return Activation(graph_.head_node, batch);
  }

  LayerIo IoOf(int li, int64_t batch, const RowBlocks* blocks) {
    const GraphLayer& layer = graph_.layers[li];
    LayerIo io;
    io.batch = batch;
    io.row_blocks = blocks;
    for (int node : layer.inputs) io.inputs.push_back(Activation(node, batch));
    io.output = Activation(layer.node, batch);
    for (int t = 0; t < layer.num_tensors; ++t) {
      io.params.push_back(parameter(layer.first_tensor + t));
    }
    return io;
  }

  // A layer with row blocks announces its tensors' use itself.
  absl::Status Forward(int64_t batch, const ModelStepHooks* hooks,
                       const std::vector<RowBlocks>& blocks) {
    for (int li : graph_.order) {
      const GraphLayer& layer = graph_.layers[li];
      const RowBlocks* rb = BlocksAt(blocks, li);
      if (hooks != nullptr && hooks->before_use && rb == nullptr) {
        for (int t = 0; t < layer.num_tensors; ++t) {
          const int index = layer.first_tensor + t;
          PS_RETURN_IF_ERROR(hooks->before_use(index, 0, info_[index].size));
        }
      }
      PS_RETURN_IF_ERROR(layers_[li]->Forward(*backend_, IoOf(li, batch, rb)));
    }
    return absl::OkStatus();
  }

  // Runs the layers backwards. A node's gradient is written by the first
  // layer (in backward order) that reads it, and summed into by the rest
  // through scratch. A layer with row blocks announces its gradients itself.
  absl::Status Backward(int64_t batch, const ModelStepHooks& hooks,
                        const std::vector<RowBlocks>& blocks) {
    std::vector<bool> written(graph_.nodes.size(), false);
    written[graph_.head_node] = true;
    for (auto it = graph_.order.rbegin(); it != graph_.order.rend(); ++it) {
      const int li = *it;
      const GraphLayer& layer = graph_.layers[li];
      const RowBlocks* rb = BlocksAt(blocks, li);
      const LayerIo io = IoOf(li, batch, rb);
      LayerGrads g;
      g.doutput = Gradient(layer.node, batch);
      std::vector<std::pair<int, int>> sums;  // (node, scratch)
      for (size_t k = 0; k < layer.inputs.size(); ++k) {
        const int node = layer.inputs[k];
        if (graph_.nodes[node].kind != NodeKind::kLayer) {
          g.dinputs.emplace_back();
        } else if (!written[node]) {
          written[node] = true;
          g.dinputs.push_back(Gradient(node, batch));
        } else {
          const int s = static_cast<int>(sums.size());
          sums.emplace_back(node, s);
          g.dinputs.push_back(
              scratch_[s].Span<float>(batch * graph_.nodes[node].width()));
        }
      }
      for (int t = 0; t < layer.num_tensors; ++t) {
        g.dparams.push_back(grads_[layer.first_tensor + t].Span<float>(
            info_[layer.first_tensor + t].size));
      }
      PS_RETURN_IF_ERROR(layers_[li]->Backward(*backend_, io, g));
      for (const auto& [node, s] : sums) {
        PS_RETURN_IF_ERROR(backend_->Axpy(
            1.0f, scratch_[s].Span<float>(batch * graph_.nodes[node].width()),
            Gradient(node, batch)));
      }
      if (hooks.on_gradient_part && rb == nullptr) {
        for (int t = 0; t < layer.num_tensors; ++t) {
          const int index = layer.first_tensor + t;
          hooks.on_gradient_part(index, 0, info_[index].size);
        }
      }
    }
    return absl::OkStatus();
  }

  Backend* const backend_;
  const ModelGraph graph_;
  SparseBatch sparse_;  // the embedding bags' view of the current batch
  std::vector<std::unique_ptr<Layer>> layers_;  // as graph_.layers
  Head head_;
  std::vector<SparseTableInfo> tables_;  // graph_.tables
  bool has_sparse_inputs_ = false;
  int64_t prepared_size_ = -1;        // the batch PrepareSparse loaded
  std::vector<ParameterInfo> info_;   // graph_.tensors
  std::vector<bool> splits_rows_;     // per parameter: SplitsRows
  std::vector<int> layer_of_tensor_;  // per parameter: its layer
  std::vector<DeviceBuffer> params_;
  std::vector<DeviceBuffer> grads_;
  int max_inputs_ = 0;  // inputs of the layer with the most
  int64_t capacity_ = 0;
  std::vector<DeviceBuffer> acts_;   // per node
  std::vector<DeviceBuffer> dacts_;  // per layer node (empty for inputs)
  std::vector<DeviceBuffer> scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainableModel>> CreateLayerModel(
    const ModelSpec& spec, int64_t example_size, kernels::Backend* backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateLayerModel: backend is null");
  }
  PS_ASSIGN_OR_RETURN(ModelGraph graph,
                      ResolveModelGraph(spec, SparseTablesOf(spec)));
  for (const GraphNode& node : graph.nodes) {
    if (example_size > 0 &&
        (node.kind == NodeKind::kDense || node.kind == NodeKind::kImage) &&
        node.width() != example_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("model input '", node.name, "' has ", node.width(),
                       " values per example but the dataset's examples have ",
                       example_size));
    }
  }
  auto model = std::make_unique<LayerModel>(backend, std::move(graph));
  PS_RETURN_IF_ERROR(model->Init());
  return std::unique_ptr<TrainableModel>(std::move(model));
}

}  // namespace ps::worker::model
