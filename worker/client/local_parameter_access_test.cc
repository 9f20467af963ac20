#include "worker/client/local_parameter_access.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ps::client {
namespace {

PullArgs Tensors(int64_t clock, std::vector<absl::Span<float>> tensors) {
  PullArgs r;
  r.clock = clock;
  r.tensors = std::move(tensors);
  return r;
}

PullArgs Rows(int64_t clock, int table, absl::Span<const uint64_t> keys,
              absl::Span<float> rows) {
  PullArgs r;
  r.clock = clock;
  r.rows = {{.table = table, .keys = keys, .rows = rows}};
  return r;
}

StepArgs Grad(int64_t clock, int index, absl::Span<const float> grad,
              int64_t offset = 0) {
  StepArgs r;
  r.clock = clock;
  r.dense = {{.tensor_index = index, .grad = grad, .offset = offset}};
  return r;
}

StepArgs RowGrads(int64_t clock, int table, absl::Span<const uint64_t> keys,
                  absl::Span<const float> grads) {
  StepArgs r;
  r.clock = clock;
  r.rows = {{.table = table, .keys = keys, .grads = grads}};
  return r;
}

TEST(LocalParameterAccess, DensePushesApplyAtOnce) {
  LocalParameterAccess access({{1.0f, 2.0f}, {3.0f}}, {}, 0.5f, 1);
  std::vector<float> a(2), b(1);
  ASSERT_EQ(access.Pull(Tensors(0, {absl::MakeSpan(a), absl::MakeSpan(b)}))
                .Wait()
                ->version,
            0);
  EXPECT_EQ(a, (std::vector<float>{1.0f, 2.0f}));
  const std::vector<float> g = {2.0f, -2.0f};
  ASSERT_TRUE(access.Push(Grad(0, 0, g)).ok());
  StepArgs end;
  end.clock = 0;
  ASSERT_EQ(access.EndStep(end).Wait()->staleness, 0);
  ASSERT_EQ(access.Pull(Tensors(1, {absl::MakeSpan(a), absl::MakeSpan(b)}))
                .Wait()
                ->version,
            1);
  EXPECT_EQ(a, (std::vector<float>{0.0f, 3.0f}));
  const std::vector<float> one = {1.0f}, two = {1.0f, 1.0f};
  EXPECT_FALSE(access.Push(Grad(0, 2, one)).ok());
  EXPECT_FALSE(access.Push(Grad(0, 1, two)).ok());
  EXPECT_FALSE(access.Pull(Tensors(0, {absl::MakeSpan(a)})).Wait().ok());
  EXPECT_EQ(access.steps_ended(), 1);
  EXPECT_EQ(access.dense_pulls(), 3);
}

// A step's end carries gradients and brings the next weights; pushes that
// name next_weights bring back their own part's new weights.
TEST(LocalParameterAccess, StepEndsAndPartsBringWeightsBack) {
  LocalParameterAccess access({{1, 2, 3, 4}, {5}}, {}, 1.0f, 1, {{2}, {}});
  EXPECT_EQ(access.PartBoundaries(0), (std::vector<int64_t>{2}));
  EXPECT_TRUE(access.PartBoundaries(1).empty());
  EXPECT_TRUE(access.PartBoundaries(7).empty());
  std::vector<float> a(4, 0.0f), b(1, 0.0f);
  const std::vector<float> part = {1, 1};
  StepArgs push = Grad(0, 0, part, 2);
  push.next_weights = {absl::MakeSpan(a), absl::MakeSpan(b)};
  ASSERT_TRUE(access.Push(push).ok());
  // Only the pushed part came back.
  EXPECT_EQ(a, (std::vector<float>{0, 0, 2, 3}));
  EXPECT_EQ(b, (std::vector<float>{0}));

  const std::vector<float> bias = {2};
  StepArgs end = Grad(0, 1, bias);
  end.next_weights = {absl::MakeSpan(a), absl::MakeSpan(b)};
  Handle h = access.EndStep(end);
  EXPECT_TRUE(h.waited());
  EXPECT_TRUE(h.AwaitPart(0, 0, 4).ok());
  absl::StatusOr<CallResult> r = h.Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 1);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 2, 3}));
  EXPECT_EQ(b, (std::vector<float>{3}));
  // A part past the tensor's end is refused, and nothing is applied.
  EXPECT_EQ(access.Push(Grad(1, 0, part, 3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(access.dense(0), (std::vector<float>{1, 2, 2, 3}));
}

TEST(LocalParameterAccess, SparseRowsStartFromTheSeedAndLearn) {
  LocalParameterAccess one({}, {{"t", 3, 0.1f}}, 1.0f, 7);
  LocalParameterAccess same({}, {{"t", 3, 0.1f}}, 1.0f, 7);
  LocalParameterAccess other({}, {{"t", 3, 0.1f}}, 1.0f, 8);
  const std::vector<uint64_t> keys = {5, 1ull << 60};
  std::vector<float> r1(6), r2(6), r3(6);
  ASSERT_TRUE(one.Pull(Rows(0, 0, keys, absl::MakeSpan(r1))).Wait().ok());
  ASSERT_TRUE(same.Pull(Rows(0, 0, keys, absl::MakeSpan(r2))).Wait().ok());
  ASSERT_TRUE(other.Pull(Rows(0, 0, keys, absl::MakeSpan(r3))).Wait().ok());
  EXPECT_EQ(r1, r2);
  EXPECT_NE(r1, r3);
  EXPECT_NE(std::vector<float>(r1.begin(), r1.begin() + 3),
            std::vector<float>(r1.begin() + 3, r1.end()));
  for (float v : r1) EXPECT_LE(std::abs(v), 0.1f);
  EXPECT_EQ(one.table_size(0), 2);

  std::vector<float> grad = {1, 0, 0, 0, 0, -1};
  ASSERT_TRUE(one.Push(RowGrads(0, 0, keys, grad)).ok());
  std::vector<float> after(6);
  ASSERT_TRUE(one.Pull(Rows(1, 0, keys, absl::MakeSpan(after))).Wait().ok());
  EXPECT_FLOAT_EQ(after[0], r1[0] - 1);
  EXPECT_FLOAT_EQ(after[5], r1[5] + 1);
  EXPECT_FLOAT_EQ(after[2], r1[2]);
  EXPECT_EQ(one.sparse_pushes(), 1);
  EXPECT_EQ(one.row_pulls(), 2);

  EXPECT_FALSE(one.Pull(Rows(0, 1, keys, absl::MakeSpan(after))).Wait().ok());
  EXPECT_FALSE(
      one.Pull(Rows(0, 0, keys, absl::MakeSpan(after).subspan(1))).Wait().ok());
  EXPECT_FALSE(one.Push(RowGrads(0, 0, keys, std::vector<float>(5))).ok());
}

// Rows asked back by a push are read after its gradients are applied.
TEST(LocalParameterAccess, RowsAskedBackSeeThePush) {
  LocalParameterAccess access({}, {{"t", 1, 0.0f}}, 1.0f, 7);
  const std::vector<uint64_t> keys = {3};
  const std::vector<float> grad = {0.5f};
  std::vector<float> next(1, 9.0f);
  StepArgs push = RowGrads(0, 0, keys, grad);
  push.next_rows = {{.table = 0, .keys = keys, .rows = absl::MakeSpan(next)}};
  ASSERT_TRUE(access.Push(push).ok());
  EXPECT_FLOAT_EQ(next[0], -0.5f);
  EXPECT_EQ(access.pushes_with_rows(), 1);
  access.CancelCalls();
  EXPECT_EQ(access.cancels(), 1);
}

}  // namespace
}  // namespace ps::client
