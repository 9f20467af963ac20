#include "common/process.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace ps {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

bool TuneMallocForLargeMessages() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;  // the sanitizer's allocator ignores mallopt
#else
  if (const char* v = std::getenv("PS_MALLOC_TUNING");
      v != nullptr && std::strcmp(v, "0") == 0) {
    return false;
  }
  // mallopt returns 1 on success. Setting either threshold also switches
  // off glibc's dynamic adjustment of both.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  return mmap_ok && trim_ok;
#endif
}

}  // namespace ps
