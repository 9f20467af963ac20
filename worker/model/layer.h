// One layer of a layer model (common/model_graph.h) as code: forward and
// backward over the Backend op API only, so the same layer runs on every
// backend. worker/model/layer_model.h strings the layers of a graph
// together; each layer sees device views of its inputs, its output and its
// dense tensors, never the graph.
#ifndef PS_WORKER_MODEL_LAYER_H_
#define PS_WORKER_MODEL_LAYER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_graph.h"
#include "kernels/backend.h"

namespace ps::worker::model {

// Views of one pass over `batch` examples, each [batch, width] row-major
// in device memory of the layer's backend.
struct LayerIo {
  int64_t batch = 0;
  std::vector<kernels::DeviceSpan<const float>> inputs;  // in the order written
  kernels::DeviceSpan<float> output;
  std::vector<kernels::DeviceSpan<float>> params;  // the layer's tensors
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
