#ifndef PS_KERNELS_HOST_MEMORY_H_
#define PS_KERNELS_HOST_MEMORY_H_

#include <memory>

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

namespace ps::kernels {

// 256-byte aligned host memory (aligned_alloc), for backends that compute on
// the host. RESOURCE_EXHAUSTED when the allocation fails.
std::unique_ptr<RawAllocator> NewAlignedHostAllocator();

// The memory half of a backend whose "device" memory is host memory (the CPU
// backend and the test-only CUDA emulation): aligned host blocks through a
// caching allocator, and copies that are plain memmoves. Subclasses add the
// ops.
class HostMemoryBackend : public Backend {
 protected:
  explicit HostMemoryBackend(std::shared_ptr<CachingAllocator> allocator)
      : allocator_(std::move(allocator)) {}

  absl::StatusOr<DeviceBuffer> DoAllocate(int64_t bytes) override;
  absl::Status DoCopyToDevice(const void* host, void* device,
                              int64_t bytes) override;
  absl::Status DoCopyToHost(const void* device, void* host,
                            int64_t bytes) override;
  absl::Status DoCopyOnDevice(const void* src, void* dst,
                              int64_t bytes) override;

 private:
  std::shared_ptr<CachingAllocator> allocator_;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_HOST_MEMORY_H_
