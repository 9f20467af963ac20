// A fixed set of threads that help one caller at a time, or several, run
// an index loop in parallel: the BSP step close applies a shard's chunks
// with it, so a big model's update uses more than one core.
#ifndef PS_SERVER_SHARD_APPLY_POOL_H_
#define PS_SERVER_SHARD_APPLY_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps::server {

class ApplyPool {
 public:
  // `threads` >= 1 runs loops on the caller's thread and threads - 1
  // helpers; 1: on the caller's thread only.
  explicit ApplyPool(int threads);
  ~ApplyPool();
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs fn(i) for every i in [0, n) exactly once, spread over the caller
  // and the idle helpers, and returns when all have returned. Thread-safe;
  // fn must not call ParallelFor.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  struct Loop;
  static void Work(Loop& loop);
  void HelperMain();

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Loop>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_APPLY_POOL_H_
