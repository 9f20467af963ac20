#include "common/spec/initializer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ps {
namespace {

TensorSpec Weight(InitializerSpec::Kind kind, int64_t in, int64_t out) {
  TensorSpec t;
  t.set_name("fc0/weight");
  t.add_shape(in);
  t.add_shape(out);
  t.mutable_init()->set_kind(kind);
  return t;
}

TEST(Initializer, AnyRangeEqualsTheSameSliceOfTheWhole) {
  for (auto kind : {InitializerSpec::HE_UNIFORM, InitializerSpec::HE_NORMAL,
                    InitializerSpec::XAVIER_NORMAL}) {
    const TensorSpec t = Weight(kind, 97, 33);
    std::vector<float> whole(97 * 33);
    ASSERT_TRUE(InitializeRange(t, 7, 0, absl::MakeSpan(whole)).ok());
    // Cut it as 1, 2 and 5 shards would.
    for (int pieces : {2, 5, 13}) {
      const int64_t n = static_cast<int64_t>(whole.size());
      for (int p = 0; p < pieces; ++p) {
        const int64_t begin = n * p / pieces, end = n * (p + 1) / pieces;
        std::vector<float> part(end - begin);
        ASSERT_TRUE(InitializeRange(t, 7, begin, absl::MakeSpan(part)).ok());
        for (int64_t i = begin; i < end; ++i) {
          ASSERT_EQ(part[i - begin], whole[i]) << "element " << i;
        }
      }
    }
  }
}

TEST(Initializer, SeedAndNameChangeTheValues) {
  const TensorSpec t = Weight(InitializerSpec::HE_UNIFORM, 10, 10);
  std::vector<float> a(100), b(100), c(100);
  ASSERT_TRUE(InitializeRange(t, 1, 0, absl::MakeSpan(a)).ok());
  ASSERT_TRUE(InitializeRange(t, 2, 0, absl::MakeSpan(b)).ok());
  TensorSpec other = t;
  other.set_name("fc1/weight");
  ASSERT_TRUE(InitializeRange(other, 1, 0, absl::MakeSpan(c)).ok());
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

TEST(Initializer, DistributionsHaveTheRightScale) {
  struct Case {
    InitializerSpec::Kind kind;
    double bound;   // > 0: uniform in [-bound, bound]
    double stddev;  // expected standard deviation
  } cases[] = {
      {InitializerSpec::HE_UNIFORM, std::sqrt(6.0 / 400),
       std::sqrt(6.0 / 400) / std::sqrt(3.0)},
      {InitializerSpec::HE_NORMAL, 0, std::sqrt(2.0 / 400)},
      {InitializerSpec::XAVIER_UNIFORM, std::sqrt(6.0 / 600),
       std::sqrt(6.0 / 600) / std::sqrt(3.0)},
      {InitializerSpec::XAVIER_NORMAL, 0, std::sqrt(2.0 / 600)},
  };
  for (const Case& c : cases) {
    const TensorSpec t = Weight(c.kind, 400, 200);
    std::vector<float> v(80000);
    ASSERT_TRUE(InitializeRange(t, 3, 0, absl::MakeSpan(v)).ok());
    double sum = 0, sq = 0;
    for (float x : v) {
      sum += x;
      sq += double{x} * x;
      if (c.bound > 0) {
        ASSERT_LE(std::abs(x), c.bound);
      }
    }
    const double mean = sum / v.size();
    const double sd = std::sqrt(sq / v.size() - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.05 * c.stddev) << c.kind;
    EXPECT_NEAR(sd, c.stddev, 0.02 * c.stddev) << c.kind;
  }
}

TEST(Initializer, ZerosConstantAndRangeErrors) {
  TensorSpec bias;
  bias.set_name("b");
  bias.add_shape(5);
  std::vector<float> v(5, 9.0f);
  ASSERT_TRUE(InitializeRange(bias, 1, 0, absl::MakeSpan(v)).ok());
  EXPECT_EQ(v, std::vector<float>(5, 0.0f));
  bias.mutable_init()->set_kind(InitializerSpec::CONSTANT);
  bias.mutable_init()->set_value(0.5f);
  ASSERT_TRUE(InitializeRange(bias, 1, 0, absl::MakeSpan(v)).ok());
  EXPECT_EQ(v, std::vector<float>(5, 0.5f));
  EXPECT_EQ(InitializeRange(bias, 1, 1, absl::MakeSpan(v)).code(),
            absl::StatusCode::kOutOfRange);
}

SparseTableSpec Table(InitializerSpec::Kind kind, int dim, float scale = 0) {
  SparseTableSpec t;
  t.set_name("emb");
  t.set_dim(dim);
  t.mutable_init()->set_kind(kind);
  t.mutable_init()->set_scale(scale);
  return t;
}

TEST(SparseInitializer, RowDependsOnSeedTableAndKeyOnly) {
  const SparseTableSpec t = Table(InitializerSpec::UNIFORM, 8);
  std::vector<float> a(8), b(8), c(8), d(8), e(8);
  ASSERT_TRUE(InitializeSparseRow(t, 3, 42, absl::MakeSpan(a)).ok());
  ASSERT_TRUE(InitializeSparseRow(t, 3, 42, absl::MakeSpan(b)).ok());
  EXPECT_EQ(a, b);
  ASSERT_TRUE(InitializeSparseRow(t, 3, 43, absl::MakeSpan(c)).ok());
  EXPECT_NE(a, c);
  ASSERT_TRUE(InitializeSparseRow(t, 4, 42, absl::MakeSpan(d)).ok());
  EXPECT_NE(a, d);
  SparseTableSpec other = t;
  other.set_name("emb2");
  ASSERT_TRUE(InitializeSparseRow(other, 3, 42, absl::MakeSpan(e)).ok());
  EXPECT_NE(a, e);
  // The seeded form is the same function.
  std::vector<float> f(8);
  ASSERT_TRUE(InitializeSparseRowSeeded(t, SparseRowSeed(3, "emb"), 42,
                                        absl::MakeSpan(f))
                  .ok());
  EXPECT_EQ(a, f);
}

TEST(SparseInitializer, DistributionsAndDefaultScale) {
  struct Case {
    InitializerSpec::Kind kind;
    float scale;
    double stddev;
    double bound;  // 0: unbounded
  };
  const int dim = 16;
  const double s = 1.0 / std::sqrt(dim);
  for (const Case& c :
       {Case{InitializerSpec::UNIFORM, 0, s / std::sqrt(3), s},
        Case{InitializerSpec::KIND_UNSPECIFIED, 0, s / std::sqrt(3), s},
        Case{InitializerSpec::UNIFORM, 0.5f, 0.5 / std::sqrt(3), 0.5},
        Case{InitializerSpec::NORMAL, 0, s, 0},
        Case{InitializerSpec::NORMAL, 2.0f, 2.0, 0}}) {
    const SparseTableSpec t = Table(c.kind, dim, c.scale);
    double sum = 0, sq = 0;
    int n = 0;
    std::vector<float> row(dim);
    for (uint64_t key = 0; key < 20000; ++key) {
      ASSERT_TRUE(
          InitializeSparseRow(t, 11, key * 7919, absl::MakeSpan(row)).ok());
      for (float x : row) {
        sum += x;
        sq += double{x} * x;
        ++n;
        if (c.bound > 0) {
          ASSERT_LE(std::abs(x), c.bound);
        }
      }
    }
    const double mean = sum / n;
    const double sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.02 * c.stddev) << c.kind;
    EXPECT_NEAR(sd, c.stddev, 0.02 * c.stddev) << c.kind;
  }
}

TEST(SparseInitializer, ZerosConstantAndErrors) {
  std::vector<float> row(4, 9.0f);
  ASSERT_TRUE(InitializeSparseRow(Table(InitializerSpec::ZEROS, 4), 1, 5,
                                  absl::MakeSpan(row))
                  .ok());
  EXPECT_EQ(row, std::vector<float>(4, 0.0f));
  SparseTableSpec t = Table(InitializerSpec::CONSTANT, 4);
  t.mutable_init()->set_value(0.25f);
  ASSERT_TRUE(InitializeSparseRow(t, 1, 5, absl::MakeSpan(row)).ok());
  EXPECT_EQ(row, std::vector<float>(4, 0.25f));
  std::vector<float> wrong(3);
  EXPECT_EQ(InitializeSparseRow(t, 1, 5, absl::MakeSpan(wrong)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitializeSparseRow(Table(InitializerSpec::HE_UNIFORM, 4), 1, 5,
                                absl::MakeSpan(row))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
