// The op suite, part 2: im2col/col2im, convolutions and pooling against
// double-precision references (direct convolution, window loops) and their
// gradients against central finite differences. Registered on the same
// BackendOpsTest fixture, so every backend that instantiates the suite runs
// these too.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend_test_suite.h"
#include "kernels/backend_test_util.h"

namespace ps::kernels {
namespace {

std::string Describe(const ConvGeometry& g) {
  return absl::StrCat("conv n", g.batch, " ", g.in_h, "x", g.in_w, "x", g.in_c,
                      "->", g.out_c, " k", g.kernel_h, "x", g.kernel_w, " s",
                      g.stride_h, "x", g.stride_w, " p", g.pad_h, "x", g.pad_w);
}

std::string Describe(const PoolGeometry& g) {
  return absl::StrCat("pool n", g.batch, " ", g.in_h, "x", g.in_w, "x",
                      g.channels, " w", g.window_h, "x", g.window_w, " s",
                      g.stride_h, "x", g.stride_w, " p", g.pad_h, "x", g.pad_w);
}

// Strides, padding (also padding that leaves whole patches in the padding),
// non-square kernels, one channel, and the 1x1 identity path.
const ConvGeometry kConvCases[] = {
    {.batch = 3,
     .in_h = 5,
     .in_w = 6,
     .in_c = 2,
     .out_c = 4,
     .kernel_h = 3,
     .kernel_w = 3,
     .pad_h = 1,
     .pad_w = 1},
    {.batch = 2,
     .in_h = 7,
     .in_w = 7,
     .in_c = 3,
     .out_c = 2,
     .kernel_h = 5,
     .kernel_w = 5,
     .stride_h = 2,
     .stride_w = 2,
     .pad_h = 2,
     .pad_w = 2},
    {.batch = 2,
     .in_h = 6,
     .in_w = 5,
     .in_c = 1,
     .out_c = 3,
     .kernel_h = 2,
     .kernel_w = 3,
     .stride_h = 2,
     .stride_w = 1,
     .pad_h = 0,
     .pad_w = 1},
    {.batch = 2,
     .in_h = 3,
     .in_w = 3,
     .in_c = 2,
     .out_c = 2,
     .kernel_h = 3,
     .kernel_w = 3,
     .stride_h = 2,
     .stride_w = 2,
     .pad_h = 3,
     .pad_w = 3},
    {.batch = 4, .in_h = 4, .in_w = 3, .in_c = 3, .out_c = 5},
};

// y [batch * out_pixels, out_c] of a direct convolution, in double.
std::vector<double> ConvReference(const ConvGeometry& g,
                                  const std::vector<double>& x,
                                  const std::vector<double>& w) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  std::vector<double> y(static_cast<size_t>(g.batch * oh_n * ow_n * g.out_c));
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        for (int64_t o = 0; o < g.out_c; ++o) {
          double sum = 0.0;
          for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
            for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const int64_t ih = oh * g.stride_h - g.pad_h + kh;
              const int64_t iw = ow * g.stride_w - g.pad_w + kw;
              if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
              for (int64_t c = 0; c < g.in_c; ++c) {
                sum += x[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + c] *
                       w[((kh * g.kernel_w + kw) * g.in_c + c) * g.out_c + o];
              }
            }
          }
          y[((n * oh_n + oh) * ow_n + ow) * g.out_c + o] = sum;
        }
      }
    }
  }
  return y;
}

TEST_P(BackendOpsTest, Im2ColAndCol2ImMatchReference) {
  Backend& b = *backend_;
  int seed = 1000;
  for (const ConvGeometry& g : kConvCases) {
    const int64_t rows = g.batch * g.out_pixels();
    const int64_t cols = g.patch_size();
    const std::vector<float> x = RandomVector(g.batch * g.image_size(), ++seed);
    std::vector<double> ref(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t ow = r % g.out_w();
      const int64_t oh = (r / g.out_w()) % g.out_h();
      const int64_t n = r / g.out_pixels();
      for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
        for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
          for (int64_t c = 0; c < g.in_c; ++c) {
            const int64_t ih = oh * g.stride_h - g.pad_h + kh;
            const int64_t iw = ow * g.stride_w - g.pad_w + kw;
            const bool inside =
                ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
            ref[r * cols + (kh * g.kernel_w + kw) * g.in_c + c] =
                inside ? x[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + c]
                       : 0.0;
          }
        }
      }
    }
    DeviceBuffer dx = ToDevice(b, x);
    DeviceBuffer dp = ToDevice(b, RandomVector(rows * cols, 5));  // overwritten
    ASSERT_OK(
        b.Im2Col(g, dx.Span<float>(x.size()), dp.Matrix<float>(rows, cols)));
    ExpectAllClose(ToHost<float>(b, dp, rows * cols), ref, 0, 0,
                   "im2col " + Describe(g));

    // col2im is the adjoint: <col2im(P), x> = <P, im2col(x)> for all P, x;
    // elementwise, image element i sums the entries of P that read i.
    const std::vector<float> p = RandomVector(rows * cols, ++seed);
    std::vector<double> ref_images(x.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t ow = r % g.out_w();
      const int64_t oh = (r / g.out_w()) % g.out_h();
      const int64_t n = r / g.out_pixels();
      for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
        for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
          const int64_t ih = oh * g.stride_h - g.pad_h + kh;
          const int64_t iw = ow * g.stride_w - g.pad_w + kw;
          if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
          for (int64_t c = 0; c < g.in_c; ++c) {
            ref_images[((n * g.in_h + ih) * g.in_w + iw) * g.in_c + c] +=
                p[r * cols + (kh * g.kernel_w + kw) * g.in_c + c];
          }
        }
      }
    }
    DeviceBuffer dpatches = ToDevice(b, p);
    DeviceBuffer dimages = ToDevice(b, RandomVector(x.size(), 6));
    ASSERT_OK(b.Col2Im(g, dpatches.Matrix<float>(rows, cols),
                       dimages.Span<float>(x.size())));
    ExpectAllClose(ToHost<float>(b, dimages, x.size()), ref_images,
                   kF32Elementwise, "col2im " + Describe(g));
  }
}

TEST_P(BackendOpsTest, Conv2DMatchesDirectConvolutionInEveryBlocking) {
  Backend& b = *backend_;
  int seed = 1100;
  for (const ConvGeometry& g : kConvCases) {
    const std::vector<float> x = RandomVector(g.batch * g.image_size(), ++seed);
    const std::vector<float> w = RandomVector(g.patch_size() * g.out_c, ++seed);
    const std::vector<float> r =
        RandomVector(g.batch * g.out_pixels() * g.out_c, ++seed);
    const std::vector<double> ref_y =
        ConvReference(g, ToDouble(x), ToDouble(w));
    // Backward references: dx_i = <R, d y / d x_i>, dw likewise; y is
    // linear in each, so the adjoint through the reference is exact.
    std::vector<double> ref_dx(x.size(), 0.0), ref_dw(w.size(), 0.0);
    {
      std::vector<double> xd = ToDouble(x), wd = ToDouble(w);
      const std::vector<double> rd = ToDouble(r);
      for (size_t i = 0; i < xd.size(); ++i) {
        std::vector<double> e(xd.size(), 0.0);
        e[i] = 1.0;
        ref_dx[i] = Dot(ConvReference(g, e, wd), rd);
      }
      for (size_t i = 0; i < wd.size(); ++i) {
        std::vector<double> e(wd.size(), 0.0);
        e[i] = 1.0;
        ref_dw[i] = Dot(ConvReference(g, xd, e), rd);
      }
    }
    const int64_t rows = g.batch * g.out_pixels();
    DeviceBuffer dx = ToDevice(b, x), dw = ToDevice(b, w), dr = ToDevice(b, r);
    // Blocks of 1 and 2 images and the whole batch; the identity path needs
    // no workspace at all.
    const int64_t per_image = Backend::ConvWorkspacePerImage(g);
    EXPECT_EQ(per_image == 0, g.im2col_is_identity()) << Describe(g);
    for (int64_t images : {int64_t{1}, int64_t{2}, g.batch}) {
      const std::string what =
          absl::StrCat(Describe(g), " images/block ", images);
      const int64_t ws_size = per_image * images;
      DeviceBuffer ws = Zeros<float>(b, ws_size + 1);
      DeviceSpan<float> workspace = ws.Span<float>(ws_size);
      DeviceBuffer y = ToDevice(b, RandomVector(rows * g.out_c, 7));
      ASSERT_OK(b.Conv2DForward(g, dx.Span<float>(x.size()),
                                dw.Matrix<float>(g.patch_size(), g.out_c),
                                y.Matrix<float>(rows, g.out_c), workspace));
      ExpectAllClose(ToHost<float>(b, y, rows * g.out_c), ref_y,
                     kF32Accumulated, "forward " + what);
      DeviceBuffer gx = ToDevice(b, RandomVector(x.size(), 8));
      DeviceBuffer gw = ToDevice(b, RandomVector(w.size(), 9));
      ASSERT_OK(b.Conv2DBackwardData(g, dr.Matrix<float>(rows, g.out_c),
                                     dw.Matrix<float>(g.patch_size(), g.out_c),
                                     gx.Span<float>(x.size()), workspace));
      ASSERT_OK(b.Conv2DBackwardFilter(
          g, dx.Span<float>(x.size()), dr.Matrix<float>(rows, g.out_c),
          gw.Matrix<float>(g.patch_size(), g.out_c), workspace));
      ExpectAllClose(ToHost<float>(b, gx, x.size()), ref_dx, kF32Accumulated,
                     "backward data " + what);
      ExpectAllClose(ToHost<float>(b, gw, w.size()), ref_dw, kF32Accumulated,
                     "backward filter " + what);
    }
  }
}

// A small convolution layer's loss L = sum(relu(conv(x, w) + bias) * R):
// the op-level backward (ActivationBackward, BiasGrad, Conv2DBackward*)
// against central differences of L computed in double.
TEST_P(BackendOpsTest, Conv2DLayerGradientsMatchFiniteDifferences) {
  Backend& b = *backend_;
  const ConvGeometry g = kConvCases[1];
  const int64_t rows = g.batch * g.out_pixels();
  const std::vector<float> x = RandomVector(g.batch * g.image_size(), 1201);
  const std::vector<float> w = RandomVector(g.patch_size() * g.out_c, 1202);
  const std::vector<float> bias = RandomVector(g.out_c, 1203);
  const std::vector<float> r = RandomVector(rows * g.out_c, 1204);
  const auto loss = [&](const std::vector<double>& xd,
                        const std::vector<double>& wd,
                        const std::vector<double>& bd) {
    std::vector<double> y = ConvReference(g, xd, wd);
    double total = 0.0;
    for (size_t i = 0; i < y.size(); ++i) {
      total += std::max(0.0, y[i] + bd[i % g.out_c]) * r[i];
    }
    return total;
  };
  const std::vector<double> xd = ToDouble(x), wd = ToDouble(w),
                            bd = ToDouble(bias);
  const double eps = 1e-4;
  const std::vector<double> fd_x = FiniteDifferences(
      [&](const std::vector<double>& v) { return loss(v, wd, bd); }, xd, eps);
  const std::vector<double> fd_w = FiniteDifferences(
      [&](const std::vector<double>& v) { return loss(xd, v, bd); }, wd, eps);
  const std::vector<double> fd_b = FiniteDifferences(
      [&](const std::vector<double>& v) { return loss(xd, wd, v); }, bd, eps);

  DeviceBuffer dx = ToDevice(b, x), dw = ToDevice(b, w),
               dbias = ToDevice(b, bias);
  DeviceBuffer y = Zeros<float>(b, rows * g.out_c);
  DeviceBuffer ws = Zeros<float>(b, b.ConvWorkspaceSize(g) + 1);
  const DeviceSpan<float> workspace = ws.Span<float>(b.ConvWorkspaceSize(g));
  const DeviceMatrix<float> ym = y.Matrix<float>(rows, g.out_c);
  const DeviceMatrix<float> wm = dw.Matrix<float>(g.patch_size(), g.out_c);
  ASSERT_OK(b.Conv2DForward(g, dx.Span<float>(x.size()), wm, ym, workspace));
  ASSERT_OK(b.BiasAdd(dbias.Span<float>(g.out_c), ym));
  ASSERT_OK(b.ActivationForward(Activation::kRelu, ym.flat(), ym.flat()));
  DeviceBuffer dy = ToDevice(b, r);
  const DeviceMatrix<float> dym = dy.Matrix<float>(rows, g.out_c);
  ASSERT_OK(b.ActivationBackward(Activation::kRelu, ym.flat(), dym.flat(),
                                 dym.flat()));
  DeviceBuffer gx = Zeros<float>(b, x.size()), gw = Zeros<float>(b, w.size()),
               gb = Zeros<float>(b, g.out_c);
  ASSERT_OK(b.BiasGrad(dym, gb.Span<float>(g.out_c)));
  ASSERT_OK(b.Conv2DBackwardFilter(g, dx.Span<float>(x.size()), dym,
                                   gw.Matrix<float>(g.patch_size(), g.out_c),
                                   workspace));
  ASSERT_OK(
      b.Conv2DBackwardData(g, dym, wm, gx.Span<float>(x.size()), workspace));
  ExpectAllClose(ToHost<float>(b, gx, x.size()), fd_x, kF32VsFiniteDifference,
                 "dL/dx");
  ExpectAllClose(ToHost<float>(b, gw, w.size()), fd_w, kF32VsFiniteDifference,
                 "dL/dw");
  ExpectAllClose(ToHost<float>(b, gb, g.out_c), fd_b, kF32VsFiniteDifference,
                 "dL/dbias");
}

// Non-overlapping, overlapping with padding, and non-square windows.
const PoolGeometry kPoolCases[] = {
    {.batch = 2, .in_h = 6, .in_w = 6, .channels = 3},
    {.batch = 2,
     .in_h = 5,
     .in_w = 7,
     .channels = 2,
     .window_h = 3,
     .window_w = 3,
     .stride_h = 1,
     .stride_w = 1,
     .pad_h = 1,
     .pad_w = 1},
    {.batch = 1,
     .in_h = 5,
     .in_w = 5,
     .channels = 2,
     .window_h = 3,
     .window_w = 2,
     .stride_h = 2,
     .stride_w = 1,
     .pad_h = 1,
     .pad_w = 1},
    {.batch = 3,
     .in_h = 7,
     .in_w = 7,
     .channels = 1,
     .window_h = 2,
     .window_w = 2,
     .stride_h = 2,
     .stride_w = 2},
};

// Max (first maximum in (h, w) order, NaN wins) or mean over each window's
// inputs, and the index of the taken input; in double.
struct PoolReference {
  std::vector<double> y;
  std::vector<int32_t> argmax;
};
PoolReference PoolForwardReference(const PoolGeometry& g,
                                   const std::vector<double>& x, bool max) {
  PoolReference ref;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t oh = 0; oh < g.out_h(); ++oh) {
      for (int64_t ow = 0; ow < g.out_w(); ++ow) {
        for (int64_t c = 0; c < g.channels; ++c) {
          double best = std::numeric_limits<double>::quiet_NaN();
          int32_t best_index = -1;
          double sum = 0.0;
          int count = 0;
          for (int64_t h = oh * g.stride_h - g.pad_h;
               h < oh * g.stride_h - g.pad_h + g.window_h; ++h) {
            for (int64_t w = ow * g.stride_w - g.pad_w;
                 w < ow * g.stride_w - g.pad_w + g.window_w; ++w) {
              if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) continue;
              const int32_t index =
                  static_cast<int32_t>((h * g.in_w + w) * g.channels + c);
              const double v = x[n * g.image_size() + index];
              sum += v;
              ++count;
              const bool take = best_index < 0 ||
                                (std::isnan(v) && !std::isnan(best)) ||
                                v > best;
              if (take) {
                best = v;
                best_index = index;
              }
            }
          }
          ref.y.push_back(max ? best : sum / count);
          ref.argmax.push_back(best_index);
        }
      }
    }
  }
  return ref;
}

TEST_P(BackendOpsTest, PoolingMatchesReference) {
  Backend& b = *backend_;
  int seed = 1300;
  for (const PoolGeometry& g : kPoolCases) {
    std::vector<float> x = RandomVector(g.batch * g.image_size(), ++seed);
    // Ties in the first window (the first in (h, w) order wins) and a NaN in
    // the last input (it propagates).
    x[g.channels] = x[0] = 2.0f;
    x.back() = std::nanf("");
    const int64_t out = g.out_size();
    DeviceBuffer dx = ToDevice(b, x);
    DeviceBuffer y = Zeros<float>(b, out);
    DeviceBuffer argmax = Zeros<int32_t>(b, out);
    ASSERT_OK(b.MaxPool2DForward(g, dx.Span<float>(x.size()),
                                 y.Span<float>(out),
                                 argmax.Span<int32_t>(out)));
    const PoolReference max_ref = PoolForwardReference(g, ToDouble(x), true);
    const std::vector<float> got = ToHost<float>(b, y, out);
    for (int64_t i = 0; i < out; ++i) {
      if (std::isnan(max_ref.y[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << Describe(g) << " output " << i;
      } else {
        EXPECT_EQ(got[i], max_ref.y[i]) << Describe(g) << " output " << i;
      }
    }
    EXPECT_EQ(ToHost<int32_t>(b, argmax, out), max_ref.argmax) << Describe(g);

    x.back() = 0.5f;
    DeviceBuffer dx2 = ToDevice(b, x);
    ASSERT_OK(
        b.AvgPool2DForward(g, dx2.Span<float>(x.size()), y.Span<float>(out)));
    ExpectAllClose(ToHost<float>(b, y, out),
                   PoolForwardReference(g, ToDouble(x), false).y,
                   kF32Elementwise, "avg " + Describe(g));
  }
}

TEST_P(BackendOpsTest, PoolingGradientsMatchFiniteDifferences) {
  Backend& b = *backend_;
  int seed = 1400;
  for (const PoolGeometry& g : kPoolCases) {
    for (bool max : {true, false}) {
      const std::vector<float> x =
          RandomVector(g.batch * g.image_size(), ++seed);
      const int64_t out = g.out_size();
      const std::vector<float> r = RandomVector(out, ++seed);
      const std::vector<double> fd = FiniteDifferences(
          [&](const std::vector<double>& v) {
            return Dot(PoolForwardReference(g, v, max).y, ToDouble(r));
          },
          ToDouble(x), 1e-5);
      DeviceBuffer dx = ToDevice(b, x), dr = ToDevice(b, r);
      DeviceBuffer y = Zeros<float>(b, out), argmax = Zeros<int32_t>(b, out);
      DeviceBuffer grad = ToDevice(b, RandomVector(x.size(), 3));
      if (max) {
        ASSERT_OK(b.MaxPool2DForward(g, dx.Span<float>(x.size()),
                                     y.Span<float>(out),
                                     argmax.Span<int32_t>(out)));
        ASSERT_OK(b.MaxPool2DBackward(g, argmax.Span<int32_t>(out),
                                      dr.Span<float>(out),
                                      grad.Span<float>(x.size())));
      } else {
        ASSERT_OK(b.AvgPool2DBackward(g, dr.Span<float>(out),
                                      grad.Span<float>(x.size())));
      }
      ExpectAllClose(ToHost<float>(b, grad, x.size()), fd,
                     kF32VsFiniteDifference,
                     absl::StrCat(max ? "max " : "avg ", Describe(g)));
    }
  }
}

// Indices outside the image (not what MaxPool2DForward writes) give no
// gradient and no write outside dx, with disjoint and overlapping windows.
TEST_P(BackendOpsTest, MaxPoolBackwardIgnoresIndicesOutsideTheImage) {
  Backend& b = *backend_;
  for (const PoolGeometry& g : {kPoolCases[0], kPoolCases[1]}) {
    const int64_t out = g.out_size();
    const int64_t in = g.batch * g.image_size();
    std::vector<int32_t> argmax(out);
    for (int64_t i = 0; i < out; ++i) {
      argmax[i] = i % 2 == 0 ? -1 - static_cast<int32_t>(i)
                             : static_cast<int32_t>(g.image_size() + i);
    }
    DeviceBuffer dargmax = ToDevice(b, argmax);
    DeviceBuffer dy = ToDevice(b, RandomVector(out, 1500));
    // dx sits between two guard regions that must stay untouched.
    DeviceBuffer dx = ToDevice(b, std::vector<float>(in + 2 * out, 9.0f));
    const DeviceSpan<float> inner(static_cast<float*>(dx.data()) + out, in);
    ASSERT_OK(b.MaxPool2DBackward(g, dargmax.Span<int32_t>(out),
                                  dy.Span<float>(out), inner));
    std::vector<double> ref(in + 2 * out, 9.0);
    for (int64_t i = 0; i < in; ++i) ref[out + i] = 0.0;
    ExpectAllClose(ToHost<float>(b, dx, in + 2 * out), ref, 0, 0, Describe(g));
  }
}

}  // namespace
}  // namespace ps::kernels
