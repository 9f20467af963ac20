// Makes Debian's absl::Mutex visible to ThreadSanitizer. The system Abseil
// is built without -fsanitize=thread, so its Mutex carries no TSan
// annotations and every field guarded by one looks racy. Preloaded into
// TSan test processes (LD_PRELOAD: tools/sanitizers/tsan_preload.sh builds
// it, the TSan line of tools/test.sh uses it), this library interposes the
// out-of-line Mutex and CondVar entry points, calls the real ones (dlsym
// RTLD_NEXT), and tells TSan the happens-before edges: acquire after a lock
// is taken, release before it is given up (also around Await and CondVar
// waits, which give the lock up and take it again). Readers are treated like
// writers for these edges, which can only hide reader-reader pairs (never
// races).
//
// Conditions need one more edge. absl evaluates a waiter's Condition inside
// the Mutex calls, in whichever thread holds the lock at that moment: the
// waiter itself (in Await, after the release edge above) or the thread that
// is giving the lock up (in Unlock, also after it). The waiter then returns
// and reuses what its Condition read (its locals), and the others write what
// they read. So Condition::Eval is interposed too: the Mutex entry points
// note in a thread-local which Mutex the thread is inside, and Eval acquires
// that Mutex's edge before evaluating and releases it after, as the holder
// of the lock that it is at that moment.
//
// Build: g++ -std=c++20 -O1 -fPIC -shared absl_mutex_tsan.cc -o X.so -ldl
// (not instrumented itself; __tsan_acquire/__tsan_release come from the
// TSan runtime of the process).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_mutex_tsan: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

void Acquire(const void* mu) {
  if (__tsan_acquire != nullptr) __tsan_acquire(const_cast<void*>(mu));
}
void Release(const void* mu) {
  if (__tsan_release != nullptr) __tsan_release(const_cast<void*>(mu));
}

#define PS_REAL(var, type, mangled) static const auto var = Real<type>(mangled)

// The Mutex whose entry point this thread is in (for Condition::Eval).
thread_local const void* tl_mutex = nullptr;

class InMutex {
 public:
  explicit InMutex(const void* mu) : previous_(tl_mutex) { tl_mutex = mu; }
  ~InMutex() { tl_mutex = previous_; }
  InMutex(const InMutex&) = delete;
  InMutex& operator=(const InMutex&) = delete;

 private:
  const void* previous_;
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  PS_REAL(f, void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  InMutex in(this);
  f(this);
  Acquire(this);
}
void Mutex::ReaderLock() {
  PS_REAL(f, void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  InMutex in(this);
  f(this);
  Acquire(this);
}
void Mutex::Unlock() {
  PS_REAL(f, void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  InMutex in(this);
  Release(this);
  f(this);
}
void Mutex::ReaderUnlock() {
  PS_REAL(f, void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  InMutex in(this);
  Release(this);
  f(this);
}
bool Mutex::TryLock() {
  PS_REAL(f, bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  InMutex in(this);
  const bool ok = f(this);
  if (ok) Acquire(this);
  return ok;
}
bool Mutex::ReaderTryLock() {
  PS_REAL(f, bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  InMutex in(this);
  const bool ok = f(this);
  if (ok) Acquire(this);
  return ok;
}
void Mutex::LockWhen(const Condition& c) {
  PS_REAL(f, void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  InMutex in(this);
  f(this, c);
  Acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& c) {
  PS_REAL(f, void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  InMutex in(this);
  f(this, c);
  Acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& c, absl::Duration t) {
  PS_REAL(f, bool (*)(Mutex*, const Condition&, absl::Duration),
          "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE");
  InMutex in(this);
  const bool r = f(this, c, t);
  Acquire(this);
  return r;
}
bool Mutex::LockWhenWithDeadline(const Condition& c, absl::Time t) {
  PS_REAL(f, bool (*)(Mutex*, const Condition&, absl::Time),
          "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE");
  InMutex in(this);
  const bool r = f(this, c, t);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& c, absl::Duration t) {
  PS_REAL(f, bool (*)(Mutex*, const Condition&, absl::Duration),
          "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_"
          "9ConditionENS0_8DurationE");
  InMutex in(this);
  const bool r = f(this, c, t);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& c, absl::Time t) {
  PS_REAL(f, bool (*)(Mutex*, const Condition&, absl::Time),
          "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_"
          "9ConditionENS0_4TimeE");
  InMutex in(this);
  const bool r = f(this, c, t);
  Acquire(this);
  return r;
}
void Mutex::Await(const Condition& c) {
  PS_REAL(f, void (*)(Mutex*, const Condition&),
          "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  InMutex in(this);
  Release(this);
  f(this, c);
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& c, absl::Duration t) {
  PS_REAL(f, bool (*)(Mutex*, const Condition&, absl::Duration),
          "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE");
  InMutex in(this);
  Release(this);
  const bool r = f(this, c, t);
  Acquire(this);
  return r;
}
bool Mutex::AwaitWithDeadline(const Condition& c, absl::Time t) {
  PS_REAL(f, bool (*)(Mutex*, const Condition&, absl::Time),
          "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE");
  InMutex in(this);
  Release(this);
  const bool r = f(this, c, t);
  Acquire(this);
  return r;
}

bool Condition::Eval() const {
  PS_REAL(f, bool (*)(const Condition*), "_ZNK4absl7debian39Condition4EvalEv");
  const void* mu = tl_mutex;
  if (mu != nullptr) Acquire(mu);
  const bool r = f(this);
  if (mu != nullptr) Release(mu);
  return r;
}

void CondVar::Wait(Mutex* mu) {
  PS_REAL(f, void (*)(CondVar*, Mutex*),
          "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  InMutex in(mu);
  Release(mu);
  f(this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration t) {
  PS_REAL(f, bool (*)(CondVar*, Mutex*, absl::Duration),
          "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_"
          "8DurationE");
  InMutex in(mu);
  Release(mu);
  const bool r = f(this, mu, t);
  Acquire(mu);
  return r;
}
bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time t) {
  PS_REAL(f, bool (*)(CondVar*, Mutex*, absl::Time),
          "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  InMutex in(mu);
  Release(mu);
  const bool r = f(this, mu, t);
  Acquire(mu);
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl
