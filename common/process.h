// What every daemon and benchmark sets up at the start of main(), before it
// starts threads.
#ifndef PS_COMMON_PROCESS_H_
#define PS_COMMON_PROCESS_H_

namespace ps {

// Turns off absl::Mutex's deadlock detection. Debian's Abseil is built
// without NDEBUG, so by default every Mutex::Lock also records the lock
// order in one process-wide graph behind one global spin lock, which all
// threads of a daemon then contend for (a release build of Abseil skips
// it). The tests keep Abseil's default, and the TSan run reports lock-order
// inversions.
void DisableMutexDeadlockDetection();

}  // namespace ps

#endif  // PS_COMMON_PROCESS_H_
