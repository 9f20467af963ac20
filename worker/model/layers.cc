// The dense layers: Dense, activations, Conv2D, pooling, Flatten, Concat,
// Add, and the interactions (DLRM's dot, FM's second order, matrix
// factorization's Dot). EmbeddingBag reads sparse tables and lives with the
// model (worker/model/layer_model.cc).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "worker/model/layer.h"

namespace ps::worker::model {
namespace {

using kernels::Backend;
using kernels::DeviceBuffer;
using kernels::DeviceMatrix;
using kernels::DeviceMatrixBatch;
using kernels::DeviceSpan;
using kernels::Transpose;

std::optional<kernels::Activation> ToKernels(Activation a) {
  switch (a) {
    case RELU:
      return kernels::Activation::kRelu;
    case TANH:
      return kernels::Activation::kTanh;
    case SIGMOID:
      return kernels::Activation::kSigmoid;
    default:
      return std::nullopt;
  }
}

template <typename T>
DeviceMatrix<T> AsMatrix(DeviceSpan<T> s, int64_t rows) {
  return DeviceMatrix<T>(s.data, rows, rows == 0 ? 0 : s.size / rows);
}

absl::Status Copy(Backend& b, DeviceSpan<const float> src,
                  DeviceSpan<float> dst) {
  return b.CopyOnDevice(src.data, dst.data,
                        src.size * static_cast<int64_t>(sizeof(float)));
}

// Grows `buf` to at least `count` elements of T.
template <typename T>
absl::Status Grow(Backend& b, DeviceBuffer& buf, int64_t count) {
  if (count <= 0 || buf.bytes() >= count * static_cast<int64_t>(sizeof(T))) {
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceBuffer> grown = b.AllocateArray<T>(count);
  if (!grown.ok()) return grown.status();
  buf = *std::move(grown);
  return absl::OkStatus();
}

// y = act(x W + b): params {weight [in, units], bias [units]}. The weight
// can be used in row blocks (RowBlocks).
class DenseLayer final : public Layer {
 public:
  explicit DenseLayer(std::optional<kernels::Activation> act) : act_(act) {}

  bool SplitsRows() const override { return true; }

  absl::Status Forward(Backend& b, const LayerIo& io) override {
    DeviceMatrix<float> y = AsMatrix(io.output, io.batch);
    DeviceMatrix<const float> x = AsMatrix(io.inputs[0], io.batch);
    const RowBlocks* blocks = io.row_blocks;
    if (blocks == nullptr) {
      PS_RETURN_IF_ERROR(b.Gemm(Transpose::kNo, Transpose::kNo, 1.0f, x,
                                Weight(io.params[0], 0, x.cols, y.cols), 0.0f,
                                y));
    } else {
      // y = sum over the blocks of X[:, rows] W[rows, :], each block as
      // soon as its weights are there.
      const std::vector<int64_t>& rows = blocks->rows;
      for (size_t k = 0; k + 1 < rows.size(); ++k) {
        const int64_t r0 = rows[k], r1 = rows[k + 1];
        PS_RETURN_IF_ERROR(Use(*blocks, 0, r0 * y.cols, r1 * y.cols));
        PS_RETURN_IF_ERROR(b.Gemm(
            Transpose::kNo, Transpose::kNo, 1.0f,
            DeviceMatrix<const float>(x.data + r0, io.batch, r1 - r0, x.cols),
            Weight(io.params[0], r0, r1, y.cols), k == 0 ? 0.0f : 1.0f, y));
      }
      PS_RETURN_IF_ERROR(Use(*blocks, 1, 0, io.params[1].size));
    }
    PS_RETURN_IF_ERROR(b.BiasAdd(io.params[1], y));
    if (!act_) return absl::OkStatus();
    return b.ActivationForward(*act_, y.flat(), y.flat());
  }

  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    if (act_) {
      PS_RETURN_IF_ERROR(
          b.ActivationBackward(*act_, io.output, g.doutput, g.doutput));
    }
    DeviceMatrix<const float> dz = AsMatrix<const float>(g.doutput, io.batch);
    DeviceMatrix<const float> x = AsMatrix(io.inputs[0], io.batch);
    const RowBlocks* blocks = io.row_blocks;
    if (blocks == nullptr) {
      PS_RETURN_IF_ERROR(
          b.Gemm(Transpose::kYes, Transpose::kNo, 1.0f, x, dz, 0.0f,
                 DeviceMatrix<float>(g.dparams[0].data, x.cols, dz.cols)));
      PS_RETURN_IF_ERROR(b.BiasGrad(dz, g.dparams[1]));
      return InputGradient(b, io, g, dz);
    }
    // The input's gradient first: it is the step's last read of W, which
    // the caller may overwrite once a block's gradient is handed out.
    PS_RETURN_IF_ERROR(InputGradient(b, io, g, dz));
    const std::vector<int64_t>& rows = blocks->rows;
    for (size_t k = 0; k + 1 < rows.size(); ++k) {
      const int64_t r0 = rows[k], r1 = rows[k + 1];
      PS_RETURN_IF_ERROR(b.Gemm(
          Transpose::kYes, Transpose::kNo, 1.0f,
          DeviceMatrix<const float>(x.data + r0, io.batch, r1 - r0, x.cols), dz,
          0.0f,
          DeviceMatrix<float>(g.dparams[0].data + r0 * dz.cols, r1 - r0,
                              dz.cols)));
      Part(*blocks, 0, r0 * dz.cols, r1 * dz.cols);
    }
    PS_RETURN_IF_ERROR(b.BiasGrad(dz, g.dparams[1]));
    Part(*blocks, 1, 0, g.dparams[1].size);
    return absl::OkStatus();
  }

 private:
  // Rows [r0, r1) of the weight [*, cols].
  static DeviceMatrix<const float> Weight(DeviceSpan<const float> w, int64_t r0,
                                          int64_t r1, int64_t cols) {
    return DeviceMatrix<const float>(w.data + r0 * cols, r1 - r0, cols);
  }
  static absl::Status Use(const RowBlocks& blocks, int tensor, int64_t begin,
                          int64_t end) {
    if (!blocks.before_use) return absl::OkStatus();
    return blocks.before_use(tensor, begin, end);
  }
  static void Part(const RowBlocks& blocks, int tensor, int64_t begin,
                   int64_t end) {
    if (blocks.on_gradient_part) blocks.on_gradient_part(tensor, begin, end);
  }
  // d(input) = dz W^T, where wanted.
  static absl::Status InputGradient(Backend& b, const LayerIo& io,
                                    const LayerGrads& g,
                                    DeviceMatrix<const float> dz) {
    if (g.dinputs[0].data == nullptr) return absl::OkStatus();
    const int64_t in = io.inputs[0].size / io.batch;
    return b.Gemm(Transpose::kNo, Transpose::kYes, 1.0f, dz,
                  Weight(io.params[0], 0, in, dz.cols), 0.0f,
                  AsMatrix(g.dinputs[0], io.batch));
  }

  const std::optional<kernels::Activation> act_;
};

class ActivationLayer final : public Layer {
 public:
  explicit ActivationLayer(kernels::Activation act) : act_(act) {}
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    return b.ActivationForward(act_, io.inputs[0], io.output);
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    if (g.dinputs[0].data == nullptr) return absl::OkStatus();
    return b.ActivationBackward(act_, io.output, g.doutput, g.dinputs[0]);
  }

 private:
  const kernels::Activation act_;
};

// NHWC convolution through the backend's im2col + GEMM: params {weight
// [k * k * in_c, filters] (HWIO), bias [filters]}.
class Conv2DLayer final : public Layer {
 public:
  Conv2DLayer(kernels::ConvGeometry g, std::optional<kernels::Activation> act)
      : geometry_(g), act_(act) {}

  absl::Status Reserve(Backend& b, int64_t batch) override {
    return Grow<float>(b, workspace_, b.ConvWorkspaceSize(At(batch)));
  }

  absl::Status Forward(Backend& b, const LayerIo& io) override {
    const kernels::ConvGeometry g = At(io.batch);
    DeviceMatrix<float> y(io.output.data, g.batch * g.out_pixels(), g.out_c);
    PS_RETURN_IF_ERROR(b.Conv2DForward(g, io.inputs[0], Filter(io.params[0]), y,
                                       Workspace(b, g)));
    PS_RETURN_IF_ERROR(b.BiasAdd(io.params[1], y));
    if (!act_) return absl::OkStatus();
    return b.ActivationForward(*act_, io.output, io.output);
  }

  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    const kernels::ConvGeometry geo = At(io.batch);
    if (act_) {
      PS_RETURN_IF_ERROR(
          b.ActivationBackward(*act_, io.output, g.doutput, g.doutput));
    }
    DeviceMatrix<const float> dy(g.doutput.data, geo.batch * geo.out_pixels(),
                                 geo.out_c);
    PS_RETURN_IF_ERROR(b.Conv2DBackwardFilter(
        geo, io.inputs[0], dy,
        DeviceMatrix<float>(g.dparams[0].data, geo.patch_size(), geo.out_c),
        Workspace(b, geo)));
    PS_RETURN_IF_ERROR(b.BiasGrad(dy, g.dparams[1]));
    if (g.dinputs[0].data == nullptr) return absl::OkStatus();
    return b.Conv2DBackwardData(geo, dy, Filter(io.params[0]), g.dinputs[0],
                                Workspace(b, geo));
  }

 private:
  kernels::ConvGeometry At(int64_t batch) const {
    kernels::ConvGeometry g = geometry_;
    g.batch = batch;
    return g;
  }
  DeviceMatrix<const float> Filter(DeviceSpan<const float> w) const {
    return DeviceMatrix<const float>(w.data, geometry_.patch_size(),
                                     geometry_.out_c);
  }
  DeviceSpan<float> Workspace(Backend& b, const kernels::ConvGeometry& g) {
    const int64_t size = b.ConvWorkspaceSize(g);
    if (size == 0) return DeviceSpan<float>();
    return workspace_.Span<float>(size);
  }

  const kernels::ConvGeometry geometry_;
  const std::optional<kernels::Activation> act_;
  DeviceBuffer workspace_;
};

class Pool2DLayer final : public Layer {
 public:
  Pool2DLayer(kernels::PoolGeometry g, bool max) : geometry_(g), max_(max) {}

  absl::Status Reserve(Backend& b, int64_t batch) override {
    if (!max_) return absl::OkStatus();
    return Grow<int32_t>(b, argmax_, At(batch).out_size());
  }
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    const kernels::PoolGeometry g = At(io.batch);
    if (!max_) return b.AvgPool2DForward(g, io.inputs[0], io.output);
    return b.MaxPool2DForward(g, io.inputs[0], io.output,
                              argmax_.Span<int32_t>(g.out_size()));
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    if (g.dinputs[0].data == nullptr) return absl::OkStatus();
    const kernels::PoolGeometry geo = At(io.batch);
    if (!max_) return b.AvgPool2DBackward(geo, g.doutput, g.dinputs[0]);
    return b.MaxPool2DBackward(geo, argmax_.Span<int32_t>(geo.out_size()),
                               g.doutput, g.dinputs[0]);
  }

 private:
  kernels::PoolGeometry At(int64_t batch) const {
    kernels::PoolGeometry g = geometry_;
    g.batch = batch;
    return g;
  }
  const kernels::PoolGeometry geometry_;
  const bool max_;
  DeviceBuffer argmax_;
};

// Flatten keeps the values and their order: a copy.
class FlattenLayer final : public Layer {
 public:
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    return Copy(b, io.inputs[0], io.output);
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    (void)io;
    if (g.dinputs[0].data == nullptr) return absl::OkStatus();
    return Copy(b, g.doutput, g.dinputs[0]);
  }
};

// Each input is a block of columns of the output.
class ConcatLayer final : public Layer {
 public:
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    const int64_t width = io.output.size / io.batch;
    int64_t col = 0;
    for (const DeviceSpan<const float>& in : io.inputs) {
      DeviceMatrix<const float> src = AsMatrix(in, io.batch);
      PS_RETURN_IF_ERROR(
          b.CopyMatrix(src, DeviceMatrix<float>(io.output.data + col, io.batch,
                                                src.cols, width)));
      col += src.cols;
    }
    return absl::OkStatus();
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    const int64_t width = io.output.size / io.batch;
    int64_t col = 0;
    for (size_t k = 0; k < io.inputs.size(); ++k) {
      const int64_t cols = io.inputs[k].size / io.batch;
      if (g.dinputs[k].data != nullptr) {
        PS_RETURN_IF_ERROR(
            b.CopyMatrix(DeviceMatrix<const float>(g.doutput.data + col,
                                                   io.batch, cols, width),
                         AsMatrix(g.dinputs[k], io.batch)));
      }
      col += cols;
    }
    return absl::OkStatus();
  }
};

class AddLayer final : public Layer {
 public:
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    PS_RETURN_IF_ERROR(Copy(b, io.inputs[0], io.output));
    for (size_t k = 1; k < io.inputs.size(); ++k) {
      PS_RETURN_IF_ERROR(b.Axpy(1.0f, io.inputs[k], io.output));
    }
    return absl::OkStatus();
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    (void)io;
    for (const DeviceSpan<float>& d : g.dinputs) {
      if (d.data != nullptr) PS_RETURN_IF_ERROR(Copy(b, g.doutput, d));
    }
    return absl::OkStatus();
  }
};

// The interactions read their inputs as vectors of dim `dim` side by side;
// they gather them into one [batch, fields * dim] block first (a copy per
// input, as Concat does) and scatter the gradient back.
class PackedVectors {
 public:
  absl::Status Reserve(Backend& b, int64_t batch, int64_t width) {
    PS_RETURN_IF_ERROR(Grow<float>(b, packed_, batch * width));
    return Grow<float>(b, dpacked_, batch * width);
  }
  absl::StatusOr<DeviceMatrix<const float>> Pack(Backend& b, const LayerIo& io,
                                                 int64_t width) {
    DeviceMatrix<float> v = packed_.Matrix<float>(io.batch, width);
    if (io.inputs.size() == 1) {
      return DeviceMatrix<const float>(io.inputs[0].data, io.batch, width);
    }
    int64_t col = 0;
    for (const DeviceSpan<const float>& in : io.inputs) {
      DeviceMatrix<const float> src = AsMatrix(in, io.batch);
      PS_RETURN_IF_ERROR(b.CopyMatrix(
          src, DeviceMatrix<float>(v.data + col, io.batch, src.cols, width)));
      col += src.cols;
    }
    return DeviceMatrix<const float>(v);
  }
  DeviceMatrix<float> Gradient(int64_t batch, int64_t width) {
    return dpacked_.Matrix<float>(batch, width);
  }
  absl::Status Unpack(Backend& b, const LayerIo& io, const LayerGrads& g,
                      DeviceMatrix<const float> dv) {
    int64_t col = 0;
    for (size_t k = 0; k < io.inputs.size(); ++k) {
      const int64_t cols = io.inputs[k].size / io.batch;
      if (g.dinputs[k].data != nullptr) {
        PS_RETURN_IF_ERROR(b.CopyMatrix(
            DeviceMatrix<const float>(dv.data + col, io.batch, cols, dv.cols),
            AsMatrix(g.dinputs[k], io.batch)));
      }
      col += cols;
    }
    return absl::OkStatus();
  }

 private:
  DeviceBuffer packed_;
  DeviceBuffer dpacked_;
};

// DLRM: the strict lower triangle of Z Z^T per example, Z [fields, dim].
class DotInteractionLayer final : public Layer {
 public:
  DotInteractionLayer(int64_t fields, int64_t dim)
      : fields_(fields), dim_(dim) {}
  absl::Status Reserve(Backend& b, int64_t batch) override {
    PS_RETURN_IF_ERROR(vectors_.Reserve(b, batch, fields_ * dim_));
    PS_RETURN_IF_ERROR(Grow<float>(b, gram_, batch * fields_ * fields_));
    return absl::OkStatus();
  }
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    PS_ASSIGN_OR_RETURN(DeviceMatrix<const float> v,
                        vectors_.Pack(b, io, fields_ * dim_));
    packed_ = v;
    DeviceMatrixBatch<const float> z(v.data, io.batch, fields_, dim_);
    DeviceMatrixBatch<float> gram(gram_.Span<float>().data, io.batch, fields_,
                                  fields_);
    PS_RETURN_IF_ERROR(
        b.BatchedGemm(Transpose::kNo, Transpose::kYes, 1.0f, z, z, 0.0f, gram));
    return b.GatherLowerTriangle(gram, AsMatrix(io.output, io.batch));
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    DeviceMatrixBatch<float> dgram(gram_.Span<float>().data, io.batch, fields_,
                                   fields_);
    PS_RETURN_IF_ERROR(b.ScatterLowerTriangle(
        AsMatrix<const float>(g.doutput, io.batch), dgram));
    DeviceMatrix<float> dv = vectors_.Gradient(io.batch, fields_ * dim_);
    PS_RETURN_IF_ERROR(b.BatchedGemm(
        Transpose::kNo, Transpose::kNo, 1.0f,
        DeviceMatrixBatch<const float>(dgram),
        DeviceMatrixBatch<const float>(packed_.data, io.batch, fields_, dim_),
        0.0f, DeviceMatrixBatch<float>(dv.data, io.batch, fields_, dim_)));
    return vectors_.Unpack(b, io, g, dv);
  }

 private:
  const int64_t fields_;
  const int64_t dim_;
  PackedVectors vectors_;
  DeviceBuffer gram_;
  DeviceMatrix<const float> packed_;  // the last Forward's Z
};

class FmInteractionLayer final : public Layer {
 public:
  FmInteractionLayer(int64_t fields, int64_t dim)
      : fields_(fields), dim_(dim) {}
  absl::Status Reserve(Backend& b, int64_t batch) override {
    return vectors_.Reserve(b, batch, fields_ * dim_);
  }
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    PS_ASSIGN_OR_RETURN(packed_, vectors_.Pack(b, io, fields_ * dim_));
    return b.FmInteraction(fields_, packed_, io.output);
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    DeviceMatrix<float> dv = vectors_.Gradient(io.batch, fields_ * dim_);
    PS_RETURN_IF_ERROR(
        b.FmInteractionBackward(fields_, packed_, g.doutput, dv));
    return vectors_.Unpack(b, io, g, dv);
  }

 private:
  const int64_t fields_;
  const int64_t dim_;
  PackedVectors vectors_;
  DeviceMatrix<const float> packed_;
};

// <u, v> + the [1] inputs after them + a global bias (params {bias [1]}
// unless no_bias).
class DotLayer final : public Layer {
 public:
  explicit DotLayer(bool bias) : bias_(bias) {}
  absl::Status Forward(Backend& b, const LayerIo& io) override {
    PS_RETURN_IF_ERROR(b.RowwiseDot(AsMatrix(io.inputs[0], io.batch),
                                    AsMatrix(io.inputs[1], io.batch),
                                    io.output));
    for (size_t k = 2; k < io.inputs.size(); ++k) {
      PS_RETURN_IF_ERROR(b.Axpy(1.0f, io.inputs[k], io.output));
    }
    if (!bias_) return absl::OkStatus();
    return b.BiasAdd(io.params[0], AsMatrix(io.output, io.batch));
  }
  absl::Status Backward(Backend& b, const LayerIo& io,
                        const LayerGrads& g) override {
    if (g.dinputs[0].data != nullptr || g.dinputs[1].data != nullptr) {
      // RowwiseDotBackward writes both; a model input gets scratch.
      PS_RETURN_IF_ERROR(Grow<float>(b, scratch_, 2 * io.inputs[0].size));
      DeviceSpan<float> s = scratch_.Span<float>(2 * io.inputs[0].size);
      auto or_scratch = [&](int k) {
        return g.dinputs[k].data != nullptr
                   ? g.dinputs[k]
                   : DeviceSpan<float>(s.data + k * io.inputs[0].size,
                                       io.inputs[0].size);
      };
      PS_RETURN_IF_ERROR(b.RowwiseDotBackward(
          AsMatrix(io.inputs[0], io.batch), AsMatrix(io.inputs[1], io.batch),
          g.doutput, AsMatrix(or_scratch(0), io.batch),
          AsMatrix(or_scratch(1), io.batch)));
    }
    for (size_t k = 2; k < io.inputs.size(); ++k) {
      if (g.dinputs[k].data != nullptr) {
        PS_RETURN_IF_ERROR(Copy(b, g.doutput, g.dinputs[k]));
      }
    }
    if (!bias_) return absl::OkStatus();
    return b.BiasGrad(AsMatrix<const float>(g.doutput, io.batch), g.dparams[0]);
  }

 private:
  const bool bias_;
  DeviceBuffer scratch_;  // for a model input's unwanted gradient
};

kernels::PoolGeometry PoolOf(const std::vector<int64_t>& in,
                             const Pool2DLayerSpec& p) {
  kernels::PoolGeometry g;
  g.in_h = in[0];
  g.in_w = in[1];
  g.channels = in[2];
  g.window_h = g.window_w = p.window() == 0 ? 2 : p.window();
  g.stride_h = g.stride_w = p.stride() == 0 ? g.window_h : p.stride();
  g.pad_h = g.pad_w = p.padding();
  return g;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(const ModelGraph& graph,
                                                 int index) {
  const GraphLayer& layer = graph.layers[index];
  const LayerSpec& spec = layer.spec;
  const GraphNode& in0 = graph.nodes[layer.inputs[0]];
  switch (spec.kind_case()) {
    case LayerSpec::kDense:
      return std::make_unique<DenseLayer>(ToKernels(spec.dense().activation()));
    case LayerSpec::kActivation:
      return std::make_unique<ActivationLayer>(
          ToKernels(spec.activation().function())
              .value_or(kernels::Activation::kRelu));
    case LayerSpec::kConv2D: {
      const Conv2DLayerSpec& c = spec.conv2d();
      kernels::ConvGeometry g;
      g.in_h = in0.shape[0];
      g.in_w = in0.shape[1];
      g.in_c = in0.shape[2];
      g.out_c = c.filters();
      g.kernel_h = g.kernel_w = c.kernel_size();
      g.stride_h = g.stride_w = c.stride() == 0 ? 1 : c.stride();
      g.pad_h = g.pad_w = c.padding();
      return std::make_unique<Conv2DLayer>(g, ToKernels(c.activation()));
    }
    case LayerSpec::kMaxPool2D:
      return std::make_unique<Pool2DLayer>(PoolOf(in0.shape, spec.max_pool2d()),
                                           true);
    case LayerSpec::kAvgPool2D:
      return std::make_unique<Pool2DLayer>(PoolOf(in0.shape, spec.avg_pool2d()),
                                           false);
    case LayerSpec::kFlatten:
      return std::make_unique<FlattenLayer>();
    case LayerSpec::kConcat:
      return std::make_unique<ConcatLayer>();
    case LayerSpec::kAdd:
      return std::make_unique<AddLayer>();
    case LayerSpec::kDotInteraction:
    case LayerSpec::kFmInteraction: {
      int64_t total = 0;
      for (int node : layer.inputs) total += graph.nodes[node].width();
      const int64_t dim = in0.width();
      const int64_t fields = total / dim;
      if (spec.has_dot_interaction()) {
        return std::make_unique<DotInteractionLayer>(fields, dim);
      }
      return std::make_unique<FmInteractionLayer>(fields, dim);
    }
    case LayerSpec::kDot:
      return std::make_unique<DotLayer>(!spec.dot().no_bias());
    default:
      break;
  }
  return absl::UnimplementedError(absl::StrCat(
      "layer '", spec.name(), "': made by MakeEmbeddingBagLayer, not here"));
}

}  // namespace ps::worker::model
