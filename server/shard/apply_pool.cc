#include "server/shard/apply_pool.h"

#include <algorithm>
#include <atomic>

namespace ps::server {

// One ParallelFor call. Helpers that take it after every index is claimed
// find nothing to do; `fn` is only called for claimed indices, all of which
// are finished before ParallelFor returns.
struct ApplyPool::Loop {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  absl::Mutex mu;
  int64_t done ABSL_GUARDED_BY(mu) = 0;
};

ApplyPool::ApplyPool(int threads) {
  for (int i = 1; i < threads; ++i) {
    helpers_.emplace_back([this] { HelperMain(); });
  }
}

ApplyPool::~ApplyPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (std::thread& t : helpers_) t.join();
}

void ApplyPool::Work(Loop& loop) {
  int64_t did = 0;
  for (int64_t i = loop.next.fetch_add(1); i < loop.n;
       i = loop.next.fetch_add(1)) {
    (*loop.fn)(i);
    ++did;
  }
  if (did > 0) {
    absl::MutexLock l(&loop.mu);
    loop.done += did;
  }
}

void ApplyPool::HelperMain() {
  for (;;) {
    std::shared_ptr<Loop> loop;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](ApplyPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stop_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      loop = std::move(queue_.front());
      queue_.pop_front();
    }
    Work(*loop);
  }
}

void ApplyPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || helpers_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto loop = std::make_shared<Loop>();
  loop->fn = &fn;
  loop->n = n;
  const int64_t asked =
      std::min<int64_t>(static_cast<int64_t>(helpers_.size()), n - 1);
  {
    absl::MutexLock l(&mu_);
    for (int64_t h = 0; h < asked; ++h) queue_.push_back(loop);
  }
  Work(*loop);
  absl::MutexLock l(&loop->mu);
  loop->mu.Await(absl::Condition(
      +[](Loop* p)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return p->done == p->n; },
      loop.get()));
}

}  // namespace ps::server
