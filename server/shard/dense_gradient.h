// The dense table's push validation: a push's chunks checked against the
// job's placement (ids, owner shard, lengths, dtype, NaN/Inf) and turned
// into fp32 gradients, without copying what can be read in place.
#ifndef PS_SERVER_SHARD_DENSE_GRADIENT_H_
#define PS_SERVER_SHARD_DENSE_GRADIENT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/wire/placement.h"
#include "server/shard/push_pull.h"
#include "server/shard/table.h"

namespace ps::server {

// A push's dense gradient (DenseTable::Prepare).
struct DenseGradient final : PreparedGradient {
  // grads[i]: the fp32 gradient of the push's chunk i, or empty where it is
  // still in the receive buffers (split over several, or with a checked
  // apply, any fp32 payload: the optimizer reads and checks it while it
  // applies it).
  std::vector<absl::Span<const float>> grads;
  // The storage of gradients widened from fp16/bf16 (index as grads).
  std::vector<std::vector<float>> widened;
  // The NaN/Inf check of the fp32 payloads is left to the apply.
  bool checked_apply = false;
};

// Where the job's chunks live, for checking a push against them.
struct DenseLayout {
  absl::string_view job_id;
  int shard_index = 0;
  const Placement* placement = nullptr;
  // By chunk id: the chunk's index on this shard; -1: another shard's.
  absl::Span<const int> local_index;
};

// Checks `chunks` and returns their gradient. `checked_apply`: leave the
// NaN/Inf check of fp32 payloads to the apply; `allow_nonfinite`: no
// NaN/Inf check at all. INVALID_ARGUMENT naming the chunk: unknown id,
// another shard's chunk, a chunk twice, a wrong element count, dtype or
// payload length, NaN/Inf.
absl::StatusOr<std::unique_ptr<DenseGradient>> PrepareDenseGradient(
    const DenseLayout& layout, absl::Span<const PushChunk> chunks,
    bool checked_apply, bool allow_nonfinite);

// The message of a gradient refused for NaN/Inf in chunk `chunk_id`.
std::string NonFiniteMessage(int64_t chunk_id);

// Payload bytes of a chunk (contiguous or segmented).
size_t PayloadBytes(const PushChunk& c);

// Gathers a segmented payload into `out` (sized to the payload).
void GatherSegments(const std::vector<absl::string_view>& segments, char* out);

// Whether every float is finite.
bool AllFinite(absl::Span<const float> g);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_DENSE_GRADIENT_H_
