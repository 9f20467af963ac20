// libFuzzer target: common/payload_codec's decoder on arbitrary bytes, as a
// PushRequest and as a PullResponse, cut into 1 to 4 gRPC slices (payloads
// that straddle slices take a different path). Every decoded chunk is then
// widened to float as the server would do. The same bytes are decoded with
// sparse rows as each of the four messages that carry them, checked against
// that message's rules (common/wire/sparse_rows.h) and their rows widened; the
// segmented decoder's keys and row segments must agree with the record.
#include <grpc/grpc.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/wire/payload_codec.h"
#include "common/wire/sparse_rows.h"
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

void WidenRows(const std::vector<ps::SparseRowsView>& sparse) {
  for (const ps::SparseRowsView& s : sparse) {
    const int size = ps::DTypeSize(s.dtype);
    if (size == 0 || s.rows.size() / size > kMaxWidenElements) continue;
    std::vector<float> out(s.rows.size() / size);
    (void)ps::WidenToFloat(s.dtype, s.rows, absl::MakeSpan(out));
  }
}

// Decodes `buffer` as a Message with sparse rows at `fields`, as the
// receiver would: views, then the message's rules, then widening.
template <typename Message>
void DecodeSparse(const grpc::ByteBuffer& buffer, ps::PayloadFields fields,
                  ps::SparseRowsUse use, ps::DecodedMessage* out,
                  std::vector<uint64_t>* scratch) {
  Message header;
  if (!ps::DecodeMessage(buffer, fields, &header, out).ok()) return;
  Widen(out->chunks);
  for (const ps::SparseRowsView& s : out->sparse) {
    // The decoder's promise: keys and rows sized by num_rows (and dim).
    if (!s.keys.empty() && s.keys.size() != static_cast<size_t>(s.num_rows)) {
      __builtin_trap();
    }
  }
  if (ps::CheckSparseRows(out->sparse, use, 4, scratch).ok()) {
    WidenRows(out->sparse);
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
  {
    ps::DecodedMessage out;
    std::vector<uint64_t> scratch;
    DecodeSparse<ps::PushRequest>(buffer, ps::kPushRequestFields,
                                  ps::SparseRowsUse::kPush, &out, &scratch);
    DecodeSparse<ps::PullRequest>(buffer, ps::kPullRequestFields,
                                  ps::SparseRowsUse::kPullRequest, &out,
                                  &scratch);
    DecodeSparse<ps::PullResponse>(buffer, ps::kPullResponseFields,
                                   ps::SparseRowsUse::kAnswer, &out, &scratch);
    DecodeSparse<ps::PushResponse>(buffer, ps::kPushResponseFields,
                                   ps::SparseRowsUse::kAnswer, &out, &scratch);
  }
  {
    ps::PushRequest header;
    std::vector<grpc::Slice> held;
    std::vector<uint64_t> scratch;
    ps::PayloadHandlers handlers;
    handlers.on_sparse = [](const ps::SparseRowsView& s,
                            absl::Span<const absl::string_view> segments) {
      size_t total = 0;
      for (absl::string_view seg : segments) total += seg.size();
      const size_t size = static_cast<size_t>(ps::DTypeSize(s.dtype));
      if (total != 0 &&
          (size == 0 || s.dim <= 0 ||
           total != static_cast<size_t>(s.num_rows) * s.dim * size)) {
        return absl::InternalError("row segments do not add up");
      }
      if (!s.keys.empty() &&
          reinterpret_cast<uintptr_t>(s.keys.data()) % alignof(uint64_t) != 0) {
        return absl::InternalError("unaligned keys");
      }
      return absl::OkStatus();
    };
    if (ps::DecodeSegmented(buffer, ps::kPushRequestFields, &header, &held,
                            &scratch, handlers)
            .code() == absl::StatusCode::kInternal) {
      __builtin_trap();
    }
  }
  return 0;
}
