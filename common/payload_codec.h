// Tensor payloads on the wire: dtype conversion (fp32 on the servers; fp16 and
// bf16 accepted and widened) and the zero-copy codec of the data plane.
//
// The codec writes PushRequest / PullResponse as valid protobuf (so
// the proto contract in proto/parameter_service.proto stays true for any
// client), but emits every ChunkPayload.data (field 15, last on purpose) as
// its own grpc::Slice that points at tensor memory instead of copying it
// through a protobuf `bytes` field; the decoder finds the payloads inside the
// received grpc::ByteBuffer slices without copying them through std::string.
#ifndef PS_COMMON_PAYLOAD_CODEC_H_
#define PS_COMMON_PAYLOAD_CODEC_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/parameter_service.pb.h"

namespace ps {

// Bytes per element of `dtype` on the wire (DTYPE_UNSPECIFIED is FLOAT32);
// 0 for a value this build does not know.
int DTypeSize(DType dtype);

// Widens little-endian `dtype` elements in `src` into `dst`. INVALID_ARGUMENT
// if src is not exactly dst.size() elements or the dtype is unknown.
absl::Status WidenToFloat(DType dtype, absl::string_view src,
                          absl::Span<float> dst);

// Narrows `src` to `dtype` (round to nearest even) into `dst`, which holds
// src.size() * DTypeSize(dtype) bytes. The element conversions are the
// kernels' (kernels/cast_math.h), so a payload and a device cast agree to
// the bit.
void NarrowFromFloat(DType dtype, absl::Span<const float> src, char* dst);

// A payload to send. `data` is the wire bytes (num_elements x dtype).
struct ChunkOut {
  int64_t chunk_id = 0;
  DType dtype = FLOAT32;
  int64_t num_elements = 0;
  grpc::Slice data;
};

// A slice over `memory` without copying it: the memory must stay alive and
// unchanged until the call that sends it has completed.
grpc::Slice BorrowSlice(absl::string_view memory);

// A slice over `memory` without copying it, keeping `owner` (which must keep
// the memory alive and unchanged) until gRPC releases the slice.
grpc::Slice ShareSlice(absl::string_view memory,
                       std::shared_ptr<const void> owner);

// A fresh gRPC-owned slice of `size` bytes; `*data` points at its bytes.
grpc::Slice AllocateSlice(size_t size, char** data);

// Serializes `header` (whose own chunks field must be empty) and then
// `chunks` as repeated ChunkPayload field number `chunks_field` (6 in
// PushRequest, 2 in PullResponse): a valid protobuf encoding of the message
// with the chunks added (only the field order differs from protobuf's own).
// Payloads of at least `inline_below` bytes are referenced as their own slices,
// never copied; smaller ones are copied next to the headers.
grpc::ByteBuffer EncodeWithPayloads(const google::protobuf::MessageLite& header,
                                    int chunks_field,
                                    const std::vector<ChunkOut>& chunks,
                                    size_t inline_below = 4096);

// One decoded payload: `data` points into the received slices, or into the
// decoder's arena when the payload straddled slices.
struct ChunkView {
  int64_t chunk_id = 0;
  DType dtype = DTYPE_UNSPECIFIED;
  int64_t num_elements = 0;
  absl::string_view data;
};

// The lowest level of decoding: hands each payload to `on_chunk` as the
// slice segments it spans (their concatenation is the payload), copying
// nothing. `header` receives every field but `chunks_field`; `slices` keeps
// the segments alive. An error from `on_chunk` stops decoding and is
// returned.
absl::Status DecodeSegmented(
    const grpc::ByteBuffer& buffer, int chunks_field,
    google::protobuf::MessageLite* header, std::vector<grpc::Slice>* slices,
    const std::function<absl::Status(
        const ChunkView& chunk, absl::Span<const absl::string_view> segments)>&
        on_chunk);

// Reads a message written by EncodeWithPayloads (or by plain protobuf):
// every field but `chunks_field` is parsed into `header`; each ChunkPayload is
// returned as a view. The views stay valid while `slices` (filled here) and
// `arena` live and are not modified; `arena` is reused between calls so that
// straddling payloads do not allocate afresh each time. INVALID_ARGUMENT on
// malformed input.
absl::Status DecodeWithPayloads(const grpc::ByteBuffer& buffer,
                                int chunks_field,
                                google::protobuf::MessageLite* header,
                                std::vector<ChunkView>* chunks,
                                std::vector<grpc::Slice>* slices,
                                std::string* arena);

}  // namespace ps

#endif  // PS_COMMON_PAYLOAD_CODEC_H_
