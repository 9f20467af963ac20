#include "kernels/backend_test_suite.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend_test_util.h"
#include "kernels/cast_math.h"
#include "kernels/random_math.h"

namespace ps::kernels {

void BackendOpsTest::SetUp() {
  absl::StatusOr<std::unique_ptr<Backend>> backend = GetParam().create();
  if (!backend.ok()) {
    if (GetParam().skip_if_unavailable) {
      GTEST_SKIP() << GetParam().name
                   << " backend unavailable: " << backend.status();
    }
    FAIL() << backend.status();
  }
  backend_ = *std::move(backend);
}

std::string BackendFactoryName(
    const testing::TestParamInfo<BackendFactory>& info) {
  std::string name;
  for (char c : info.param.name) name += std::isalnum(c) ? c : '_';
  return name;
}

TEST_P(BackendOpsTest, CopiesRoundTrip) {
  Backend& b = *backend_;
  for (int64_t n : kSizes) {
    const std::vector<float> host = RandomVector(n, 1);
    DeviceBuffer src = ToDevice(b, host);
    DeviceBuffer dst = Zeros<float>(b, n);
    ASSERT_OK(b.CopyOnDevice(src.data(), dst.data(),
                             n * static_cast<int64_t>(sizeof(float))));
    EXPECT_EQ(ToHost<float>(b, dst, n), host) << "n=" << n;
  }
}

TEST_P(BackendOpsTest, GemmMatchesReference) {
  Backend& b = *backend_;
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},      {7, 129, 1},  {129, 7, 1000},
                          {1000, 7, 129}, {1, 1000, 7}, {129, 129, 7},
                          {7, 7, 0}};
  int seed = 10;
  for (const Shape& s : shapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (float beta : {0.0f, 0.5f}) {
          const float alpha = 1.5f;
          const std::vector<float> a = RandomVector(s.m * s.k, ++seed);
          const std::vector<float> bm = RandomVector(s.k * s.n, ++seed);
          std::vector<float> c = RandomVector(s.m * s.n, ++seed);
          // With beta == 0 the old contents must be ignored, NaN included.
          if (beta == 0.0f) c.assign(c.size(), std::nanf(""));
          const bool tra = ta == Transpose::kYes;
          const bool trb = tb == Transpose::kYes;
          // Stored shapes: a is [m,k] or [k,m]; b is [k,n] or [n,k].
          std::vector<double> ref(static_cast<size_t>(s.m * s.n));
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
              double sum = 0.0;
              for (int64_t p = 0; p < s.k; ++p) {
                const double av = tra ? a[p * s.m + i] : a[i * s.k + p];
                const double bv = trb ? bm[j * s.k + p] : bm[p * s.n + j];
                sum += av * bv;
              }
              ref[i * s.n + j] =
                  alpha * sum + (beta == 0.0f ? 0.0 : beta * c[i * s.n + j]);
            }
          }
          DeviceBuffer da = ToDevice(b, a);
          DeviceBuffer db = ToDevice(b, bm);
          DeviceBuffer dc = ToDevice(b, c);
          DeviceMatrix<float> ma =
              tra ? da.Matrix<float>(s.k, s.m) : da.Matrix<float>(s.m, s.k);
          DeviceMatrix<float> mb =
              trb ? db.Matrix<float>(s.n, s.k) : db.Matrix<float>(s.k, s.n);
          if (s.k == 0) {
            ma.data = nullptr;  // empty operands may be null
            mb.data = nullptr;
          }
          ASSERT_OK(
              b.Gemm(ta, tb, alpha, ma, mb, beta, dc.Matrix<float>(s.m, s.n)));
          ExpectAllClose(
              ToHost<float>(b, dc, s.m * s.n), ref, 1e-4, 1e-4,
              absl::StrCat("gemm m=", s.m, " n=", s.n, " k=", s.k, " ta=", tra,
                           " tb=", trb, " beta=", beta));
        }
      }
    }
  }
}

// a and b as column blocks of wider stored matrices (row stride ld > cols),
// as the MLP's first layer uses them in row blocks.
TEST_P(BackendOpsTest, GemmReadsColumnBlocksThroughTheRowStride) {
  Backend& b = *backend_;
  const int64_t m = 9, n = 6, k = 5, ld = 13, col = 4;  // a: cols [4, 9)
  int seed = 70;
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    const bool tra = ta == Transpose::kYes;
    // Stored a: [m, ld] (op(a) = a block) or [k, ld] (transposed).
    const int64_t a_rows = tra ? k : m, a_cols = tra ? m : k;
    const std::vector<float> a = RandomVector(a_rows * ld, ++seed);
    const std::vector<float> bm = RandomVector(k * (n + 3), ++seed);
    std::vector<double> ref(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = tra ? a[p * ld + col + i] : a[i * ld + col + p];
          sum += av * bm[p * (n + 3) + 1 + j];  // b: cols [1, 7) of [k, 9]
        }
        ref[i * n + j] = sum;
      }
    }
    DeviceBuffer da = ToDevice(b, a);
    DeviceBuffer db = ToDevice(b, bm);
    DeviceBuffer dc = Zeros<float>(b, m * n);
    DeviceMatrix<const float> ma(da.Matrix<float>(a_rows, ld).data + col,
                                 a_rows, a_cols, ld);
    DeviceMatrix<const float> mb(db.Matrix<float>(k, n + 3).data + 1, k, n,
                                 n + 3);
    ASSERT_OK(
        b.Gemm(ta, Transpose::kNo, 1.0f, ma, mb, 0.0f, dc.Matrix<float>(m, n)));
    ExpectAllClose(ToHost<float>(b, dc, m * n), ref, 1e-4, 1e-4,
                   absl::StrCat("strided gemm ta=", tra));
  }
  // A stride below the row's width, or a strided c, is refused.
  DeviceBuffer d = Zeros<float>(b, 64);
  DeviceMatrix<const float> narrow(d.Matrix<float>(4, 4).data, 4, 4, 3);
  EXPECT_EQ(b.Gemm(Transpose::kNo, Transpose::kNo, 1.0f, narrow,
                   d.Matrix<float>(4, 4), 0.0f, d.Matrix<float>(4, 4))
                .code(),
            absl::StatusCode::kInvalidArgument);
  DeviceMatrix<float> strided_c(d.Matrix<float>(4, 4).data, 2, 2, 4);
  EXPECT_EQ(b.Gemm(Transpose::kNo, Transpose::kNo, 1.0f, d.Matrix<float>(2, 2),
                   d.Matrix<float>(2, 2), 0.0f, strided_c)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendOpsTest, BiasAddAndGradMatchReference) {
  Backend& b = *backend_;
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {7, 129}, {129, 7}, {1000, 7}, {7, 1000}, {1, 1000}, {0, 7}};
  int seed = 100;
  for (auto [rows, cols] : shapes) {
    const std::vector<float> y = RandomVector(rows * cols, ++seed);
    const std::vector<float> bias = RandomVector(cols, ++seed);
    std::vector<double> ref_y(y.size());
    std::vector<double> ref_grad(static_cast<size_t>(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ref_y[r * cols + c] = double{y[r * cols + c]} + bias[c];
        ref_grad[c] += y[r * cols + c];
      }
    }
    DeviceBuffer dy = ToDevice(b, y);
    DeviceBuffer dbias = ToDevice(b, bias);
    DeviceBuffer dgrad = ToDevice(b, RandomVector(cols, 7));  // overwritten
    ASSERT_OK(
        b.BiasGrad(dy.Matrix<float>(rows, cols), dgrad.Span<float>(cols)));
    ExpectAllClose(ToHost<float>(b, dgrad, cols), ref_grad, 1e-5, 1e-5,
                   absl::StrCat("bias grad ", rows, "x", cols));
    ASSERT_OK(b.BiasAdd(dbias.Span<float>(cols), dy.Matrix<float>(rows, cols)));
    ExpectAllClose(ToHost<float>(b, dy, rows * cols), ref_y, 1e-6, 1e-6,
                   absl::StrCat("bias add ", rows, "x", cols));
  }
}

TEST_P(BackendOpsTest, ActivationsMatchReference) {
  Backend& b = *backend_;
  for (Activation act :
       {Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
    for (int64_t n : kSizes) {
      std::vector<float> x = RandomVector(n, 200 + n, -3.0f, 3.0f);
      if (n > 1) x[0] = 0.0f;  // ReLU's kink: gradient 0 at 0
      const std::vector<float> dy = RandomVector(n, 300 + n);
      std::vector<double> ref_y(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ref_y[i] = act == Activation::kRelu   ? std::max(0.0, double{x[i]})
                   : act == Activation::kTanh ? std::tanh(double{x[i]})
                                              : 1.0 / (1.0 + std::exp(-x[i]));
      }
      DeviceBuffer dx = ToDevice(b, x);
      DeviceBuffer out = Zeros<float>(b, n);
      ASSERT_OK(
          b.ActivationForward(act, dx.Span<float>(n), out.Span<float>(n)));
      const std::vector<float> y = ToHost<float>(b, out, n);
      ExpectAllClose(
          y, ref_y, 1e-6, 1e-6,
          absl::StrCat("forward act=", static_cast<int>(act), " n=", n));
      std::vector<double> ref_dx(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ref_dx[i] =
            act == Activation::kRelu   ? (x[i] > 0.0f ? double{dy[i]} : 0.0)
            : act == Activation::kTanh ? dy[i] * (1.0 - double{y[i]} * y[i])
                                       : dy[i] * double{y[i]} * (1.0 - y[i]);
      }
      DeviceBuffer ddy = ToDevice(b, dy);
      // In place: dx aliases dy.
      ASSERT_OK(b.ActivationBackward(act, out.Span<float>(n),
                                     ddy.Span<float>(n), ddy.Span<float>(n)));
      ExpectAllClose(
          ToHost<float>(b, ddy, n), ref_dx, 1e-6, 1e-5,
          absl::StrCat("backward act=", static_cast<int>(act), " n=", n));
    }
  }
}

// Reference: double precision, the textbook formula with max subtraction.
void SoftmaxXentReference(const std::vector<float>& logits,
                          const std::vector<int32_t>& labels, int64_t rows,
                          int64_t cols, double* loss,
                          std::vector<double>* grad) {
  grad->assign(logits.size(), 0.0);
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c)
      mx = std::max(mx, double{logits[r * cols + c]});
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      sum += std::exp(logits[r * cols + c] - mx);
    total += std::log(sum) - (logits[r * cols + labels[r]] - mx);
    for (int64_t c = 0; c < cols; ++c) {
      (*grad)[r * cols + c] =
          (std::exp(logits[r * cols + c] - mx) / sum - (c == labels[r])) / rows;
    }
  }
  *loss = total / rows;
}

TEST_P(BackendOpsTest, SoftmaxCrossEntropyMatchesReference) {
  Backend& b = *backend_;
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {1, 7}, {7, 129}, {129, 10}, {1000, 7}, {3, 1000}};
  int seed = 400;
  for (auto [rows, cols] : shapes) {
    const std::vector<float> logits = RandomVector(rows * cols, ++seed, -8, 8);
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    std::mt19937 rng(++seed);
    for (int32_t& l : labels) l = static_cast<int32_t>(rng() % cols);
    double ref_loss;
    std::vector<double> ref_grad;
    SoftmaxXentReference(logits, labels, rows, cols, &ref_loss, &ref_grad);

    DeviceBuffer dlogits = ToDevice(b, logits);
    DeviceBuffer dlabels = ToDevice(b, labels);
    DeviceBuffer dloss = Zeros<float>(b, 1);
    DeviceBuffer dgrad = Zeros<float>(b, rows * cols);
    const std::string what = absl::StrCat("softmax xent ", rows, "x", cols);
    ASSERT_OK(b.SoftmaxCrossEntropy(
        dlogits.Matrix<float>(rows, cols), dlabels.Span<int32_t>(rows),
        dloss.Span<float>(1), dgrad.Matrix<float>(rows, cols)));
    ExpectAllClose(ToHost<float>(b, dloss, 1), {ref_loss}, 1e-5, 1e-5, what);
    ExpectAllClose(ToHost<float>(b, dgrad, rows * cols), ref_grad, 1e-7, 1e-4,
                   what);

    // Loss only, and the gradient written over the logits.
    ASSERT_OK(b.Fill(-1.0f, dloss.Span<float>(1)));
    ASSERT_OK(b.SoftmaxCrossEntropy(dlogits.Matrix<float>(rows, cols),
                                    dlabels.Span<int32_t>(rows),
                                    dloss.Span<float>(1), std::nullopt));
    ExpectAllClose(ToHost<float>(b, dloss, 1), {ref_loss}, 1e-5, 1e-5,
                   what + " (no grad)");
    ASSERT_OK(b.SoftmaxCrossEntropy(
        dlogits.Matrix<float>(rows, cols), dlabels.Span<int32_t>(rows),
        dloss.Span<float>(1), dlogits.Matrix<float>(rows, cols)));
    ExpectAllClose(ToHost<float>(b, dlogits, rows * cols), ref_grad, 1e-7, 1e-4,
                   what + " (in place)");
  }
}

TEST_P(BackendOpsTest, SoftmaxCrossEntropyExtremeLogitsStayFinite) {
  Backend& b = *backend_;
  const int64_t rows = 4;
  const int64_t cols = 5;
  const std::vector<float> logits = {
      1e30f,  -1e30f, 0.0f,    1e30f,  -1e30f,  // two tied huge maxima
      -1e30f, -1e30f, -1e30f,  -1e30f, -1e30f,  // all very negative
      3e4f,   -3e4f,  1.0f,    2.0f,   3.0f,    // label at a tiny probability
      -88.0f, 88.0f,  -104.0f, 0.0f,   87.0f,   // around expf's limits
  };
  const std::vector<int32_t> labels = {0, 2, 1, 1};
  double ref_loss;
  std::vector<double> ref_grad;
  SoftmaxXentReference(logits, labels, rows, cols, &ref_loss, &ref_grad);
  ASSERT_TRUE(std::isfinite(ref_loss));
  DeviceBuffer dlogits = ToDevice(b, logits);
  DeviceBuffer dlabels = ToDevice(b, labels);
  DeviceBuffer dloss = Zeros<float>(b, 1);
  DeviceBuffer dgrad = Zeros<float>(b, rows * cols);
  ASSERT_OK(b.SoftmaxCrossEntropy(
      dlogits.Matrix<float>(rows, cols), dlabels.Span<int32_t>(rows),
      dloss.Span<float>(1), dgrad.Matrix<float>(rows, cols)));
  const std::vector<float> loss = ToHost<float>(b, dloss, 1);
  const std::vector<float> grad = ToHost<float>(b, dgrad, rows * cols);
  EXPECT_TRUE(std::isfinite(loss[0])) << loss[0];
  for (float g : grad) EXPECT_TRUE(std::isfinite(g)) << g;
  ExpectAllClose(loss, {ref_loss}, 1e-5, 1e-5, "extreme loss");
  ExpectAllClose(grad, ref_grad, 1e-6, 1e-4, "extreme grad");
}

TEST_P(BackendOpsTest, ArgmaxMatchesReference) {
  Backend& b = *backend_;
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {7, 129}, {129, 7}, {1000, 10}, {2, 1000}};
  int seed = 500;
  for (auto [rows, cols] : shapes) {
    std::vector<float> x = RandomVector(rows * cols, ++seed);
    // Ties and NaNs in the first row: the first maximum wins, NaN never does.
    if (cols >= 7) {
      x[1] = 5.0f;
      x[cols - 1] = 5.0f;
      x[0] = std::nanf("");
      x[cols / 2] = std::nanf("");
    }
    std::vector<int32_t> ref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      int32_t best = -1;
      for (int32_t c = 0; c < cols; ++c) {
        const float v = x[r * cols + c];
        if (std::isnan(v)) continue;
        if (best < 0 || v > x[r * cols + best]) best = c;
      }
      ref[r] = std::max(best, 0);
    }
    DeviceBuffer dx = ToDevice(b, x);
    DeviceBuffer dout = Zeros<int32_t>(b, rows);
    ASSERT_OK(b.Argmax(dx.Matrix<float>(rows, cols), dout.Span<int32_t>(rows)));
    EXPECT_EQ(ToHost<int32_t>(b, dout, rows), ref) << rows << "x" << cols;
  }
}

TEST_P(BackendOpsTest, AxpyScaleFillMatchReference) {
  Backend& b = *backend_;
  for (int64_t n : kSizes) {
    const std::vector<float> x = RandomVector(n, 600 + n);
    const std::vector<float> y = RandomVector(n, 700 + n);
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ref[i] = -0.75 * x[i] + y[i];
    DeviceBuffer dx = ToDevice(b, x);
    DeviceBuffer dy = ToDevice(b, y);
    ASSERT_OK(b.Axpy(-0.75f, dx.Span<float>(n), dy.Span<float>(n)));
    ExpectAllClose(ToHost<float>(b, dy, n), ref, 1e-6, 1e-6, "axpy");
    for (int64_t i = 0; i < n; ++i) ref[i] = 3.0 * x[i];
    ASSERT_OK(b.Scale(3.0f, dx.Span<float>(n)));
    ExpectAllClose(ToHost<float>(b, dx, n), ref, 1e-6, 1e-6, "scale");
    ASSERT_OK(b.Fill(2.5f, dx.Span<float>(n)));
    ExpectAllClose(ToHost<float>(b, dx, n),
                   std::vector<double>(static_cast<size_t>(n), 2.5), 0, 0,
                   "fill");
  }
}

TEST_P(BackendOpsTest, InitializersAreSeededAndHaveTheRightSpread) {
  Backend& b = *backend_;
  const int64_t fan_in = 300;
  const int64_t fan_out = 100;
  const int64_t n = fan_in * fan_out;
  for (Initializer kind :
       {Initializer::kHeUniform, Initializer::kHeNormal,
        Initializer::kXavierUniform, Initializer::kXavierNormal}) {
    DeviceBuffer d1 = Zeros<float>(b, n);
    DeviceBuffer d2 = Zeros<float>(b, n);
    DeviceBuffer d3 = Zeros<float>(b, n);
    ASSERT_OK(b.Initialize(kind, 42, fan_in, fan_out, d1.Span<float>(n)));
    ASSERT_OK(b.Initialize(kind, 42, fan_in, fan_out, d2.Span<float>(n)));
    ASSERT_OK(b.Initialize(kind, 43, fan_in, fan_out, d3.Span<float>(n)));
    const std::vector<float> v1 = ToHost<float>(b, d1, n);
    const std::vector<float> v2 = ToHost<float>(b, d2, n);
    const std::vector<float> v3 = ToHost<float>(b, d3, n);
    EXPECT_EQ(v1, v2) << "same seed, same values";
    EXPECT_NE(v1, v3) << "another seed, other values";
    const bool he =
        kind == Initializer::kHeUniform || kind == Initializer::kHeNormal;
    const double expected_var = he ? 2.0 / fan_in : 2.0 / (fan_in + fan_out);
    double sum = 0.0;
    double sum_sq = 0.0;
    for (float v : v1) {
      sum += v;
      sum_sq += double{v} * v;
    }
    const double mean = sum / n;
    const double var = sum_sq / n - mean * mean;
    // 30000 samples: the sample variance is within a few percent.
    EXPECT_NEAR(mean, 0.0, 4.0 * std::sqrt(expected_var / n));
    EXPECT_NEAR(var / expected_var, 1.0, 0.05) << static_cast<int>(kind);
    // Every backend computes element i from (seed, i) with the shared math.
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      ref[i] =
          InitializerValue(kind, 42, static_cast<uint64_t>(i), fan_in, fan_out);
    }
    ExpectAllClose(v1, ref, 0.0, 2e-7, "initializer vs shared math");
  }
}

// Reference bf16 rounding in double: 8 significant bits (fewer for bf16
// subnormals, whose spacing is 2^-133), nearest even.
float RoundToBf16Reference(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  int e;
  std::frexp(static_cast<double>(x), &e);  // x = m * 2^e, m in [0.5, 1)
  const int quantum_exp = std::max(e - 8, -133);
  const double r =
      std::nearbyint(std::ldexp(static_cast<double>(x), -quantum_exp));
  return static_cast<float>(std::ldexp(r, quantum_exp));
}

TEST_P(BackendOpsTest, CastsRoundToNearestEven) {
  Backend& b = *backend_;
  std::vector<float> x = RandomVector(1000, 800, -70000.0f, 70000.0f);
  const std::vector<float> special = {
      0.0f,
      -0.0f,
      1.0f,
      -1.0f,
      65504.0f,
      65519.0f,
      65520.0f,
      -65520.0f,
      1e10f,
      6.1035156e-05f /* min normal half */,
      5.9604645e-08f /* 2^-24 */,
      2.9802322e-08f /* 2^-25: ties to 0 */,
      2.9802326e-08f,
      1e-10f,
      1.00048828125f /* 1 + 2^-11: tie, to even */,
      1.00146484375f /* tie, up */,
      3.4e38f,
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::nanf(""),
      std::numeric_limits<float>::denorm_min(),
      1.00390625f /* bf16 tie */,
      1.01171875f};
  for (size_t i = 0; i < special.size(); ++i) x[i] = special[i];
  for (size_t i = 0; i < 100; ++i) x[100 + i] = x[200 + i] * 1e-8f;  // tiny
  const int64_t n = static_cast<int64_t>(x.size());
  DeviceBuffer dx = ToDevice(b, x);
  DeviceBuffer dh = Zeros<uint16_t>(b, n);
  DeviceBuffer dback = Zeros<float>(b, n);
  for (DType t : {DType::kF16, DType::kBF16}) {
    ASSERT_OK(b.CastFromFloat(dx.Span<float>(n), t, dh.Span<uint16_t>(n)));
    ASSERT_OK(b.CastToFloat(t, dh.Span<uint16_t>(n), dback.Span<float>(n)));
    const std::vector<float> back = ToHost<float>(b, dback, n);
    for (int64_t i = 0; i < n; ++i) {
      const float ref = t == DType::kF16
                            ? static_cast<float>(static_cast<_Float16>(x[i]))
                            : RoundToBf16Reference(x[i]);
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(back[i])) << i;
      } else {
        EXPECT_EQ(back[i], ref)
            << "dtype " << static_cast<int>(t) << " x=" << x[i];
      }
    }
  }
  // Every fp16 bit pattern decodes like the compiler's _Float16.
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  DeviceBuffer dall = ToDevice(b, all);
  DeviceBuffer dall_f = Zeros<float>(b, 65536);
  ASSERT_OK(b.CastToFloat(DType::kF16, dall.Span<uint16_t>(65536),
                          dall_f.Span<float>(65536)));
  const std::vector<float> decoded = ToHost<float>(b, dall_f, 65536);
  int wrong = 0;
  for (int i = 0; i < 65536; ++i) {
    _Float16 h;
    std::memcpy(&h, &all[i], sizeof(h));
    const float ref = static_cast<float>(h);
    if (std::isnan(ref) ? !std::isnan(decoded[i])
                        : std::memcmp(&ref, &decoded[i], sizeof(ref)) != 0) {
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST_P(BackendOpsTest, BadArgumentsAreInvalidArgument) {
  Backend& b = *backend_;
  DeviceBuffer buf = Zeros<float>(b, 64);
  DeviceBuffer labels = Zeros<int32_t>(b, 8);
  const auto invalid = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument;
  };
  DeviceMatrix<float> m4x4 = buf.Matrix<float>(4, 4);
  DeviceMatrix<float> m4x3 = buf.Matrix<float>(4, 3);
  DeviceMatrix<float> null4x4(nullptr, 4, 4);
  // Shapes.
  EXPECT_PRED1(invalid,
               b.Gemm(Transpose::kNo, Transpose::kNo, 1, m4x3, m4x3, 0, m4x4));
  EXPECT_PRED1(invalid,
               b.Gemm(Transpose::kNo, Transpose::kNo, 1, m4x4, m4x4, 0, m4x3));
  EXPECT_PRED1(invalid, b.BiasAdd(buf.Span<float>(3), m4x4));
  EXPECT_PRED1(invalid, b.BiasGrad(m4x4, buf.Span<float>(3)));
  EXPECT_PRED1(invalid,
               b.ActivationForward(Activation::kRelu, buf.Span<float>(3),
                                   buf.Span<float>(4)));
  EXPECT_PRED1(invalid,
               b.ActivationBackward(Activation::kTanh, buf.Span<float>(4),
                                    buf.Span<float>(3), buf.Span<float>(4)));
  EXPECT_PRED1(invalid, b.Axpy(1, buf.Span<float>(3), buf.Span<float>(4)));
  EXPECT_PRED1(invalid, b.SoftmaxCrossEntropy(m4x4, labels.Span<int32_t>(3),
                                              buf.Span<float>(1), m4x4));
  EXPECT_PRED1(invalid, b.SoftmaxCrossEntropy(m4x4, labels.Span<int32_t>(4),
                                              buf.Span<float>(1), m4x3));
  EXPECT_PRED1(invalid, b.SoftmaxCrossEntropy(m4x4, labels.Span<int32_t>(4),
                                              buf.Span<float>(2), m4x4));
  EXPECT_PRED1(invalid, b.SoftmaxCrossEntropy(
                            buf.Matrix<float>(0, 4), labels.Span<int32_t>(0),
                            buf.Span<float>(1), std::nullopt));
  EXPECT_PRED1(invalid, b.Argmax(m4x4, labels.Span<int32_t>(3)));
  EXPECT_PRED1(invalid, b.CastFromFloat(buf.Span<float>(4), DType::kF32,
                                        labels.Span<uint16_t>(4)));
  EXPECT_PRED1(invalid, b.Initialize(Initializer::kHeNormal, 1, 0, 4,
                                     buf.Span<float>(4)));
  // Null buffers, and views larger than their buffer (which come back null).
  EXPECT_PRED1(invalid, b.Gemm(Transpose::kNo, Transpose::kNo, 1, null4x4, m4x4,
                               0, m4x4));
  EXPECT_PRED1(
      invalid,
      b.Gemm(Transpose::kNo, Transpose::kNo, 1, buf.Matrix<float>(100, 100),
             buf.Matrix<float>(100, 100), 0, buf.Matrix<float>(100, 100)));
  EXPECT_PRED1(invalid, b.Fill(0, DeviceSpan<float>(nullptr, 4)));
  EXPECT_PRED1(invalid, b.Fill(0, buf.Span<float>(65)));
  EXPECT_PRED1(invalid, b.Scale(2, DeviceSpan<float>(nullptr, 1)));
  EXPECT_PRED1(invalid, b.SoftmaxCrossEntropy(
                            m4x4, DeviceSpan<const int32_t>(nullptr, 4),
                            buf.Span<float>(1), std::nullopt));
  EXPECT_PRED1(invalid, b.CopyToDevice(nullptr, buf.data(), 4));
  EXPECT_PRED1(invalid, b.CopyToHost(buf.data(), nullptr, 4));
  EXPECT_PRED1(invalid, b.Allocate(0).status());
  EXPECT_PRED1(invalid,
               b.Fill(0, DeviceSpan<float>(buf.Span<float>().data, -1)));
  // Sizes beyond BLAS's int32. The pointers are real but never dereferenced:
  // the check comes first.
  const int64_t big = int64_t{1} << 31;
  float* p = static_cast<float*>(buf.data());
  EXPECT_PRED1(invalid, b.Gemm(Transpose::kNo, Transpose::kNo, 1,
                               DeviceMatrix<const float>(p, big, 1),
                               DeviceMatrix<const float>(p, 1, 1), 0,
                               DeviceMatrix<float>(p, big, 1)));
  EXPECT_PRED1(invalid, b.Gemm(Transpose::kYes, Transpose::kNo, 1,
                               DeviceMatrix<const float>(p, 1, big),
                               DeviceMatrix<const float>(p, 1, 1), 0,
                               DeviceMatrix<float>(p, big, 1)));
  EXPECT_PRED1(
      invalid,
      b.Argmax(DeviceMatrix<const float>(p, big, 1),
               DeviceSpan<int32_t>(static_cast<int32_t*>(labels.data()), big)));
  // Shapes whose element count overflows int64.
  EXPECT_PRED1(invalid, b.BiasAdd(DeviceSpan<const float>(p, int64_t{1} << 40),
                                  DeviceMatrix<float>(p, int64_t{1} << 40,
                                                      int64_t{1} << 40)));
  // Nothing above touched the buffer.
  EXPECT_EQ(ToHost<float>(b, buf, 64), std::vector<float>(64, 0.0f));
}

}  // namespace ps::kernels
