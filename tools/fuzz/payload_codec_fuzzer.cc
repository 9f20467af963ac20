// libFuzzer target: common/payload_codec's decoder on arbitrary bytes, as a
// PushRequest and as a PullResponse, cut into 1 to 4 gRPC slices (payloads
// that straddle slices take a different path). Every decoded chunk is then
// widened to float as the server would do.
#include <grpc/grpc.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/payload_codec.h"
#include "proto/parameter_service.pb.h"

namespace {

// Bounded so that a header claiming a huge element count cannot make the
// fuzzer itself allocate without bound.
constexpr int64_t kMaxWidenElements = int64_t{1} << 20;

void Widen(const std::vector<ps::ChunkView>& chunks) {
  for (const ps::ChunkView& c : chunks) {
    if (c.num_elements < 0 || c.num_elements > kMaxWidenElements) continue;
    std::vector<float> out(static_cast<size_t>(c.num_elements));
    (void)ps::WidenToFloat(c.dtype, c.data, absl::MakeSpan(out));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  grpc_init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int pieces = 1 + (data[0] & 3);
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (int i = 0; i < pieces; ++i) {
    const size_t end = i + 1 == pieces ? n : n * (i + 1) / pieces;
    slices.emplace_back(bytes + at, end - at);
    at = end;
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());

  std::string arena;
  {
    ps::PushRequest header;
    std::vector<ps::ChunkView> chunks;
    std::vector<grpc::Slice> held;
    if (ps::DecodeWithPayloads(buffer, 6, &header, &chunks, &held, &arena)
            .ok()) {
      Widen(chunks);
    }
  }
  {
    ps::PullResponse header;
    std::vector<ps::ChunkView> chunks;
    std::vector<grpc::Slice> held;
    if (ps::DecodeWithPayloads(buffer, 2, &header, &chunks, &held, &arena)
            .ok()) {
      Widen(chunks);
    }
  }
  {
    ps::PushRequest header;
    std::vector<grpc::Slice> held;
    (void)ps::DecodeSegmented(
        buffer, 6, &header, &held,
        [](const ps::ChunkView& chunk,
           absl::Span<const absl::string_view> segments) {
          size_t total = 0;
          for (absl::string_view s : segments) total += s.size();
          if (total != chunk.data.size() && !chunk.data.empty()) {
            return absl::InternalError("segments do not add up");
          }
          return absl::OkStatus();
        });
  }
  return 0;
}
