// The suite, part 4: the layer ops on a backend and on the CPU backend with
// the same inputs, at sizes with several blocks per grid. Where the kernels
// add in the CPU loops' order and do nothing else (im2col, col2im, pooling)
// the results are bit-equal; elsewhere within fp32 tolerance.

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend_test_suite.h"
#include "kernels/backend_test_util.h"
#include "kernels/cpu_backend.h"

namespace ps::kernels {
namespace {}  // namespace

// The CPU backend's own test has nothing to compare it with.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerOpsAgreeWithCpuTest);

void LayerOpsAgreeWithCpuTest::SetUp() {
  absl::StatusOr<std::unique_ptr<Backend>> other = GetParam().create();
  if (!other.ok()) {
    if (GetParam().skip_if_unavailable) {
      GTEST_SKIP() << GetParam().name
                   << " backend unavailable: " << other.status();
    }
    FAIL() << other.status();
  }
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend({});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  cpu_ = *std::move(cpu);
  other_ = *std::move(other);
}

namespace {

// Runs `op` on each backend with `inputs` uploaded and an output buffer of
// `out_size` floats; returns both outputs.
template <typename Op>
std::pair<std::vector<float>, std::vector<float>> Run(
    Backend& cpu, Backend& other, const std::vector<std::vector<float>>& inputs,
    int64_t out_size, Op op) {
  std::vector<float> results[2];
  Backend* backends[2] = {&cpu, &other};
  for (int i = 0; i < 2; ++i) {
    std::vector<DeviceBuffer> in;
    for (const std::vector<float>& v : inputs) {
      in.push_back(ToDevice(*backends[i], v));
    }
    DeviceBuffer out = Zeros<float>(*backends[i], out_size);
    const absl::Status s = op(*backends[i], in, out);
    EXPECT_TRUE(s.ok()) << backends[i]->Name() << ": " << s;
    results[i] = ToHost<float>(*backends[i], out, out_size);
  }
  return {results[0], results[1]};
}

void ExpectClose(const std::pair<std::vector<float>, std::vector<float>>& r,
                 Tolerance tol, const std::string& what) {
  ExpectAllClose(r.second, ToDouble(r.first), tol, what);
}

// Bit-equal where the kernels add in the CPU loops' order and do nothing
// else (im2col, col2im, pooling).
void ExpectEqual(const std::pair<std::vector<float>, std::vector<float>>& r,
                 const std::string& what) {
  EXPECT_EQ(r.first, r.second) << what;
}

}  // namespace

TEST_P(LayerOpsAgreeWithCpuTest, ConvolutionAndPooling) {
  const auto Run = [this](const std::vector<std::vector<float>>& inputs,
                          int64_t out_size, auto op) {
    return ::ps::kernels::Run(*cpu_, *other_, inputs, out_size, op);
  };
  const ConvGeometry g{.batch = 3,
                       .in_h = 12,
                       .in_w = 12,
                       .in_c = 4,
                       .out_c = 8,
                       .kernel_h = 5,
                       .kernel_w = 5,
                       .pad_h = 2,
                       .pad_w = 2};
  const int64_t rows = g.batch * g.out_pixels();
  const std::vector<float> x = RandomVector(g.batch * g.image_size(), 1);
  const std::vector<float> w = RandomVector(g.patch_size() * g.out_c, 2);
  const std::vector<float> dy = RandomVector(rows * g.out_c, 3);
  const auto patches = Run(
      {x}, rows * g.patch_size(), [&](Backend& b, auto& in, DeviceBuffer& out) {
        return b.Im2Col(g, in[0].template Span<float>(x.size()),
                        out.Matrix<float>(rows, g.patch_size()));
      });
  ExpectEqual(patches, "im2col");
  const auto images = Run(
      {patches.first}, x.size(), [&](Backend& b, auto& in, DeviceBuffer& out) {
        return b.Col2Im(g, in[0].template Matrix<float>(rows, g.patch_size()),
                        out.Span<float>(x.size()));
      });
  ExpectEqual(images, "col2im");
  ExpectClose(Run({x, w}, rows * g.out_c,
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    DeviceBuffer ws = *b.AllocateArray<float>(
                        Backend::ConvWorkspacePerImage(g));
                    return b.Conv2DForward(
                        g, in[0].template Span<float>(x.size()),
                        in[1].template Matrix<float>(g.patch_size(), g.out_c),
                        out.Matrix<float>(rows, g.out_c),
                        ws.Span<float>(Backend::ConvWorkspacePerImage(g)));
                  }),
              kF32Accumulated, "conv forward");
  ExpectClose(Run({dy, w}, x.size(),
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    DeviceBuffer ws =
                        *b.AllocateArray<float>(b.ConvWorkspaceSize(g));
                    return b.Conv2DBackwardData(
                        g, in[0].template Matrix<float>(rows, g.out_c),
                        in[1].template Matrix<float>(g.patch_size(), g.out_c),
                        out.Span<float>(x.size()),
                        ws.Span<float>(b.ConvWorkspaceSize(g)));
                  }),
              kF32Accumulated, "conv backward data");
  ExpectClose(Run({x, dy}, w.size(),
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    DeviceBuffer ws =
                        *b.AllocateArray<float>(b.ConvWorkspaceSize(g));
                    return b.Conv2DBackwardFilter(
                        g, in[0].template Span<float>(x.size()),
                        in[1].template Matrix<float>(rows, g.out_c),
                        out.Matrix<float>(g.patch_size(), g.out_c),
                        ws.Span<float>(b.ConvWorkspaceSize(g)));
                  }),
              kF32Accumulated, "conv backward filter");

  const PoolGeometry p{.batch = 3,
                       .in_h = 12,
                       .in_w = 12,
                       .channels = 8,
                       .window_h = 3,
                       .window_w = 3,
                       .stride_h = 2,
                       .stride_w = 2,
                       .pad_h = 1,
                       .pad_w = 1};
  const std::vector<float> px = RandomVector(p.batch * p.image_size(), 4);
  const std::vector<float> pdy = RandomVector(p.out_size(), 5);
  // Max: forward, then backward through each backend's own argmax.
  const auto max_grad =
      Run({px, pdy}, px.size(), [&](Backend& b, auto& in, DeviceBuffer& out) {
        DeviceBuffer y = *b.AllocateArray<float>(p.out_size());
        DeviceBuffer argmax = *b.AllocateArray<int32_t>(p.out_size());
        absl::Status s = b.MaxPool2DForward(
            p, in[0].template Span<float>(px.size()),
            y.Span<float>(p.out_size()), argmax.Span<int32_t>(p.out_size()));
        if (!s.ok()) return s;
        return b.MaxPool2DBackward(p, argmax.Span<int32_t>(p.out_size()),
                                   in[1].template Span<float>(p.out_size()),
                                   out.Span<float>(px.size()));
      });
  ExpectEqual(max_grad, "max pool");
  const auto avg =
      Run({px}, p.out_size(), [&](Backend& b, auto& in, DeviceBuffer& out) {
        return b.AvgPool2DForward(p, in[0].template Span<float>(px.size()),
                                  out.Span<float>(p.out_size()));
      });
  ExpectEqual(avg, "avg pool");
  const auto avg_grad =
      Run({pdy}, px.size(), [&](Backend& b, auto& in, DeviceBuffer& out) {
        return b.AvgPool2DBackward(p, in[0].template Span<float>(p.out_size()),
                                   out.Span<float>(px.size()));
      });
  ExpectEqual(avg_grad, "avg pool backward");
}

TEST_P(LayerOpsAgreeWithCpuTest, EmbeddingBagsHeadsAndInteractions) {
  const auto Run = [this](const std::vector<std::vector<float>>& inputs,
                          int64_t out_size, auto op) {
    return ::ps::kernels::Run(*cpu_, *other_, inputs, out_size, op);
  };
  // 64 examples x 26 fields of dim 16 over 300 unique rows, ids skewed to
  // the low rows so that rows repeat, as Zipf keys do.
  const int64_t batch = 64, fields = 26, dim = 16, num_rows = 300;
  std::mt19937 rng(6);
  std::vector<int32_t> indices(batch * fields);
  for (int32_t& id : indices) {
    id = static_cast<int32_t>((rng() % num_rows) * (rng() % num_rows) /
                              num_rows);
  }
  std::vector<int32_t> offsets(batch * fields + 1);
  for (size_t i = 0; i < offsets.size(); ++i)
    offsets[i] = static_cast<int32_t>(i);
  const std::vector<float> rows = RandomVector(num_rows * dim, 7);
  const std::vector<float> weights = RandomVector(indices.size(), 8);
  const std::vector<float> dout = RandomVector(batch * fields * dim, 9);
  for (EmbeddingBagMode mode :
       {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean}) {
    const auto bags = [&](Backend& b, auto& in, DeviceBuffer& out,
                          bool backward) {
      DeviceBuffer di = ToDevice(b, indices), doff = ToDevice(b, offsets);
      const DeviceSpan<const float> w =
          in[1].template Span<float>(weights.size());
      if (!backward) {
        return b.EmbeddingBagForward(
            mode, in[0].template Matrix<float>(num_rows, dim),
            di.Span<int32_t>(indices.size()),
            doff.Span<int32_t>(offsets.size()), w,
            out.Matrix<float>(batch * fields, dim));
      }
      return b.EmbeddingBagBackward(
          mode, di.Span<int32_t>(indices.size()),
          doff.Span<int32_t>(offsets.size()), w,
          in[2].template Matrix<float>(batch * fields, dim),
          out.Matrix<float>(num_rows, dim));
    };
    ExpectClose(Run({rows, weights, dout}, batch * fields * dim,
                    [&](Backend& b, auto& in, DeviceBuffer& out) {
                      return bags(b, in, out, false);
                    }),
                kF32Elementwise, "embedding forward");
    ExpectClose(Run({rows, weights, dout}, num_rows * dim,
                    [&](Backend& b, auto& in, DeviceBuffer& out) {
                      return bags(b, in, out, true);
                    }),
                kF32Accumulated, "embedding backward");
  }
  const std::vector<float> logits = RandomVector(1000, 10, -6, 6);
  const std::vector<float> labels = RandomVector(1000, 11, 0, 1);
  for (bool bce : {true, false}) {
    ExpectClose(Run({logits, labels}, 1001,
                    [&](Backend& b, auto& in, DeviceBuffer& out) {
                      const DeviceSpan<float> loss(
                          static_cast<float*>(out.data()), 1);
                      const DeviceSpan<float> grad(
                          static_cast<float*>(out.data()) + 1, 1000);
                      const DeviceSpan<const float> x =
                          in[0].template Span<float>(1000);
                      const DeviceSpan<const float> y =
                          in[1].template Span<float>(1000);
                      return bce ? b.SigmoidBinaryCrossEntropy(x, y, loss, grad)
                                 : b.MeanSquaredError(x, y, loss, grad);
                    }),
                kF32Elementwise, bce ? "bce" : "mse");
  }
  const std::vector<float> v = RandomVector(batch * fields * dim, 12);
  const std::vector<float> r = RandomVector(batch, 13);
  ExpectClose(Run({v}, batch,
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    return b.FmInteraction(
                        fields,
                        in[0].template Matrix<float>(batch, fields * dim),
                        out.Span<float>(batch));
                  }),
              kF32Accumulated, "fm");
  ExpectClose(Run({v, r}, v.size(),
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    return b.FmInteractionBackward(
                        fields,
                        in[0].template Matrix<float>(batch, fields * dim),
                        in[1].template Span<float>(batch),
                        out.Matrix<float>(batch, fields * dim));
                  }),
              kF32Accumulated, "fm backward");
  const int64_t pairs = fields * (fields - 1) / 2;
  ExpectClose(Run({v}, batch * pairs,
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    DeviceBuffer gram =
                        *b.AllocateArray<float>(batch * fields * fields);
                    const auto z =
                        in[0].template Batch<float>(batch, fields, dim);
                    absl::Status s = b.BatchedGemm(
                        Transpose::kNo, Transpose::kYes, 1.0f, z, z, 0.0f,
                        gram.Batch<float>(batch, fields, fields));
                    if (!s.ok()) return s;
                    return b.GatherLowerTriangle(
                        gram.Batch<float>(batch, fields, fields),
                        out.Matrix<float>(batch, pairs));
                  }),
              kF32Accumulated, "dot interaction");
  ExpectClose(Run({v, RandomVector(batch * dim, 14)}, batch,
                  [&](Backend& b, auto& in, DeviceBuffer& out) {
                    return b.RowwiseDot(
                        in[0].template Matrix<float>(batch, dim),
                        in[1].template Matrix<float>(batch, dim),
                        out.Span<float>(batch));
                  }),
              kF32Accumulated, "rowwise dot");
}

}  // namespace ps::kernels
