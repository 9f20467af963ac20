#include "kernels/host_memory.h"

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps::kernels {
namespace {

class AlignedHostAllocator final : public RawAllocator {
 public:
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    constexpr int64_t kAlign = 256;
    const int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* ptr = std::aligned_alloc(kAlign, static_cast<size_t>(rounded));
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", bytes, " bytes failed"));
    }
    return ptr;
  }
  void Free(void* ptr) override { std::free(ptr); }
};

}  // namespace

std::unique_ptr<RawAllocator> NewAlignedHostAllocator() {
  return std::make_unique<AlignedHostAllocator>();
}

absl::StatusOr<DeviceBuffer> HostMemoryBackend::DoAllocate(int64_t bytes) {
  absl::StatusOr<CachingAllocator::Block> block = allocator_->Allocate(bytes);
  if (!block.ok()) return block.status();
  return DeviceBuffer(allocator_, *block, bytes);
}

absl::Status HostMemoryBackend::DoCopyToDevice(const void* host, void* device,
                                               int64_t bytes) {
  std::memmove(device, host, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostMemoryBackend::DoCopyToHost(const void* device, void* host,
                                             int64_t bytes) {
  std::memmove(host, device, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostMemoryBackend::DoCopyOnDevice(const void* src, void* dst,
                                               int64_t bytes) {
  std::memmove(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

}  // namespace ps::kernels
