#include "kernels/cpu_backend.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_test_suite.h"

namespace ps::kernels {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCpu() {
  return CreateCpuBackend({.num_threads = 1});
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOpsTest,
                         testing::Values(BackendFactory{"cpu", &MakeCpu}),
                         BackendFactoryName);

TEST(CpuBackend, RejectsBadThreadCount) {
  EXPECT_EQ(CreateCpuBackend({.num_threads = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackend, RejectsOutOfRangeLabels) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeCpu();
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& b = **backend;
  absl::StatusOr<DeviceBuffer> logits = b.AllocateArray<float>(6);
  absl::StatusOr<DeviceBuffer> labels = b.AllocateArray<int32_t>(2);
  absl::StatusOr<DeviceBuffer> loss = b.AllocateArray<float>(1);
  ASSERT_TRUE(logits.ok() && labels.ok() && loss.ok());
  ASSERT_TRUE(b.Fill(0.0f, logits->Span<float>(6)).ok());
  const int32_t host_labels[2] = {1, 3};
  ASSERT_TRUE(b.CopyToDevice(host_labels, labels->data(), 8).ok());
  const absl::Status s = b.SoftmaxCrossEntropy(
      logits->Matrix<float>(2, 3), labels->Span<int32_t>(2),
      loss->Span<float>(1), std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// The CPU backend reads the bags' index arrays before writing anything and
// rejects ids outside the rows and offsets that do not run from 0 to the
// number of ids without decreasing.
TEST(CpuBackend, RejectsBadEmbeddingBagIndices) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeCpu();
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& b = **backend;
  absl::StatusOr<DeviceBuffer> rows = b.AllocateArray<float>(8);
  absl::StatusOr<DeviceBuffer> out = b.AllocateArray<float>(4);
  absl::StatusOr<DeviceBuffer> ints = b.AllocateArray<int32_t>(6);
  ASSERT_TRUE(rows.ok() && out.ok() && ints.ok());
  ASSERT_TRUE(b.Fill(1.0f, rows->Span<float>(8)).ok());
  struct Case {
    std::vector<int32_t> indices;  // 3 ids
    std::vector<int32_t> offsets;  // 3 offsets: two bags
  };
  const Case cases[] = {
      {{0, 4, 1}, {0, 1, 3}},   // id 4 of 4 rows
      {{0, -1, 1}, {0, 1, 3}},  // negative id
      {{0, 1, 2}, {0, 2, 1}},   // decreasing, and not ending at 3
      {{0, 1, 2}, {1, 2, 3}},   // not starting at 0
      {{0, 1, 2}, {0, 1, 2}},   // not ending at 3
  };
  for (const Case& c : cases) {
    std::vector<int32_t> host = c.indices;
    host.insert(host.end(), c.offsets.begin(), c.offsets.end());
    ASSERT_TRUE(b.CopyToDevice(host.data(), ints->data(), 24).ok());
    ASSERT_TRUE(b.Fill(-5.0f, out->Span<float>(4)).ok());
    const DeviceSpan<const int32_t> indices = ints->Span<int32_t>(3);
    const DeviceSpan<const int32_t> offsets(
        static_cast<const int32_t*>(ints->data()) + 3, 3);
    EXPECT_EQ(b.EmbeddingBagForward(EmbeddingBagMode::kSum,
                                    rows->Matrix<float>(4, 2), indices, offsets,
                                    std::nullopt, out->Matrix<float>(2, 2))
                  .code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.EmbeddingBagBackward(EmbeddingBagMode::kSum, indices, offsets,
                                     std::nullopt, out->Matrix<float>(2, 2),
                                     rows->Matrix<float>(4, 2))
                  .code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<float> out_after(4), rows_after(8);
    ASSERT_TRUE(b.CopyToHost(out->data(), out_after.data(), 16).ok());
    ASSERT_TRUE(b.CopyToHost(rows->data(), rows_after.data(), 32).ok());
    EXPECT_EQ(out_after, std::vector<float>(4, -5.0f));
    EXPECT_EQ(rows_after, std::vector<float>(8, 1.0f));
  }
}

}  // namespace
}  // namespace ps::kernels
