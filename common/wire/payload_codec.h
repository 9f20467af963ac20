// Tensor payloads on the wire: dtype conversion (fp32 on the servers; fp16 and
// bf16 accepted and widened) and the zero-copy codec of the data plane.
//
// The codec writes PushRequest / PullResponse / PushResponse (and the keys of
// a PullRequest) as valid protobuf (so the proto contract in
// proto/parameter_service.proto stays true for any client), but emits every
// ChunkPayload.data and SparseRows.rows (field 15, last on purpose) and
// SparseRows.keys as their own grpc::Slice that points at caller memory
// instead of copying them through a protobuf `bytes` field; the decoder finds
// the payloads inside the received grpc::ByteBuffer slices without copying
// them through std::string. Messages written by plain protobuf decode too.
#ifndef PS_COMMON_WIRE_PAYLOAD_CODEC_H_
#define PS_COMMON_WIRE_PAYLOAD_CODEC_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <deque>
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
// `indices` non-empty: a sparse update of the chunk (ChunkPayload.indices),
// num_elements little-endian uint32 offsets, sent like `data` (copied when
// small, else referenced).
struct ChunkOut {
  int64_t chunk_id = 0;
  DType dtype = FLOAT32;
  int64_t num_elements = 0;
  grpc::Slice data;
  grpc::Slice indices = grpc::Slice();
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
// decoder's arena when the payload straddled slices. `indices`: the raw
// bytes of ChunkPayload.indices (empty for a dense chunk), found the same
// way; the decoder does not check them (the receiver does).
struct ChunkView {
  int64_t chunk_id = 0;
  DType dtype = DTYPE_UNSPECIFIED;
  int64_t num_elements = 0;
  absl::string_view data;
  absl::string_view indices;
};

// The lowest level of decoding: hands each payload to `on_chunk` as the
// slice segments it spans (their concatenation is the payload), copying
// nothing but indices that straddle slices (the view's `indices` are then
// valid during its call only). `header` receives every field but
// `chunks_field`; `slices` keeps the segments alive. An error from `on_chunk`
// stops decoding and is returned.
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

// ---------------------------------------------------------------------------
// Messages with sparse rows (and dense chunks).

// Where a message keeps its payloads: the field numbers of its repeated
// ChunkPayload and SparseRows fields (0: the message has none).
struct PayloadFields {
  int chunks = 0;
  int sparse = 0;
};
inline constexpr PayloadFields kPushRequestFields{6, 10};
inline constexpr PayloadFields kPullRequestFields{0, 8};
inline constexpr PayloadFields kPullResponseFields{2, 4};
inline constexpr PayloadFields kPushResponseFields{7, 8};  // pulled_*

// Sparse rows to send (SparseRows in proto/parameter_service.proto). `keys`
// is num_rows little-endian uint64 or empty (answers carry none); `rows` is
// num_rows * dim `dtype` elements or empty (pull requests carry none).
struct SparseRowsOut {
  int32_t table = 0;
  DType dtype = FLOAT32;
  int64_t num_rows = 0;
  int32_t dim = 0;
  grpc::Slice keys;
  grpc::Slice rows;
};

// EncodeWithPayloads with sparse rows as well: serializes `header` (whose own
// payload fields must be empty), then `chunks` as field fields.chunks and
// `sparse` as field fields.sparse. Keys and rows of at least `inline_below`
// bytes are referenced as their own slices, never copied (4096 keys are
// 32 KiB); smaller ones are copied next to the headers. `chunks` must be
// empty when fields.chunks is 0, `sparse` when fields.sparse is 0.
grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& header,
                               PayloadFields fields,
                               const std::vector<ChunkOut>& chunks,
                               const std::vector<SparseRowsOut>& sparse,
                               size_t inline_below = 4096);

// One decoded SparseRows. `keys` is aligned for uint64_t and points into the
// received slices, or into a copy when they straddled slices or were not
// aligned (keys are 8 bytes a row, rows 4 x dim or 2 x dim: copying keys
// costs little next to the rows); `rows` is as ChunkView::data. The decoder
// checks that keys are empty or num_rows of them, and rows empty or
// num_rows x dim elements of a known dtype (INVALID_ARGUMENT otherwise);
// whether a message needs keys or rows is the receiver's to check.
struct SparseRowsView {
  int32_t table = 0;
  DType dtype = DTYPE_UNSPECIFIED;
  int64_t num_rows = 0;
  int32_t dim = 0;
  absl::Span<const uint64_t> keys;
  absl::string_view rows;
};

// Views of SparseRows that protobuf parsed (a then_pull's keys, a replica
// entry's rows), their keys copied into `keys` so that they are aligned;
// the rows point into `rows`, which must outlive the views.
std::vector<SparseRowsView> ViewsOfSparseRows(
    const google::protobuf::RepeatedPtrField<SparseRows>& rows,
    std::deque<std::vector<uint64_t>>* keys);

// What DecodeMessage fills: the views and what keeps them valid. Reuse one
// between calls so that its buffers are not allocated afresh; a call
// replaces everything it held.
struct DecodedMessage {
  std::vector<ChunkView> chunks;
  std::vector<SparseRowsView> sparse;
  std::vector<grpc::Slice> slices;  // the received slices the views point in
  std::string arena;                // payloads that straddled slices
  std::vector<uint64_t> key_arena;  // keys that straddled or were unaligned
};

// DecodeWithPayloads with sparse rows as well: every field but the payload
// fields is parsed into `header`; each ChunkPayload and SparseRows is
// returned as a view, valid while `out` lives and is not modified. Keys on
// little-endian hosts only (as everything here). INVALID_ARGUMENT on
// malformed input.
absl::Status DecodeMessage(const grpc::ByteBuffer& buffer, PayloadFields fields,
                           google::protobuf::MessageLite* header,
                           DecodedMessage* out);

// The lowest level, as DecodeSegmented: each payload goes to its handler as
// the slice segments it spans, copying nothing but keys that straddle slices
// or are unaligned (into `key_scratch`; a view's keys are valid during its
// call only) and chunk indices that straddle slices (likewise). A
// SparseRowsView's `rows` is empty with data() == nullptr when its rows span
// several segments. A handler may be empty when its field is 0 (or to skip the
// payloads). An error from a handler stops decoding and is returned.
struct PayloadHandlers {
  std::function<absl::Status(const ChunkView& chunk,
                             absl::Span<const absl::string_view> segments)>
      on_chunk;
  std::function<absl::Status(const SparseRowsView& rows,
                             absl::Span<const absl::string_view> row_segments)>
      on_sparse;
};
absl::Status DecodeSegmented(const grpc::ByteBuffer& buffer,
                             PayloadFields fields,
                             google::protobuf::MessageLite* header,
                             std::vector<grpc::Slice>* slices,
                             std::vector<uint64_t>* key_scratch,
                             const PayloadHandlers& handlers);

}  // namespace ps

#endif  // PS_COMMON_WIRE_PAYLOAD_CODEC_H_
