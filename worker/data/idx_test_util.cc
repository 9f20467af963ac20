#include "worker/data/idx_test_util.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps::worker::testing {
namespace {

void AppendBigEndian32(uint32_t value, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

}  // namespace

std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     absl::string_view payload) {
  std::string bytes;
  AppendBigEndian32(magic, &bytes);
  for (uint32_t dim : dims) AppendBigEndian32(dim, &bytes);
  bytes.append(payload.data(), payload.size());
  return bytes;
}

}  // namespace ps::worker::testing
