// Walking raw little-endian fp32 bytes that arrive split over several
// buffers (gRPC receive slices), cut anywhere, even inside a float.
#ifndef PS_SERVER_SHARD_FLOAT_RUNS_H_
#define PS_SERVER_SHARD_FLOAT_RUNS_H_

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Calls fn(p, n) on consecutive runs of n whole floats at p (any alignment),
// in order; a float split between two segments comes alone, from a 4-byte
// copy. Stops early when fn returns false, and then returns false. Trailing
// bytes that do not make a whole float are ignored (callers check lengths).
template <typename Fn>
bool ForEachFloatRun(absl::Span<const absl::string_view> segments, Fn&& fn) {
  char carry[4];
  size_t have = 0;
  for (absl::string_view s : segments) {
    const char* p = s.data();
    size_t len = s.size();
    if (have > 0) {
      const size_t take = std::min(4 - have, len);
      std::memcpy(carry + have, p, take);
      have += take;
      p += take;
      len -= take;
      if (have < 4) continue;
      have = 0;
      if (!fn(static_cast<const char*>(carry), size_t{1})) return false;
    }
    const size_t whole = len / 4;
    if (whole > 0 && !fn(p, whole)) return false;
    have = len - 4 * whole;
    std::memcpy(carry, p + 4 * whole, have);
  }
  return true;
}

}  // namespace ps

#endif  // PS_SERVER_SHARD_FLOAT_RUNS_H_
