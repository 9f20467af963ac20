#include "common/platform/process.h"

#include <malloc.h>

#include <cstring>

#include "absl/synchronization/mutex.h"

namespace ps {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

bool MallocTuningEnabled(const char* ps_malloc_tuning) {
  return ps_malloc_tuning == nullptr || std::strcmp(ps_malloc_tuning, "0") != 0;
}

bool TuneMallocForLargeMessages(bool enabled) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)enabled;
  return false;  // the sanitizer's allocator ignores mallopt
#else
  if (!enabled) return false;
  // mallopt returns 1 on success. Setting either threshold also switches
  // off glibc's dynamic adjustment of both.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  return mmap_ok && trim_ok;
#endif
}

bool ReleaseFreedMemory() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  return malloc_trim(0) == 1;
#endif
}

void PrepareDaemonProcess(const char* ps_malloc_tuning) {
  DisableMutexDeadlockDetection();
  TuneMallocForLargeMessages(MallocTuningEnabled(ps_malloc_tuning));
}

}  // namespace ps
