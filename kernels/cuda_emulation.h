#ifndef PS_KERNELS_CUDA_EMULATION_H_
#define PS_KERNELS_CUDA_EMULATION_H_

// Test-only: lets g++ compile CUDA kernel source (kernels/cuda_kernels.cuh) as
// host code and run it without a GPU.
//
// A launch runs its blocks one after another on the calling thread. Within a
// block every CUDA thread is a fiber (ucontext) with its own stack;
// __syncthreads() switches back to the scheduler, which resumes the next
// thread, so each barrier phase of every thread completes before any thread
// passes the barrier, as on a GPU. __shared__ becomes `static`: one copy per
// kernel, shared by the block's threads; blocks never overlap. threadIdx and
// friends are globals the scheduler sets before resuming a fiber.
//
// Launch errors that CUDA reports (bad block or grid sizes) and barrier misuse
// (some threads exit while others wait at __syncthreads) are recorded and
// returned by TakeLastError(), like cudaGetLastError().
//
// Not thread-safe: launches are serialised by a process-wide mutex.

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1)
      : x(vx), y(vy), z(vz) {}
};

using cudaStream_t = void*;

inline dim3 threadIdx;
inline dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

namespace ps::kernels::cuda_emulation {

// Runs `body` for every thread of every block of the grid (see above).
// Returns an empty string or the error.
std::string RunGrid(dim3 grid, dim3 block, void (*body)(void*), void* context);

// Switches to the next fiber of the block; the emulated __syncthreads().
void SyncThreads();

// The first error since the last call ("" if none), then clears it.
std::string TakeLastError();
void RecordError(std::string error);

template <typename... KernelArgs, typename... Args>
void Launch(dim3 grid, dim3 block, void (*kernel)(KernelArgs...),
            Args&&... args) {
  struct Context {
    void (*kernel)(KernelArgs...);
    std::tuple<KernelArgs...> args;
  };
  Context context{kernel,
                  std::tuple<KernelArgs...>(static_cast<KernelArgs>(args)...)};
  std::string error = RunGrid(
      grid, block,
      [](void* c) {
        auto* ctx = static_cast<Context*>(c);
        std::apply(ctx->kernel, ctx->args);
      },
      &context);
  if (!error.empty()) RecordError(std::move(error));
}

}  // namespace ps::kernels::cuda_emulation

inline void __syncthreads() { ps::kernels::cuda_emulation::SyncThreads(); }

// Fibers switch only at __syncthreads and blocks run one at a time, so a
// plain read-modify-write is atomic here.
inline float atomicAdd(float* address, float value) {
  const float old = *address;
  *address = old + value;
  return old;
}

#define PS_LAUNCH(kernel, grid, block, stream, ...)                       \
  ((void)(stream), ::ps::kernels::cuda_emulation::Launch((grid), (block), \
                                                         kernel, __VA_ARGS__))

#endif  // PS_KERNELS_CUDA_EMULATION_H_
