// Layer ops at the shapes of the Fashion-MNIST CNN (5x5 convolutions 1->32
// and 32->64 with padding 2, max-pool 2, dense 3136->256->10, batch 128 or
// --batch):
// the convolutions' passes and one CNN training step. Each op is timed next
// to its ceiling on the same backend in the same iteration (the GEMM of the
// same shape on operands already laid out), and the medians are reported.
// Cases of kernels_benchmark (kernels_benchmark.cc has main and the flags).

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/benchmark_util.h"

namespace ps::kernels::bench {
namespace {

#define PS_BENCH_RETURN_IF_ERROR(expr)             \
  do {                                             \
    const absl::Status bench_status_ = (expr);     \
    if (!bench_status_.ok()) return bench_status_; \
  } while (false)
ConvGeometry CnnConv(int64_t layer, int64_t batch) {
  return layer == 1 ? ConvGeometry{.batch = batch,
                                   .in_h = 28,
                                   .in_w = 28,
                                   .in_c = 1,
                                   .out_c = 32,
                                   .kernel_h = 5,
                                   .kernel_w = 5,
                                   .pad_h = 2,
                                   .pad_w = 2}
                    : ConvGeometry{.batch = batch,
                                   .in_h = 14,
                                   .in_w = 14,
                                   .in_c = 32,
                                   .out_c = 64,
                                   .kernel_h = 5,
                                   .kernel_w = 5,
                                   .pad_h = 2,
                                   .pad_w = 2};
}

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// Args: layer (1 or 2), images per im2col block (0: the backend's choice).
// Reports the op's GFLOP/s, the GFLOP/s of its GEMMs alone and the ratio.
void ConvBench(benchmark::State& state, bool cuda, ConvPass pass) {
  const ConvGeometry g = CnnConv(state.range(0), batch_size);
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  const int64_t rows = g.batch * g.out_pixels();
  const int64_t ws_size = state.range(1) == 0
                              ? backend->ConvWorkspaceSize(g)
                              : Backend::ConvWorkspacePerImage(g) *
                                    std::min<int64_t>(state.range(1), g.batch);
  DeviceBuffer x = Upload(*backend, RandomVector(g.batch * g.image_size(), 1));
  DeviceBuffer w = Upload(*backend, RandomVector(g.patch_size() * g.out_c, 2));
  DeviceBuffer y = Upload(*backend, RandomVector(rows * g.out_c, 3));
  DeviceBuffer ws =
      *backend->AllocateArray<float>(std::max<int64_t>(ws_size, 1));
  const DeviceMatrix<float> wm = w.Matrix<float>(g.patch_size(), g.out_c);
  const DeviceMatrix<float> ym = y.Matrix<float>(rows, g.out_c);
  // The ceiling: the op's GEMMs alone, block by block, on one block's patch
  // matrix already laid out (as if im2col/col2im cost nothing and left the
  // patches in cache).
  const int64_t images =
      ws_size == 0 ? g.batch : ws_size / Backend::ConvWorkspacePerImage(g);
  DeviceBuffer patches = Upload(
      *backend, RandomVector(images * g.out_pixels() * g.patch_size(), 4));
  const auto op = [&]() -> absl::Status {
    switch (pass) {
      case ConvPass::kForward:
        return backend->Conv2DForward(g,
                                      x.Span<float>(g.batch * g.image_size()),
                                      wm, ym, ws.Span<float>(ws_size));
      case ConvPass::kBackwardData:
        return backend->Conv2DBackwardData(
            g, ym, wm, x.Span<float>(g.batch * g.image_size()),
            ws.Span<float>(ws_size));
      case ConvPass::kBackwardFilter:
        return backend->Conv2DBackwardFilter(
            g, x.Span<float>(g.batch * g.image_size()), ym, wm,
            ws.Span<float>(ws_size));
    }
    return absl::OkStatus();
  };
  const auto gemm = [&]() -> absl::Status {
    for (int64_t n0 = 0; n0 < g.batch; n0 += images) {
      const int64_t block_rows =
          std::min(images, g.batch - n0) * g.out_pixels();
      const DeviceMatrix<float> pm =
          patches.Matrix<float>(block_rows, g.patch_size());
      const DeviceMatrix<float> yb(ym.data + n0 * g.out_pixels() * g.out_c,
                                   block_rows, g.out_c);
      absl::Status s;
      switch (pass) {
        case ConvPass::kForward:
          s = backend->Gemm(Transpose::kNo, Transpose::kNo, 1.0f, pm, wm, 0.0f,
                            yb);
          break;
        case ConvPass::kBackwardData:
          s = backend->Gemm(Transpose::kNo, Transpose::kYes, 1.0f, yb, wm, 0.0f,
                            pm);
          break;
        case ConvPass::kBackwardFilter:
          s = backend->Gemm(Transpose::kYes, Transpose::kNo, 1.0f, pm, yb,
                            n0 == 0 ? 0.0f : 1.0f, wm);
          break;
      }
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  OpTimes times;
  for (auto _ : state) {
    if (!TimeOpAndCeiling(state, *backend, op, gemm, times)) return;
  }
  const std::vector<double>& op_s = times.op_s;
  const std::vector<double>& gemm_s = times.ceiling_s;
  const double flop = 2.0 * rows * g.out_c * g.patch_size();
  state.counters["op_ms"] = 1e3 * Median(op_s);
  state.counters["GFLOP/s"] = flop / Median(op_s) / 1e9;
  state.counters["gemm_GFLOP/s"] = flop / Median(gemm_s) / 1e9;
  state.counters["of_gemm"] = Median(gemm_s) / Median(op_s);
  state.counters["images/block"] = images;
}

void ConvBlockings(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "images"});
  for (int64_t layer : {1, 2}) {
    for (int64_t images : {0, 1, 2, 4, 8, 16, 32, 128}) {
      b->Args({layer, images});
    }
  }
}

void BM_CpuConv2DForward(benchmark::State& state) {
  ConvBench(state, false, ConvPass::kForward);
}
void BM_CpuConv2DBackwardData(benchmark::State& state) {
  ConvBench(state, false, ConvPass::kBackwardData);
}
void BM_CpuConv2DBackwardFilter(benchmark::State& state) {
  ConvBench(state, false, ConvPass::kBackwardFilter);
}
void BM_CudaConv2DForward(benchmark::State& state) {
  ConvBench(state, true, ConvPass::kForward);
}
void BM_CudaConv2DBackwardData(benchmark::State& state) {
  ConvBench(state, true, ConvPass::kBackwardData);
}
void BM_CudaConv2DBackwardFilter(benchmark::State& state) {
  ConvBench(state, true, ConvPass::kBackwardFilter);
}
BENCHMARK(BM_CpuConv2DForward)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CpuConv2DBackwardData)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CpuConv2DBackwardFilter)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CudaConv2DForward)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CudaConv2DBackwardData)->Apply(ConvBlockings)->UseRealTime();
BENCHMARK(BM_CudaConv2DBackwardFilter)->Apply(ConvBlockings)->UseRealTime();

// One SGD step of the CNN over the op API, as a model layer would issue it:
// conv(5x5, 1->32) relu maxpool conv(5x5, 32->64) relu maxpool dense(3136,
// 256) relu dense(256, 10) softmax cross-entropy, backward, and w -= lr * g.
// Reports the step time and the convolutions' share of it.
class CnnStep {
 public:
  absl::Status Init(Backend* backend) {
    b_ = backend;
    for (int i = 0; i < 8; ++i) {
      params_.push_back(Upload(*b_, RandomVector(kParamSizes[i], 10 + i)));
      grads_.push_back(*b_->AllocateArray<float>(kParamSizes[i]));
      PS_BENCH_RETURN_IF_ERROR(
          b_->Scale(0.05f, params_.back().Span<float>(kParamSizes[i])));
    }
    images_ = Upload(*b_, RandomVector(batch_size * 784, 20));
    std::vector<int32_t> labels(batch_size);
    for (int64_t i = 0; i < batch_size; ++i)
      labels[i] = static_cast<int32_t>(i % 10);
    labels_ = *b_->AllocateArray<int32_t>(batch_size);
    PS_BENCH_RETURN_IF_ERROR(
        b_->CopyToDevice(labels.data(), labels_.data(), batch_size * 4));
    for (int64_t size : {c1_.batch * c1_.out_pixels() * 32,  // conv1 out
                         p1_.out_size(),                     // pool1 out
                         c2_.batch * c2_.out_pixels() * 64,  // conv2 out
                         p2_.out_size(),                     // pool2 out
                         batch_size * 256, batch_size * 10}) {
      acts_.push_back(*b_->AllocateArray<float>(size));
      dacts_.push_back(*b_->AllocateArray<float>(size));
    }
    argmax1_ = *b_->AllocateArray<int32_t>(p1_.out_size());
    argmax2_ = *b_->AllocateArray<int32_t>(p2_.out_size());
    dpool1_ = *b_->AllocateArray<float>(p1_.out_size());
    loss_ = *b_->AllocateArray<float>(1);
    ws_size_ = std::max(b_->ConvWorkspaceSize(c1_), b_->ConvWorkspaceSize(c2_));
    ws_ = *b_->AllocateArray<float>(std::max<int64_t>(ws_size_, 1));
    return absl::OkStatus();
  }

  // One step; adds the time spent in convolution ops to *conv_s.
  absl::Status Run(double* conv_s) {
    const auto timed = [&](const absl::Status& s, double t0) {
      *conv_s += Now(*b_) - t0;
      return s;
    };
    const DeviceSpan<float> ws = ws_.Span<float>(ws_size_);
    double t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DForward(c1_, images_.Span<float>(batch_size * 784),
                                Param(0, 25, 32), Act(0, 32), ws),
              t));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[1].Span<float>(32), Act(0, 32)));
    PS_BENCH_RETURN_IF_ERROR(Relu(0));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DForward(
        p1_, acts_[0].Span<float>(p1_.batch * p1_.image_size()),
        acts_[1].Span<float>(p1_.out_size()),
        argmax1_.Span<int32_t>(p1_.out_size())));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DForward(c2_, acts_[1].Span<float>(p1_.out_size()),
                                Param(2, 800, 64), Act(2, 64), ws),
              t));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[3].Span<float>(64), Act(2, 64)));
    PS_BENCH_RETURN_IF_ERROR(Relu(2));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DForward(
        p2_, acts_[2].Span<float>(p2_.batch * p2_.image_size()),
        acts_[3].Span<float>(p2_.out_size()),
        argmax2_.Span<int32_t>(p2_.out_size())));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                                      Act(3, 3136), Param(4, 3136, 256), 0.0f,
                                      Act(4, 256)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[5].Span<float>(256), Act(4, 256)));
    PS_BENCH_RETURN_IF_ERROR(Relu(4));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                                      Act(4, 256), Param(6, 256, 10), 0.0f,
                                      Act(5, 10)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasAdd(params_[7].Span<float>(10), Act(5, 10)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->SoftmaxCrossEntropy(Act(5, 10), labels_.Span<int32_t>(batch_size),
                                loss_.Span<float>(1), DAct(5, 10)));
    // Backward.
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                                      Act(4, 256), DAct(5, 10), 0.0f,
                                      Grad(6, 256, 10)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(5, 10), grads_[7].Span<float>(10)));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kYes, 1.0f,
                                      DAct(5, 10), Param(6, 256, 10), 0.0f,
                                      DAct(4, 256)));
    PS_BENCH_RETURN_IF_ERROR(ReluBackward(4));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                                      Act(3, 3136), DAct(4, 256), 0.0f,
                                      Grad(4, 3136, 256)));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(4, 256), grads_[5].Span<float>(256)));
    PS_BENCH_RETURN_IF_ERROR(b_->Gemm(Transpose::kNo, Transpose::kYes, 1.0f,
                                      DAct(4, 256), Param(4, 3136, 256), 0.0f,
                                      DAct(3, 3136)));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DBackward(
        p2_, argmax2_.Span<int32_t>(p2_.out_size()),
        dacts_[3].Span<float>(p2_.out_size()),
        dacts_[2].Span<float>(p2_.batch * p2_.image_size())));
    PS_BENCH_RETURN_IF_ERROR(ReluBackward(2));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(2, 64), grads_[3].Span<float>(64)));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(timed(
        b_->Conv2DBackwardFilter(c2_, acts_[1].Span<float>(p1_.out_size()),
                                 DAct(2, 64), Grad(2, 800, 64), ws),
        t));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(
        timed(b_->Conv2DBackwardData(c2_, DAct(2, 64), Param(2, 800, 64),
                                     dpool1_.Span<float>(p1_.out_size()), ws),
              t));
    PS_BENCH_RETURN_IF_ERROR(b_->MaxPool2DBackward(
        p1_, argmax1_.Span<int32_t>(p1_.out_size()),
        dpool1_.Span<float>(p1_.out_size()),
        dacts_[0].Span<float>(p1_.batch * p1_.image_size())));
    PS_BENCH_RETURN_IF_ERROR(ReluBackward(0));
    PS_BENCH_RETURN_IF_ERROR(
        b_->BiasGrad(DAct(0, 32), grads_[1].Span<float>(32)));
    t = Now(*b_);
    PS_BENCH_RETURN_IF_ERROR(timed(
        b_->Conv2DBackwardFilter(c1_, images_.Span<float>(batch_size * 784),
                                 DAct(0, 32), Grad(0, 25, 32), ws),
        t));
    for (int i = 0; i < 8; ++i) {  // SGD
      PS_BENCH_RETURN_IF_ERROR(
          b_->Axpy(-0.01f, grads_[i].Span<float>(kParamSizes[i]),
                   params_[i].Span<float>(kParamSizes[i])));
    }
    return b_->Synchronize();
  }

 private:
  static constexpr int64_t kParamSizes[8] = {25 * 32,    32,  800 * 64, 64,
                                             3136 * 256, 256, 256 * 10, 10};
  DeviceMatrix<float> Param(int i, int64_t rows, int64_t cols) {
    return params_[i].Matrix<float>(rows, cols);
  }
  DeviceMatrix<float> Grad(int i, int64_t rows, int64_t cols) {
    return grads_[i].Matrix<float>(rows, cols);
  }
  // Activation i as a [n, cols] matrix.
  DeviceMatrix<float> Act(int i, int64_t cols) {
    return acts_[i].Matrix<float>(acts_[i].bytes() / 4 / cols, cols);
  }
  DeviceMatrix<float> DAct(int i, int64_t cols) {
    return dacts_[i].Matrix<float>(dacts_[i].bytes() / 4 / cols, cols);
  }
  absl::Status Relu(int i) {
    const DeviceSpan<float> a = acts_[i].Span<float>();
    return b_->ActivationForward(Activation::kRelu, a, a);
  }
  absl::Status ReluBackward(int i) {
    const DeviceSpan<float> d =
        dacts_[i].Span<float>(acts_[i].Span<float>().size);
    return b_->ActivationBackward(Activation::kRelu,
                                  acts_[i].Span<float>(d.size), d, d);
  }

  Backend* b_ = nullptr;
  const ConvGeometry c1_ = CnnConv(1, batch_size);
  const ConvGeometry c2_ = CnnConv(2, batch_size);
  const PoolGeometry p1_{
      .batch = batch_size, .in_h = 28, .in_w = 28, .channels = 32};
  const PoolGeometry p2_{
      .batch = batch_size, .in_h = 14, .in_w = 14, .channels = 64};
  std::vector<DeviceBuffer> params_, grads_, acts_, dacts_;
  DeviceBuffer images_, labels_, argmax1_, argmax2_, dpool1_, loss_, ws_;
  int64_t ws_size_ = 0;
};

void CnnTrainStep(benchmark::State& state, bool cuda) {
  std::unique_ptr<Backend> backend = MakeBackend(state, cuda);
  if (backend == nullptr) return;
  CnnStep step;
  absl::Status s = step.Init(backend.get());
  std::vector<double> step_s, conv_s;
  for (auto _ : state) {
    if (!s.ok()) break;
    double conv = 0.0;
    const double t0 = Now(*backend);
    s = step.Run(&conv);
    step_s.push_back(Now(*backend) - t0);
    conv_s.push_back(conv);
  }
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  state.counters["step_ms_median"] = 1e3 * Median(step_s);
  state.counters["conv_ms_median"] = 1e3 * Median(conv_s);
  state.counters["conv_share"] = Median(conv_s) / Median(step_s);
}

void BM_CpuCnnTrainStep(benchmark::State& state) { CnnTrainStep(state, false); }
void BM_CudaCnnTrainStep(benchmark::State& state) { CnnTrainStep(state, true); }
BENCHMARK(BM_CpuCnnTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaCnnTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ps::kernels::bench
