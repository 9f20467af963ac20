#ifndef PS_KERNELS_BACKEND_TEST_SUITE_H_
#define PS_KERNELS_BACKEND_TEST_SUITE_H_

// Test-only: every op of the Backend API against a double-precision reference,
// and the argument checks. Instantiate per backend:
//
//   INSTANTIATE_TEST_SUITE_P(Cpu, BackendOpsTest,
//                            testing::Values(BackendFactory{"cpu", &MakeCpu}));

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace ps::kernels {

struct BackendFactory {
  std::string name;
  absl::StatusOr<std::unique_ptr<Backend>> (*create)();
  // When creation fails: skip with the reason (no GPU) instead of failing.
  bool skip_if_unavailable = false;
};

class BackendOpsTest : public testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;
  std::unique_ptr<Backend> backend_;
};

// The layer ops on the parameter backend and on the CPU backend agree.
//
//   INSTANTIATE_TEST_SUITE_P(Cuda, LayerOpsAgreeWithCpuTest,
//                            testing::Values(BackendFactory{"cuda", ...}));
class LayerOpsAgreeWithCpuTest : public testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> other_;
};

std::string BackendFactoryName(
    const testing::TestParamInfo<BackendFactory>& info);

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_TEST_SUITE_H_
