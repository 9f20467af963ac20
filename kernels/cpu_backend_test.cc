#include "kernels/cpu_backend.h"

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

}  // namespace
}  // namespace ps::kernels
