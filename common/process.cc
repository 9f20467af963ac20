#include "common/process.h"

#include "absl/synchronization/mutex.h"

namespace ps {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace ps
