#include "kernels/cuda_emulation.h"

#include <ucontext.h>

#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps::kernels::cuda_emulation {
namespace {

// Kernels here use little stack; 64 KiB per fiber is plenty.
constexpr size_t kFiberStackBytes = 64 * 1024;

enum class FiberState { kRunnable, kAtBarrier, kDone };

struct Fiber {
  ucontext_t context;
  FiberState state = FiberState::kRunnable;
};

// The running grid. Only touched under LaunchMutex().
struct Scheduler {
  ucontext_t main;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;
  int current = 0;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
};

Scheduler& GetScheduler() {
  static Scheduler* scheduler = new Scheduler();
  return *scheduler;
}

std::mutex& LaunchMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

std::mutex& ErrorMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

std::string& LastError() {
  static std::string* error = new std::string();
  return *error;
}

void FiberEntry() {
  Scheduler& s = GetScheduler();
  s.body(s.context);
  s.fibers[s.current].state = FiberState::kDone;
  // Returning resumes uc_link, the scheduler.
}

void SetThreadIndex(int linear, dim3 block) {
  threadIdx = dim3(linear % block.x, (linear / block.x) % block.y,
                   linear / (block.x * block.y));
}

}  // namespace

void SyncThreads() {
  Scheduler& s = GetScheduler();
  Fiber& fiber = s.fibers[s.current];
  fiber.state = FiberState::kAtBarrier;
  swapcontext(&fiber.context, &s.main);
}

std::string RunGrid(dim3 grid, dim3 block, void (*body)(void*), void* context) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 ||
      block.z > 64) {
    return absl::StrCat("invalid configuration argument: block (", block.x,
                        ", ", block.y, ", ", block.z, ")");
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu ||
      grid.y > 65535 || grid.z > 65535) {
    return absl::StrCat("invalid configuration argument: grid (", grid.x, ", ",
                        grid.y, ", ", grid.z, ")");
  }
  std::lock_guard<std::mutex> lock(LaunchMutex());
  Scheduler& s = GetScheduler();
  s.body = body;
  s.context = context;
  s.fibers.resize(threads);
  while (s.stacks.size() < threads) {
    s.stacks.push_back(std::make_unique<char[]>(kFiberStackBytes));
  }
  blockDim = block;
  gridDim = grid;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        for (uint64_t t = 0; t < threads; ++t) {
          Fiber& f = s.fibers[t];
          f.state = FiberState::kRunnable;
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = s.stacks[t].get();
          f.context.uc_stack.ss_size = kFiberStackBytes;
          f.context.uc_link = &s.main;
          makecontext(&f.context, &FiberEntry, 0);
        }
        // One barrier phase per round: run every live thread until it waits
        // at the barrier or finishes. Odd blocks run their threads in reverse
        // order, so a missing barrier between a write and another thread's
        // read shows whichever thread comes first.
        const bool reverse = ((bx + by + bz) & 1u) != 0;
        while (true) {
          int done = 0;
          int waiting = 0;
          for (uint64_t i = 0; i < threads; ++i) {
            const uint64_t t = reverse ? threads - 1 - i : i;
            Fiber& f = s.fibers[t];
            if (f.state == FiberState::kDone) {
              ++done;
              continue;
            }
            f.state = FiberState::kRunnable;
            s.current = static_cast<int>(t);
            SetThreadIndex(static_cast<int>(t), block);
            swapcontext(&s.main, &f.context);
            if (f.state == FiberState::kDone) {
              ++done;
            } else {
              ++waiting;
            }
          }
          if (waiting == 0) break;
          if (done > 0) {
            // On a GPU this is undefined behaviour (a hang or garbage).
            for (uint64_t t = 0; t < threads; ++t) {
              // Let the waiting fibers finish so their stacks are unwound.
              while (s.fibers[t].state == FiberState::kAtBarrier) {
                s.fibers[t].state = FiberState::kRunnable;
                s.current = static_cast<int>(t);
                SetThreadIndex(static_cast<int>(t), block);
                swapcontext(&s.main, &s.fibers[t].context);
              }
            }
            return absl::StrCat("__syncthreads divergence in block (", bx, ", ",
                                by, ", ", bz, "): ", done,
                                " threads exited while ", waiting,
                                " waited at a barrier");
          }
        }
      }
    }
  }
  return "";
}

void RecordError(std::string error) {
  std::lock_guard<std::mutex> lock(ErrorMutex());
  if (LastError().empty()) LastError() = std::move(error);
}

std::string TakeLastError() {
  std::lock_guard<std::mutex> lock(ErrorMutex());
  return std::exchange(LastError(), std::string());
}

}  // namespace ps::kernels::cuda_emulation
