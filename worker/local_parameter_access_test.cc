#include "worker/local_parameter_access.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ps::worker {
namespace {

TEST(LocalParameterAccess, DensePushesApplyAtOnce) {
  LocalParameterAccess access({{1.0f, 2.0f}, {3.0f}}, {}, 0.5f, 1);
  std::vector<float> a(2), b(1);
  ASSERT_EQ(*access.Pull(0, {absl::MakeSpan(a), absl::MakeSpan(b)}), 0);
  EXPECT_EQ(a, (std::vector<float>{1.0f, 2.0f}));
  ASSERT_TRUE(access.Push(0, 0, 0, std::vector<float>{2.0f, -2.0f}).ok());
  ASSERT_EQ(*access.Finish(0), 0);
  ASSERT_EQ(*access.Pull(1, {absl::MakeSpan(a), absl::MakeSpan(b)}), 1);
  EXPECT_EQ(a, (std::vector<float>{0.0f, 3.0f}));
  EXPECT_FALSE(access.Push(0, 0, 2, std::vector<float>{1.0f}).ok());
  EXPECT_FALSE(access.Push(0, 0, 1, std::vector<float>{1.0f, 1.0f}).ok());
  EXPECT_FALSE(access.Pull(0, {absl::MakeSpan(a)}).ok());
}

TEST(LocalParameterAccess, SparseRowsStartFromTheSeedAndLearn) {
  LocalParameterAccess one({}, {{"t", 3, 0.1f}}, 1.0f, 7);
  LocalParameterAccess same({}, {{"t", 3, 0.1f}}, 1.0f, 7);
  LocalParameterAccess other({}, {{"t", 3, 0.1f}}, 1.0f, 8);
  const std::vector<uint64_t> keys = {5, 1ull << 60};
  std::vector<float> r1(6), r2(6), r3(6);
  ASSERT_TRUE(one.PullSparse(0, 0, keys, absl::MakeSpan(r1)).ok());
  ASSERT_TRUE(same.PullSparse(0, 0, keys, absl::MakeSpan(r2)).ok());
  ASSERT_TRUE(other.PullSparse(0, 0, keys, absl::MakeSpan(r3)).ok());
  EXPECT_EQ(r1, r2);
  EXPECT_NE(r1, r3);
  EXPECT_NE(std::vector<float>(r1.begin(), r1.begin() + 3),
            std::vector<float>(r1.begin() + 3, r1.end()));
  for (float v : r1) EXPECT_LE(std::abs(v), 0.1f);
  EXPECT_EQ(one.table_size(0), 2);

  std::vector<float> grad = {1, 0, 0, 0, 0, -1};
  ASSERT_TRUE(one.PushSparse(0, 0, 0, keys, grad).ok());
  std::vector<float> after(6);
  ASSERT_TRUE(one.PullSparse(1, 0, keys, absl::MakeSpan(after)).ok());
  EXPECT_FLOAT_EQ(after[0], r1[0] - 1);
  EXPECT_FLOAT_EQ(after[5], r1[5] + 1);
  EXPECT_FLOAT_EQ(after[2], r1[2]);
  EXPECT_EQ(one.sparse_pushes(), 1);

  EXPECT_FALSE(one.PullSparse(0, 1, keys, absl::MakeSpan(after)).ok());
  EXPECT_FALSE(
      one.PullSparse(0, 0, keys, absl::MakeSpan(after).subspan(1)).ok());
  EXPECT_FALSE(one.PushSparse(0, 0, 0, keys, std::vector<float>(5)).ok());
}

}  // namespace
}  // namespace ps::worker
