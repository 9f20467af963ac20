#ifndef PS_KERNELS_HOST_MEMORY_H_
#define PS_KERNELS_HOST_MEMORY_H_

#include <memory>

#include "kernels/caching_allocator.h"

namespace ps::kernels {

// 256-byte aligned host memory (aligned_alloc), for backends that compute on
// the host. RESOURCE_EXHAUSTED when the allocation fails.
std::unique_ptr<RawAllocator> NewAlignedHostAllocator();

}  // namespace ps::kernels

#endif  // PS_KERNELS_HOST_MEMORY_H_
