// The launch emulation itself: indices, barriers, shared memory, and the
// launch errors CUDA would report.

#include "kernels/cuda_emulation.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps::kernels {
namespace {

__global__ void WriteIndices(int* out) {
  const int block = blockIdx.x + gridDim.x * blockIdx.y;
  const int thread = threadIdx.x + blockDim.x * threadIdx.y;
  out[block * blockDim.x * blockDim.y + thread] = block * 1000 + thread;
}

// Reverses each block's slice through shared memory: wrong without a barrier.
__global__ void ReverseInBlock(const int* in, int* out) {
  __shared__ int tile[64];
  const int t = threadIdx.x;
  tile[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = tile[blockDim.x - 1 - t];
}

__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x == 0) return;  // a bug: the others wait at the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmulation, ThreadAndBlockIndices) {
  std::vector<int> out(3 * 2 * 4 * 2, -1);
  PS_LAUNCH(WriteIndices, dim3(3, 2), dim3(4, 2), nullptr, out.data());
  ASSERT_EQ(cuda_emulation::TakeLastError(), "");
  for (int block = 0; block < 6; ++block) {
    for (int thread = 0; thread < 8; ++thread) {
      EXPECT_EQ(out[block * 8 + thread], block * 1000 + thread);
    }
  }
}

TEST(CudaEmulation, SyncThreadsOrdersSharedMemory) {
  std::vector<int> in(3 * 64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
  std::vector<int> out(in.size(), -1);
  PS_LAUNCH(ReverseInBlock, dim3(3), dim3(64), nullptr,
            static_cast<const int*>(in.data()), out.data());
  ASSERT_EQ(cuda_emulation::TakeLastError(), "");
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 64; ++t) EXPECT_EQ(out[b * 64 + t], b * 64 + 63 - t);
  }
}

TEST(CudaEmulation, ReportsBadLaunchConfigurations) {
  std::vector<int> out(2048);
  PS_LAUNCH(WriteIndices, dim3(1), dim3(2048), nullptr, out.data());
  EXPECT_NE(cuda_emulation::TakeLastError().find("invalid configuration"),
            std::string::npos);
  PS_LAUNCH(WriteIndices, dim3(0), dim3(32), nullptr, out.data());
  EXPECT_NE(cuda_emulation::TakeLastError().find("grid"), std::string::npos);
  EXPECT_EQ(cuda_emulation::TakeLastError(), "");  // cleared
}

TEST(CudaEmulation, ReportsBarrierDivergence) {
  std::vector<int> out(32);
  PS_LAUNCH(DivergentBarrier, dim3(1), dim3(32), nullptr, out.data());
  EXPECT_NE(cuda_emulation::TakeLastError().find("divergence"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::kernels
