// What every daemon and benchmark sets up at the start of main(), before it
// starts threads.
#ifndef PS_COMMON_PLATFORM_PROCESS_H_
#define PS_COMMON_PLATFORM_PROCESS_H_

namespace ps {

// Turns off absl::Mutex's deadlock detection. Debian's Abseil is built
// without NDEBUG, so by default every Mutex::Lock also records the lock
// order in one process-wide graph behind one global spin lock, which all
// threads of a daemon then contend for (a release build of Abseil skips
// it). The tests keep Abseil's default, and the TSan run reports lock-order
// inversions.
void DisableMutexDeadlockDetection();

// Keeps the memory of freed message buffers in the process instead of
// handing it back to the kernel after each message. gRPC receives every
// message into fresh buffers of up to several MB; with glibc's default
// (dynamic) thresholds the heap is trimmed and re-grown around them, and
// every page of every message is faulted in again: about 3,000 page faults
// per 16 MB push+pull step on loopback. Sets M_MMAP_THRESHOLD to 32 MB
// (glibc's largest) and M_TRIM_THRESHOLD to 256 MB, so a process holds on
// to at most that much freed memory at the top of each heap.
//
// Does nothing when `enabled` is false (main() passes
// MallocTuningEnabled(getenv("PS_MALLOC_TUNING")), so that
// PS_MALLOC_TUNING=0 measures without it) or when a sanitizer supplies the
// allocator. Returns whether the thresholds were set.
bool TuneMallocForLargeMessages(bool enabled);

// Hands the freed memory of every heap back to the kernel (glibc's
// malloc_trim(0): the free top of each heap, and the whole free pages
// inside it). A daemon calls it when a large state it held is gone (a
// shard's job torn down), since with TuneMallocForLargeMessages up to
// 256 MB of freed memory would otherwise stay resident per heap. Takes
// milliseconds (it walks every heap); not for a hot path. Returns whether
// memory was released (false under a sanitizer's allocator).
bool ReleaseFreedMemory();

// Whether a value of $PS_MALLOC_TUNING, as main() read it (null when unset),
// asks for TuneMallocForLargeMessages: anything but "0".
bool MallocTuningEnabled(const char* ps_malloc_tuning);

// The prologue of every daemon and benchmark main(), after its flags are
// parsed (and a BLAS user's start-up check, which may restart the process:
// kernels/blas_check_flag.h) and before any thread starts:
// DisableMutexDeadlockDetection, then TuneMallocForLargeMessages as
// $PS_MALLOC_TUNING (`ps_malloc_tuning`, read by main()) says.
void PrepareDaemonProcess(const char* ps_malloc_tuning);

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_PROCESS_H_
