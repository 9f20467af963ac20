#include "kernels/gemm_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "absl/time/clock.h"
#include "kernels/cpu_backend.h"

namespace ps::kernels {
namespace {

std::unique_ptr<Backend> Cpu() {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend({});
  EXPECT_TRUE(b.ok()) << b.status();
  return std::move(*b);
}

TEST(GemmProbe, MeasuresTheCpuBackendWithinItsBudget) {
  std::unique_ptr<Backend> backend = Cpu();
  GemmProbeOptions o;
  o.n = 128;
  o.budget = absl::Milliseconds(20);
  const absl::Time start = absl::Now();
  absl::StatusOr<double> gflops = ProbeGemmGflops(*backend, o);
  ASSERT_TRUE(gflops.ok()) << gflops.status();
  // Any working BLAS on any x86-64 core does 128^3 at more than 0.1 GFLOP/s
  // (42 ms a call); none does 100 TFLOP/s on one CPU.
  EXPECT_GT(*gflops, 0.1);
  EXPECT_LT(*gflops, 1e5);
  // The budget bounds the timed calls; generous for a loaded machine.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(GemmProbe, RejectsBadOptions) {
  std::unique_ptr<Backend> backend = Cpu();
  for (const GemmProbeOptions& o :
       {GemmProbeOptions{.n = 0}, GemmProbeOptions{.n = 9000},
        GemmProbeOptions{.n = 64, .min_calls = 0}}) {
    EXPECT_EQ(ProbeGemmGflops(*backend, o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ps::kernels
