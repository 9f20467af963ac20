// One layer of a layer model (common/spec/model_graph.h) as code: forward and
// backward over the Backend op API only, so the same layer runs on every
// backend. worker/model/layer_model.h strings the layers of a graph
// together; each layer sees device views of its inputs, its output and its
// dense tensors, never the graph.
#ifndef PS_WORKER_MODEL_LAYER_H_
#define PS_WORKER_MODEL_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/spec/model_graph.h"
#include "kernels/backend.h"

namespace ps::worker::model {

// A training step's use of a layer's weight (params[0], [rows, width]) in
// blocks of rows, so that a worker can overlap its transfers with the step
// (ModelStepHooks::row_splits). With it the layer announces each of its
// tensors itself (tensor t is params[t]; ranges are elements):
// before_use(t, begin, end) before forward reads them (the weight block by
// block, in row order, then the others whole), and on_gradient_part(t,
// begin, end) once backward has written that part of dparams[t] and no
// longer reads params[t] (the weight block by block, then the others).
// Forward sums the blocks' products; backward computes the input's
// gradient first, then the weight's block by block. Without it the model
// announces every tensor whole, before Forward and after Backward.
struct RowBlocks {
  std::vector<int64_t> rows;  // [0, splits..., rows], ascending
  std::function<absl::Status(int tensor, int64_t begin, int64_t end)>
      before_use;  // may be empty
  std::function<void(int tensor, int64_t begin, int64_t end)>
      on_gradient_part;  // may be empty
};

// Views of one pass over `batch` examples, each [batch, width] row-major
// in device memory of the layer's backend.
struct LayerIo {
  int64_t batch = 0;
  std::vector<kernels::DeviceSpan<const float>> inputs;  // in the order written
  kernels::DeviceSpan<float> output;
  std::vector<kernels::DeviceSpan<float>> params;  // the layer's tensors
  // Set only for a training step's pass over a layer whose SplitsRows()
  // is true, when the step splits its weight; Backward sees the same.
  const RowBlocks* row_blocks = nullptr;
};

// The backward pass's views. `doutput` (d loss / d output) is the layer's to
// overwrite (e.g. with the gradient before its activation). Every
// dinputs[k] and dparams[k] with data is overwritten; a null dinputs[k] is
// not wanted (a model input).
struct LayerGrads {
  kernels::DeviceSpan<float> doutput;
  std::vector<kernels::DeviceSpan<float>> dinputs;
  std::vector<kernels::DeviceSpan<float>> dparams;
};

// Owns its scratch (pooling's argmax, convolution's workspace), sized by
// Reserve for the largest batch. Not thread-safe.
class Layer {
 public:
  virtual ~Layer() = default;
  // Whether the layer can use its weight (params[0]) in row blocks
  // (LayerIo::row_blocks).
  virtual bool SplitsRows() const { return false; }
  // Grows the layer's scratch to passes of up to `batch` examples.
  virtual absl::Status Reserve(kernels::Backend& backend, int64_t batch) {
    (void)backend;
    (void)batch;
    return absl::OkStatus();
  }
  // output = f(inputs, params). Backward must see the same io.
  virtual absl::Status Forward(kernels::Backend& backend,
                               const LayerIo& io) = 0;
  // Gradients of the last Forward over the same io (output as it left it).
  virtual absl::Status Backward(kernels::Backend& backend, const LayerIo& io,
                                const LayerGrads& grads) = 0;
};

// The layer graph.layers[index] describes, for its resolved shapes; every
// kind but EmbeddingBag, which reads the batch's sparse fields
// (worker/model/embedding_bag_layer.h): UNIMPLEMENTED naming the layer.
absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(const ModelGraph& graph,
                                                 int index);

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_LAYER_H_
