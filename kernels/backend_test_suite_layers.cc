// The op suite, part 3: batched GEMM, strided copies, embedding bags, the
// sigmoid and squared-error heads and the feature interactions, against
// double-precision references and central finite differences; and the
// argument checks of every layer op. Registered on the BackendOpsTest
// fixture like the rest of the suite.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend_test_suite.h"
#include "kernels/backend_test_util.h"

namespace ps::kernels {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

TEST_P(BackendOpsTest, BatchedGemmMatchesReference) {
  Backend& b = *backend_;
  struct Shape {
    int64_t count, m, n, k;
  };
  int seed = 2000;
  for (const Shape& s : {Shape{1, 3, 4, 5}, Shape{5, 4, 4, 3},
                         Shape{7, 1, 9, 2}, Shape{3, 6, 2, 0}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (float beta : {0.0f, 0.5f}) {
          const bool tra = ta == Transpose::kYes, trb = tb == Transpose::kYes;
          const std::vector<float> a =
              RandomVector(s.count * s.m * s.k, ++seed);
          const std::vector<float> bm =
              RandomVector(s.count * s.k * s.n, ++seed);
          std::vector<float> c = RandomVector(s.count * s.m * s.n, ++seed);
          if (beta == 0.0f) c.assign(c.size(), std::nanf(""));
          std::vector<double> ref(c.size());
          for (int64_t q = 0; q < s.count; ++q) {
            const float* aq = a.data() + q * s.m * s.k;
            const float* bq = bm.data() + q * s.k * s.n;
            for (int64_t i = 0; i < s.m; ++i) {
              for (int64_t j = 0; j < s.n; ++j) {
                double sum = 0.0;
                for (int64_t p = 0; p < s.k; ++p) {
                  sum += double{tra ? aq[p * s.m + i] : aq[i * s.k + p]} *
                         (trb ? bq[j * s.k + p] : bq[p * s.n + j]);
                }
                const int64_t e = q * s.m * s.n + i * s.n + j;
                ref[e] = 1.5 * sum + (beta == 0.0f ? 0.0 : beta * c[e]);
              }
            }
          }
          DeviceBuffer da = ToDevice(b, a), db = ToDevice(b, bm),
                       dc = ToDevice(b, c);
          ASSERT_OK(b.BatchedGemm(ta, tb, 1.5f,
                                  tra ? da.Batch<float>(s.count, s.k, s.m)
                                      : da.Batch<float>(s.count, s.m, s.k),
                                  trb ? db.Batch<float>(s.count, s.n, s.k)
                                      : db.Batch<float>(s.count, s.k, s.n),
                                  beta, dc.Batch<float>(s.count, s.m, s.n)));
          ExpectAllClose(
              ToHost<float>(b, dc, c.size()), ref, kF32Accumulated,
              absl::StrCat("batched gemm ", s.count, "x", s.m, "x", s.n, "x",
                           s.k, " ta=", tra, " tb=", trb, " beta=", beta));
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, CopyMatrixMovesColumnBlocks) {
  Backend& b = *backend_;
  // Concat: [5, 3] and [5, 4] into columns [0, 3) and [3, 7) of [5, 7] (and
  // back out), leaving the rest of each row alone.
  const std::vector<float> left = RandomVector(15, 2100);
  const std::vector<float> right = RandomVector(20, 2101);
  DeviceBuffer dl = ToDevice(b, left), dr = ToDevice(b, right);
  DeviceBuffer wide = ToDevice(b, std::vector<float>(5 * 8, -1.0f));
  float* base = static_cast<float*>(wide.data());
  ASSERT_OK(
      b.CopyMatrix(dl.Matrix<float>(5, 3), DeviceMatrix<float>(base, 5, 3, 8)));
  ASSERT_OK(b.CopyMatrix(dr.Matrix<float>(5, 4),
                         DeviceMatrix<float>(base + 3, 5, 4, 8)));
  std::vector<double> ref(40, -1.0);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 3; ++c) ref[r * 8 + c] = left[r * 3 + c];
    for (int c = 0; c < 4; ++c) ref[r * 8 + 3 + c] = right[r * 4 + c];
  }
  ExpectAllClose(ToHost<float>(b, wide, 40), ref, 0, 0, "concat");
  DeviceBuffer back = Zeros<float>(b, 20);
  ASSERT_OK(b.CopyMatrix(DeviceMatrix<const float>(base + 3, 5, 4, 8),
                         back.Matrix<float>(5, 4)));
  EXPECT_EQ(ToHost<float>(b, back, 20), right);
}

// Bags in CSR form: an empty bag, a row used twice in one bag and across
// bags, a bag of one.
struct Bags {
  int64_t num_rows = 7;
  std::vector<int32_t> indices = {3, 1, 3, 0, 6, 2, 3, 5, 5, 4};
  std::vector<int32_t> offsets = {0, 2, 2, 5, 6, 10};
  int64_t num_bags() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t nnz() const { return static_cast<int64_t>(indices.size()); }
};

std::vector<double> BagReference(const Bags& bags, EmbeddingBagMode mode,
                                 const std::vector<double>& rows, int64_t dim,
                                 const std::vector<float>* weights) {
  std::vector<double> out(static_cast<size_t>(bags.num_bags() * dim), 0.0);
  for (int64_t g = 0; g < bags.num_bags(); ++g) {
    const int64_t count = bags.offsets[g + 1] - bags.offsets[g];
    for (int64_t p = bags.offsets[g]; p < bags.offsets[g + 1]; ++p) {
      const double w = weights == nullptr ? 1.0 : (*weights)[p];
      for (int64_t d = 0; d < dim; ++d) {
        out[g * dim + d] += w * rows[bags.indices[p] * dim + d];
      }
    }
    if (mode == EmbeddingBagMode::kMean && count > 0) {
      for (int64_t d = 0; d < dim; ++d) out[g * dim + d] /= count;
    }
  }
  return out;
}

TEST_P(BackendOpsTest, EmbeddingBagsMatchReferenceAndFiniteDifferences) {
  Backend& b = *backend_;
  const Bags bags;
  int seed = 2200;
  DeviceBuffer indices = ToDevice(b, bags.indices);
  DeviceBuffer offsets = ToDevice(b, bags.offsets);
  const std::vector<float> weights = RandomVector(bags.nnz(), 2199, 0.5f, 2.0f);
  DeviceBuffer dweights = ToDevice(b, weights);
  for (int64_t dim : {int64_t{1}, int64_t{5}, int64_t{33}}) {
    for (EmbeddingBagMode mode :
         {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean}) {
      for (bool weighted : {false, true}) {
        const std::string what =
            absl::StrCat("dim ", dim, " mode ", static_cast<int>(mode),
                         weighted ? " weighted" : "");
        const std::optional<DeviceSpan<const float>> w =
            weighted ? std::optional<DeviceSpan<const float>>(
                           dweights.Span<float>(bags.nnz()))
                     : std::nullopt;
        const std::vector<float> rows =
            RandomVector(bags.num_rows * dim, ++seed);
        DeviceBuffer drows = ToDevice(b, rows);
        // The output is columns [2, 2 + dim) of a wider matrix.
        const int64_t ld = dim + 3;
        DeviceBuffer wide =
            ToDevice(b, std::vector<float>(bags.num_bags() * ld, -7.0f));
        DeviceMatrix<float> out(static_cast<float*>(wide.data()) + 2,
                                bags.num_bags(), dim, ld);
        ASSERT_OK(b.EmbeddingBagForward(
            mode, drows.Matrix<float>(bags.num_rows, dim),
            indices.Span<int32_t>(bags.nnz()),
            offsets.Span<int32_t>(bags.num_bags() + 1), w, out));
        const std::vector<double> ref = BagReference(
            bags, mode, ToDouble(rows), dim, weighted ? &weights : nullptr);
        std::vector<double> ref_wide(bags.num_bags() * ld, -7.0);
        for (int64_t g = 0; g < bags.num_bags(); ++g) {
          for (int64_t d = 0; d < dim; ++d) {
            ref_wide[g * ld + 2 + d] = ref[g * dim + d];
          }
        }
        ExpectAllClose(ToHost<float>(b, wide, bags.num_bags() * ld), ref_wide,
                       kF32Elementwise, "forward " + what);

        // L = <out, R>; dL/drows through the backward op (R strided too)
        // against central differences of the reference.
        const std::vector<float> r = RandomVector(bags.num_bags() * ld, ++seed);
        std::vector<double> r_dense(bags.num_bags() * dim);
        for (int64_t g = 0; g < bags.num_bags(); ++g) {
          for (int64_t d = 0; d < dim; ++d) {
            r_dense[g * dim + d] = r[g * ld + 2 + d];
          }
        }
        const std::vector<double> fd = FiniteDifferences(
            [&](const std::vector<double>& v) {
              return Dot(BagReference(bags, mode, v, dim,
                                      weighted ? &weights : nullptr),
                         r_dense);
            },
            ToDouble(rows), 1e-3);
        DeviceBuffer dr = ToDevice(b, r);
        DeviceBuffer grad = ToDevice(b, RandomVector(rows.size(), 5));
        ASSERT_OK(b.EmbeddingBagBackward(
            mode, indices.Span<int32_t>(bags.nnz()),
            offsets.Span<int32_t>(bags.num_bags() + 1), w,
            DeviceMatrix<const float>(static_cast<float*>(dr.data()) + 2,
                                      bags.num_bags(), dim, ld),
            grad.Matrix<float>(bags.num_rows, dim)));
        const std::vector<float> got = ToHost<float>(b, grad, rows.size());
        ExpectAllClose(got, fd, kF32VsFiniteDifference, "backward " + what);
        // Row 4 appears in no bag before the last; rows no bag uses stay 0.
        for (int64_t d = 0; d < dim; ++d) EXPECT_NE(got[4 * dim + d], 7.0f);
      }
    }
  }
}

TEST_P(BackendOpsTest, EmbeddingBagsOfNoIdsAreZero) {
  Backend& b = *backend_;
  DeviceBuffer rows = ToDevice(b, RandomVector(6, 2300));
  DeviceBuffer offsets = ToDevice(b, std::vector<int32_t>{0, 0, 0});
  DeviceBuffer out = ToDevice(b, std::vector<float>(6, 3.0f));
  ASSERT_OK(b.EmbeddingBagForward(
      EmbeddingBagMode::kMean, rows.Matrix<float>(2, 3),
      DeviceSpan<const int32_t>(), offsets.Span<int32_t>(3), std::nullopt,
      out.Matrix<float>(2, 3)));
  EXPECT_EQ(ToHost<float>(b, out, 6), std::vector<float>(6, 0.0f));
  DeviceBuffer grad = ToDevice(b, std::vector<float>(6, 3.0f));
  ASSERT_OK(b.EmbeddingBagBackward(
      EmbeddingBagMode::kSum, DeviceSpan<const int32_t>(),
      offsets.Span<int32_t>(1), std::nullopt,
      DeviceMatrix<const float>(nullptr, 0, 3), grad.Matrix<float>(2, 3)));
  EXPECT_EQ(ToHost<float>(b, grad, 6), std::vector<float>(6, 0.0f));
}

// The heads: loss and gradient against double references, extreme logits
// included, and the gradient against central differences of the loss.
TEST_P(BackendOpsTest, SigmoidCrossEntropyAndSquaredErrorMatchReference) {
  Backend& b = *backend_;
  for (int64_t n : kSizes) {
    std::vector<float> x = RandomVector(n, 2400 + n, -8.0f, 8.0f);
    std::vector<float> y = RandomVector(n, 2500 + n, 0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      if (i % 3 != 2) y[i] = y[i] < 0.5f ? 0.0f : 1.0f;  // clicks; some soft
    }
    const float extremes[] = {100.0f, -100.0f, 3e4f, -3e4f, 0.0f};
    for (int64_t i = 0; i < std::min<int64_t>(n, 5); ++i) x[i] = extremes[i];
    const auto bce = [&](const std::vector<double>& v) {
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        total += std::max(v[i], 0.0) - v[i] * y[i] +
                 std::log1p(std::exp(-std::abs(v[i])));
      }
      return total / n;
    };
    const auto mse = [&](const std::vector<double>& v) {
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) total += (v[i] - y[i]) * (v[i] - y[i]);
      return total / n;
    };
    std::vector<double> bce_grad(n), mse_grad(n);
    for (int64_t i = 0; i < n; ++i) {
      bce_grad[i] = (1.0 / (1.0 + std::exp(-double{x[i]})) - y[i]) / n;
      mse_grad[i] = 2.0 * (double{x[i]} - y[i]) / n;
    }
    DeviceBuffer dx = ToDevice(b, x), dy = ToDevice(b, y);
    DeviceBuffer loss = Zeros<float>(b, 1), grad = Zeros<float>(b, n);
    const std::string what = absl::StrCat("n=", n);
    ASSERT_OK(b.SigmoidBinaryCrossEntropy(dx.Span<float>(n), dy.Span<float>(n),
                                          loss.Span<float>(1),
                                          grad.Span<float>(n)));
    const std::vector<float> got_loss = ToHost<float>(b, loss, 1);
    EXPECT_TRUE(std::isfinite(got_loss[0])) << what;
    ExpectAllClose(got_loss, {bce(ToDouble(x))}, kF32Elementwise,
                   "bce loss " + what);
    ExpectAllClose(ToHost<float>(b, grad, n), bce_grad, kF32Elementwise,
                   "bce grad " + what);
    ASSERT_OK(b.MeanSquaredError(dx.Span<float>(n), dy.Span<float>(n),
                                 loss.Span<float>(1), grad.Span<float>(n)));
    ExpectAllClose(ToHost<float>(b, loss, 1), {mse(ToDouble(x))},
                   kF32Elementwise, "mse loss " + what);
    ExpectAllClose(ToHost<float>(b, grad, n), mse_grad, kF32Elementwise,
                   "mse grad " + what);
    // Central differences (away from the extremes, where the loss is flat or
    // linear anyway).
    if (n == 129) {
      ExpectAllClose(ToHost<float>(b, grad, n),
                     FiniteDifferences(mse, ToDouble(x), 1e-4),
                     kF32VsFiniteDifference, "mse vs finite differences");
      ASSERT_OK(b.SigmoidBinaryCrossEntropy(
          dx.Span<float>(n), dy.Span<float>(n), loss.Span<float>(1),
          grad.Span<float>(n)));
      ExpectAllClose(ToHost<float>(b, grad, n),
                     FiniteDifferences(bce, ToDouble(x), 1e-4),
                     kF32VsFiniteDifference, "bce vs finite differences");
    }
    // Loss only; then the gradient written over the logits.
    ASSERT_OK(b.SigmoidBinaryCrossEntropy(dx.Span<float>(n), dy.Span<float>(n),
                                          loss.Span<float>(1), std::nullopt));
    ExpectAllClose(ToHost<float>(b, loss, 1), {bce(ToDouble(x))},
                   kF32Elementwise, "bce loss only " + what);
    ASSERT_OK(b.SigmoidBinaryCrossEntropy(dx.Span<float>(n), dy.Span<float>(n),
                                          loss.Span<float>(1),
                                          dx.Span<float>(n)));
    ExpectAllClose(ToHost<float>(b, dx, n), bce_grad, kF32Elementwise,
                   "bce grad in place " + what);
  }
}

// DLRM's dot interaction of Z [batch, fields, dim]: out = the lower triangle
// of Z Z^T, written into columns [2, 2 + pairs) of the top MLP's input;
// backward: dZ = S Z with S the symmetric scatter of dout.
TEST_P(BackendOpsTest, DotInteractionMatchesReferenceAndFiniteDifferences) {
  Backend& b = *backend_;
  int seed = 2600;
  for (int64_t fields : {int64_t{2}, int64_t{4}, int64_t{27}}) {
    const int64_t batch = 3, dim = 5;
    const int64_t pairs = fields * (fields - 1) / 2;
    const int64_t ld = pairs + 2;
    const std::vector<float> z = RandomVector(batch * fields * dim, ++seed);
    const auto forward = [&](const std::vector<double>& v) {
      std::vector<double> out(static_cast<size_t>(batch * pairs));
      for (int64_t q = 0; q < batch; ++q) {
        for (int64_t i = 1; i < fields; ++i) {
          for (int64_t j = 0; j < i; ++j) {
            double sum = 0.0;
            for (int64_t d = 0; d < dim; ++d) {
              sum +=
                  v[(q * fields + i) * dim + d] * v[(q * fields + j) * dim + d];
            }
            out[q * pairs + i * (i - 1) / 2 + j] = sum;
          }
        }
      }
      return out;
    };
    DeviceBuffer dz = ToDevice(b, z);
    DeviceBuffer gram = Zeros<float>(b, batch * fields * fields);
    DeviceBuffer wide = ToDevice(b, std::vector<float>(batch * ld, -3.0f));
    ASSERT_OK(b.BatchedGemm(Transpose::kNo, Transpose::kYes, 1.0f,
                            dz.Batch<float>(batch, fields, dim),
                            dz.Batch<float>(batch, fields, dim), 0.0f,
                            gram.Batch<float>(batch, fields, fields)));
    ASSERT_OK(b.GatherLowerTriangle(
        gram.Batch<float>(batch, fields, fields),
        DeviceMatrix<float>(static_cast<float*>(wide.data()) + 2, batch, pairs,
                            ld)));
    const std::vector<double> ref = forward(ToDouble(z));
    std::vector<double> ref_wide(batch * ld, -3.0);
    for (int64_t q = 0; q < batch; ++q) {
      for (int64_t p = 0; p < pairs; ++p) {
        ref_wide[q * ld + 2 + p] = ref[q * pairs + p];
      }
    }
    const std::string what = absl::StrCat("fields ", fields);
    ExpectAllClose(ToHost<float>(b, wide, batch * ld), ref_wide,
                   kF32Accumulated, "forward " + what);

    const std::vector<float> r = RandomVector(batch * ld, ++seed);
    std::vector<double> r_dense(batch * pairs);
    for (int64_t q = 0; q < batch; ++q) {
      for (int64_t p = 0; p < pairs; ++p) {
        r_dense[q * pairs + p] = r[q * ld + 2 + p];
      }
    }
    DeviceBuffer dr = ToDevice(b, r);
    DeviceBuffer dgram = ToDevice(b, RandomVector(batch * fields * fields, 4));
    ASSERT_OK(b.ScatterLowerTriangle(
        DeviceMatrix<const float>(static_cast<float*>(dr.data()) + 2, batch,
                                  pairs, ld),
        dgram.Batch<float>(batch, fields, fields)));
    DeviceBuffer grad = Zeros<float>(b, z.size());
    ASSERT_OK(b.BatchedGemm(Transpose::kNo, Transpose::kNo, 1.0f,
                            dgram.Batch<float>(batch, fields, fields),
                            dz.Batch<float>(batch, fields, dim), 0.0f,
                            grad.Batch<float>(batch, fields, dim)));
    ExpectAllClose(ToHost<float>(b, grad, z.size()),
                   FiniteDifferences(
                       [&](const std::vector<double>& v) {
                         return Dot(forward(v), r_dense);
                       },
                       ToDouble(z), 1e-3),
                   kF32VsFiniteDifference, "backward " + what);
  }
}

TEST_P(BackendOpsTest, FmInteractionMatchesReferenceAndFiniteDifferences) {
  Backend& b = *backend_;
  int seed = 2700;
  struct Shape {
    int64_t batch, fields, dim;
  };
  for (const Shape& s :
       {Shape{1, 1, 1}, Shape{4, 3, 2}, Shape{5, 26, 16}, Shape{2, 3, 300}}) {
    const int64_t cols = s.fields * s.dim;
    const std::vector<float> v = RandomVector(s.batch * cols, ++seed);
    const auto forward = [&](const std::vector<double>& x) {
      std::vector<double> out(static_cast<size_t>(s.batch), 0.0);
      for (int64_t q = 0; q < s.batch; ++q) {
        for (int64_t f = 0; f < s.fields; ++f) {
          for (int64_t g = f + 1; g < s.fields; ++g) {
            for (int64_t d = 0; d < s.dim; ++d) {
              out[q] +=
                  x[q * cols + f * s.dim + d] * x[q * cols + g * s.dim + d];
            }
          }
        }
      }
      return out;
    };
    const std::string what =
        absl::StrCat("fm ", s.batch, "x", s.fields, "x", s.dim);
    DeviceBuffer dv = ToDevice(b, v);
    DeviceBuffer out = Zeros<float>(b, s.batch);
    ASSERT_OK(b.FmInteraction(s.fields, dv.Matrix<float>(s.batch, cols),
                              out.Span<float>(s.batch)));
    ExpectAllClose(ToHost<float>(b, out, s.batch), forward(ToDouble(v)),
                   kF32Accumulated, what);
    const std::vector<float> r = RandomVector(s.batch, ++seed);
    DeviceBuffer dr = ToDevice(b, r);
    DeviceBuffer grad = ToDevice(b, RandomVector(v.size(), 3));
    ASSERT_OK(b.FmInteractionBackward(s.fields, dv.Matrix<float>(s.batch, cols),
                                      dr.Span<float>(s.batch),
                                      grad.Matrix<float>(s.batch, cols)));
    ExpectAllClose(ToHost<float>(b, grad, v.size()),
                   FiniteDifferences(
                       [&](const std::vector<double>& x) {
                         return Dot(forward(x), ToDouble(r));
                       },
                       ToDouble(v), 1e-3),
                   kF32VsFiniteDifference, "backward " + what);
  }
}

TEST_P(BackendOpsTest, RowwiseDotMatchesReferenceAndFiniteDifferences) {
  Backend& b = *backend_;
  int seed = 2800;
  for (auto [rows, dim] :
       {std::pair<int64_t, int64_t>{1, 1}, {9, 7}, {3, 64}, {20, 100}}) {
    const std::vector<float> a = RandomVector(rows * dim, ++seed);
    const std::vector<float> c = RandomVector(rows * dim, ++seed);
    const std::vector<float> r = RandomVector(rows, ++seed);
    const auto forward = [&](const std::vector<double>& x,
                             const std::vector<double>& y) {
      std::vector<double> out(static_cast<size_t>(rows), 0.0);
      for (int64_t i = 0; i < rows * dim; ++i) out[i / dim] += x[i] * y[i];
      return out;
    };
    const std::string what = absl::StrCat("dot ", rows, "x", dim);
    DeviceBuffer da = ToDevice(b, a), dc = ToDevice(b, c), dr = ToDevice(b, r);
    DeviceBuffer out = Zeros<float>(b, rows);
    ASSERT_OK(b.RowwiseDot(da.Matrix<float>(rows, dim),
                           dc.Matrix<float>(rows, dim), out.Span<float>(rows)));
    ExpectAllClose(ToHost<float>(b, out, rows),
                   forward(ToDouble(a), ToDouble(c)), kF32Accumulated, what);
    DeviceBuffer ga = Zeros<float>(b, a.size()), gc = Zeros<float>(b, c.size());
    ASSERT_OK(b.RowwiseDotBackward(
        da.Matrix<float>(rows, dim), dc.Matrix<float>(rows, dim),
        dr.Span<float>(rows), ga.Matrix<float>(rows, dim),
        gc.Matrix<float>(rows, dim)));
    ExpectAllClose(ToHost<float>(b, ga, a.size()),
                   FiniteDifferences(
                       [&](const std::vector<double>& x) {
                         return Dot(forward(x, ToDouble(c)), ToDouble(r));
                       },
                       ToDouble(a), 1e-3),
                   kF32VsFiniteDifference, "da " + what);
    ExpectAllClose(ToHost<float>(b, gc, c.size()),
                   FiniteDifferences(
                       [&](const std::vector<double>& y) {
                         return Dot(forward(ToDouble(a), y), ToDouble(r));
                       },
                       ToDouble(c), 1e-3),
                   kF32VsFiniteDifference, "db " + what);
  }
}

TEST_P(BackendOpsTest, LayerOpsRejectBadArgumentsBeforeTouchingMemory) {
  Backend& b = *backend_;
  DeviceBuffer buf = Zeros<float>(b, 256);
  DeviceBuffer ints = Zeros<int32_t>(b, 64);
  const auto invalid = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument;
  };
  float* p = static_cast<float*>(buf.data());
  const DeviceSpan<float> ws = buf.Span<float>(256);
  // Batched GEMM and copies.
  EXPECT_PRED1(invalid, b.BatchedGemm(Transpose::kNo, Transpose::kNo, 1,
                                      buf.Batch<float>(2, 3, 4),
                                      buf.Batch<float>(3, 4, 2), 0,
                                      buf.Batch<float>(2, 3, 2)));
  EXPECT_PRED1(invalid, b.BatchedGemm(Transpose::kNo, Transpose::kNo, 1,
                                      buf.Batch<float>(2, 3, 4),
                                      buf.Batch<float>(2, 3, 2), 0,
                                      buf.Batch<float>(2, 3, 2)));
  EXPECT_PRED1(invalid, b.BatchedGemm(Transpose::kNo, Transpose::kNo, 1,
                                      buf.Batch<float>(100, 3, 4),
                                      buf.Batch<float>(100, 4, 2), 0,
                                      buf.Batch<float>(100, 3, 2)));
  EXPECT_PRED1(invalid,
               b.CopyMatrix(buf.Matrix<float>(4, 3), buf.Matrix<float>(3, 4)));
  EXPECT_PRED1(invalid, b.CopyMatrix(DeviceMatrix<const float>(p, 4, 3, 2),
                                     buf.Matrix<float>(4, 3)));
  // Convolution geometry and shapes.
  const ConvGeometry g{.batch = 2,
                       .in_h = 4,
                       .in_w = 4,
                       .in_c = 1,
                       .out_c = 2,
                       .kernel_h = 3,
                       .kernel_w = 3};
  const DeviceSpan<float> x = buf.Span<float>(32);
  const DeviceMatrix<float> filter = buf.Matrix<float>(9, 2);
  const DeviceMatrix<float> y = buf.Matrix<float>(8, 2);
  ConvGeometry too_big = g;
  too_big.kernel_h = 5;
  ConvGeometry no_stride = g;
  no_stride.stride_w = 0;
  ConvGeometry huge = g;
  huge.in_h = int64_t{1} << 40;
  ConvGeometry overflowing = g;  // every field fits int32, their product not
  overflowing.in_h = overflowing.in_w = overflowing.in_c = kInt32Max;
  overflowing.kernel_h = overflowing.kernel_w = kInt32Max;
  for (const ConvGeometry& bad : {too_big, no_stride, huge, overflowing}) {
    EXPECT_PRED1(invalid, b.Conv2DForward(bad, x, filter, y, ws));
    EXPECT_PRED1(invalid, b.Im2Col(bad, x, buf.Matrix<float>(8, 9)));
  }
  EXPECT_PRED1(invalid, b.Conv2DForward(g, buf.Span<float>(31), filter, y, ws));
  EXPECT_PRED1(invalid, b.Conv2DForward(g, x, buf.Matrix<float>(8, 2), y, ws));
  EXPECT_PRED1(invalid,
               b.Conv2DForward(g, x, filter, buf.Matrix<float>(9, 2), ws));
  EXPECT_PRED1(invalid, b.Conv2DForward(g, x, filter, y,
                                        buf.Span<float>(35)));  // < 1 image
  EXPECT_PRED1(invalid,
               b.Conv2DBackwardFilter(g, x, y, buf.Matrix<float>(2, 9), ws));
  EXPECT_PRED1(invalid,
               b.Conv2DBackwardData(g, y, filter, buf.Span<float>(33), ws));
  EXPECT_PRED1(invalid, b.Im2Col(g, x, buf.Matrix<float>(9, 8)));
  EXPECT_PRED1(invalid,
               b.Col2Im(g, buf.Matrix<float>(8, 9), buf.Span<float>(30)));
  EXPECT_PRED1(invalid, b.Conv2DForward(g, DeviceSpan<const float>(nullptr, 32),
                                        filter, y, ws));
  // Pooling.
  const PoolGeometry pg{.batch = 2, .in_h = 4, .in_w = 4, .channels = 1};
  PoolGeometry wide_pad = pg;
  wide_pad.pad_h = 2;
  EXPECT_PRED1(invalid, b.MaxPool2DForward(wide_pad, x, buf.Span<float>(18),
                                           ints.Span<int32_t>(18)));
  PoolGeometry overflowing_pool = pg;
  overflowing_pool.in_h = overflowing_pool.in_w = kInt32Max;
  overflowing_pool.channels = kInt32Max;
  EXPECT_PRED1(invalid,
               b.AvgPool2DForward(overflowing_pool, x, buf.Span<float>(8)));
  EXPECT_PRED1(invalid, b.MaxPool2DForward(pg, x, buf.Span<float>(7),
                                           ints.Span<int32_t>(8)));
  EXPECT_PRED1(invalid, b.MaxPool2DForward(pg, x, buf.Span<float>(8),
                                           ints.Span<int32_t>(7)));
  EXPECT_PRED1(invalid,
               b.MaxPool2DBackward(pg, ints.Span<int32_t>(8),
                                   buf.Span<float>(8), buf.Span<float>(31)));
  EXPECT_PRED1(invalid,
               b.AvgPool2DForward(pg, buf.Span<float>(33), buf.Span<float>(8)));
  EXPECT_PRED1(invalid, b.AvgPool2DBackward(pg, buf.Span<float>(9), x));
  // Embedding bags.
  const DeviceSpan<int32_t> idx = ints.Span<int32_t>(6);
  const DeviceSpan<int32_t> off = ints.Span<int32_t>(4);
  const DeviceMatrix<float> rows = buf.Matrix<float>(5, 4);
  EXPECT_PRED1(invalid,
               b.EmbeddingBagForward(EmbeddingBagMode::kSum, rows, idx,
                                     ints.Span<int32_t>(0), std::nullopt,
                                     buf.Matrix<float>(0, 4)));
  EXPECT_PRED1(invalid, b.EmbeddingBagForward(EmbeddingBagMode::kSum, rows, idx,
                                              off, buf.Span<float>(5),
                                              buf.Matrix<float>(3, 4)));
  EXPECT_PRED1(invalid,
               b.EmbeddingBagForward(EmbeddingBagMode::kSum, rows, idx, off,
                                     std::nullopt, buf.Matrix<float>(3, 3)));
  EXPECT_PRED1(invalid, b.EmbeddingBagForward(static_cast<EmbeddingBagMode>(7),
                                              rows, idx, off, std::nullopt,
                                              buf.Matrix<float>(3, 4)));
  EXPECT_PRED1(invalid, b.EmbeddingBagForward(EmbeddingBagMode::kSum, rows, idx,
                                              off, std::nullopt,
                                              DeviceMatrix<float>(p, 3, 4, 3)));
  EXPECT_PRED1(invalid,
               b.EmbeddingBagBackward(EmbeddingBagMode::kMean, idx, off,
                                      std::nullopt, buf.Matrix<float>(3, 4),
                                      DeviceMatrix<float>(p, 5, 4, 8)));
  EXPECT_PRED1(invalid, b.EmbeddingBagBackward(EmbeddingBagMode::kMean, idx,
                                               off, std::nullopt,
                                               buf.Matrix<float>(4, 4), rows));
  // Heads.
  EXPECT_PRED1(invalid, b.SigmoidBinaryCrossEntropy(
                            buf.Span<float>(4), buf.Span<float>(3),
                            buf.Span<float>(1), std::nullopt));
  EXPECT_PRED1(invalid, b.SigmoidBinaryCrossEntropy(
                            buf.Span<float>(0), buf.Span<float>(0),
                            buf.Span<float>(1), std::nullopt));
  EXPECT_PRED1(invalid,
               b.MeanSquaredError(buf.Span<float>(4), buf.Span<float>(4),
                                  buf.Span<float>(2), std::nullopt));
  EXPECT_PRED1(invalid,
               b.MeanSquaredError(buf.Span<float>(4), buf.Span<float>(4),
                                  buf.Span<float>(1), buf.Span<float>(3)));
  // Interactions.
  EXPECT_PRED1(invalid, b.GatherLowerTriangle(buf.Batch<float>(2, 3, 4),
                                              buf.Matrix<float>(2, 3)));
  EXPECT_PRED1(invalid, b.GatherLowerTriangle(buf.Batch<float>(2, 1, 1),
                                              buf.Matrix<float>(2, 0)));
  EXPECT_PRED1(invalid, b.GatherLowerTriangle(buf.Batch<float>(2, 3, 3),
                                              buf.Matrix<float>(2, 4)));
  EXPECT_PRED1(invalid, b.ScatterLowerTriangle(buf.Matrix<float>(3, 3),
                                               buf.Batch<float>(2, 3, 3)));
  EXPECT_PRED1(invalid,
               b.FmInteraction(3, buf.Matrix<float>(2, 8), buf.Span<float>(2)));
  EXPECT_PRED1(invalid,
               b.FmInteraction(0, buf.Matrix<float>(2, 8), buf.Span<float>(2)));
  EXPECT_PRED1(invalid,
               b.FmInteraction(2, buf.Matrix<float>(2, 8), buf.Span<float>(3)));
  EXPECT_PRED1(invalid, b.FmInteractionBackward(2, buf.Matrix<float>(2, 8),
                                                buf.Span<float>(2),
                                                buf.Matrix<float>(2, 6)));
  EXPECT_PRED1(invalid,
               b.RowwiseDot(buf.Matrix<float>(3, 4), buf.Matrix<float>(4, 3),
                            buf.Span<float>(3)));
  EXPECT_PRED1(invalid, b.RowwiseDotBackward(
                            buf.Matrix<float>(3, 4), buf.Matrix<float>(3, 4),
                            buf.Span<float>(2), buf.Matrix<float>(3, 4),
                            buf.Matrix<float>(3, 4)));
  EXPECT_PRED1(invalid,
               b.RowwiseDot(buf.Matrix<float>(300, 300),
                            buf.Matrix<float>(300, 300), buf.Span<float>(300)));
  // Nothing above touched the buffers.
  EXPECT_EQ(ToHost<float>(b, buf, 256), std::vector<float>(256, 0.0f));
  EXPECT_EQ(ToHost<int32_t>(b, ints, 64), std::vector<int32_t>(64, 0));
}

}  // namespace
}  // namespace ps::kernels
