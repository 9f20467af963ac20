#include "common/wire/payload_codec.h"

#include <grpc/slice.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "kernels/cast_math.h"

namespace ps {

int DTypeSize(DType dtype) {
  switch (dtype) {
    case DTYPE_UNSPECIFIED:
    case FLOAT32:
      return 4;
    case FLOAT16:
    case BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

absl::Status WidenToFloat(DType dtype, absl::string_view src,
                          absl::Span<float> dst) {
  const int size = DTypeSize(dtype);
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported payload dtype ", static_cast<int>(dtype)));
  }
  if (src.size() != dst.size() * static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload holds ", src.size(), " bytes, expected ",
                     dst.size(), " elements of ", DType_Name(dtype), " (",
                     dst.size() * size, " bytes)"));
  }
  const size_t n = dst.size();
  const char* s = src.data();
  float* __restrict d = dst.data();
  if (size == 4) {
    if (n > 0) std::memcpy(d, s, n * 4);
  } else if (dtype == BFLOAT16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, s + 2 * i, 2);
      d[i] = kernels::Bf16BitsToFloat(b);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      d[i] = kernels::HalfBitsToFloat(h);
    }
  }
  return absl::OkStatus();
}

void NarrowFromFloat(DType dtype, absl::Span<const float> src, char* dst) {
  const size_t n = src.size();
  if (DTypeSize(dtype) == 4) {
    if (n > 0) std::memcpy(dst, src.data(), n * 4);
  } else if (dtype == BFLOAT16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b = kernels::FloatToBf16Bits(src[i]);
      std::memcpy(dst + 2 * i, &b, 2);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = kernels::FloatToHalfBits(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
}

}  // namespace ps

namespace ps {
namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

constexpr int kChunkIdField = 1;
constexpr int kDTypeField = 2;
constexpr int kNumElementsField = 3;
constexpr int kIndicesField = 4;
constexpr int kDataField = 15;

// The fields of ChunkPayload before `data`, as protobuf writes them (proto3:
// zero values are omitted).
void PutChunkHeader(std::string* out, const ChunkOut& c) {
  if (c.chunk_id != 0) {
    PutVarint(out, kChunkIdField << 3);
    PutVarint(out, static_cast<uint64_t>(c.chunk_id));
  }
  if (c.dtype != 0) {
    PutVarint(out, kDTypeField << 3);
    PutVarint(out, static_cast<uint64_t>(static_cast<int64_t>(c.dtype)));
  }
  if (c.num_elements != 0) {
    PutVarint(out, kNumElementsField << 3);
    PutVarint(out, static_cast<uint64_t>(c.num_elements));
  }
}

void DestroyNothing(void*) {}

// Sequential reader over a list of slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    for (const grpc::Slice& s : slices_) remaining_ += s.size();
    Normalize();
  }
  size_t remaining() const { return remaining_; }

  bool ReadByte(uint8_t* b) {
    if (remaining_ == 0) return false;
    *b = slices_[index_].begin()[offset_];
    Advance(1);
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Copies n bytes to `out` (appending).
  bool Append(size_t n, std::string* out) {
    if (n > remaining_) return false;
    while (n > 0) {
      const size_t take = std::min(n, slices_[index_].size() - offset_);
      out->append(
          reinterpret_cast<const char*>(slices_[index_].begin()) + offset_,
          take);
      Advance(take);
      n -= take;
    }
    return true;
  }
  // Views of the next n bytes, one per slice they touch.
  bool Segments(size_t n, std::vector<absl::string_view>* out) {
    if (n > remaining_) return false;
    while (n > 0) {
      const size_t take = std::min(n, slices_[index_].size() - offset_);
      out->emplace_back(
          reinterpret_cast<const char*>(slices_[index_].begin()) + offset_,
          take);
      Advance(take);
      n -= take;
    }
    return true;
  }
  // A view of the next n bytes if they lie in one slice.
  bool Contiguous(size_t n, absl::string_view* view) {
    if (n > remaining_) return false;
    if (n == 0) {
      *view = absl::string_view();
      return true;
    }
    if (slices_[index_].size() - offset_ < n) return false;
    *view = absl::string_view(
        reinterpret_cast<const char*>(slices_[index_].begin()) + offset_, n);
    Advance(n);
    return true;
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    remaining_ -= n;
    Normalize();
  }
  void Normalize() {
    while (index_ < slices_.size() && offset_ >= slices_[index_].size()) {
      offset_ = 0;
      ++index_;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t remaining_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed payload message: ", what));
}

// The payload fields of a SparseRows.
constexpr int kTableField = 1;
constexpr int kSparseDTypeField = 2;
constexpr int kNumRowsField = 3;
constexpr int kDimField = 4;
constexpr int kKeysField = 5;
constexpr int kRowsField = 15;

void PutSparseHeader(std::string* out, const SparseRowsOut& s) {
  const std::pair<int, int64_t> fields[] = {
      {kTableField, s.table},
      {kSparseDTypeField, static_cast<int64_t>(s.dtype)},
      {kNumRowsField, s.num_rows},
      {kDimField, s.dim}};
  for (const auto& [field, value] : fields) {
    if (value == 0) continue;
    PutVarint(out, static_cast<uint64_t>(field) << 3);
    PutVarint(out, static_cast<uint64_t>(value));
  }
}

// Size of a length-delimited field of n bytes (proto3 omits an empty one).
size_t BytesFieldSize(int field, size_t n) {
  return n == 0 ? 0 : VarintSize(field << 3 | 2) + VarintSize(n) + n;
}

// Writes a message: every small piece (headers, inlined payloads) into one
// buffer, the large payloads referenced in between as their own slices.
class MessageWriter {
 public:
  MessageWriter(const google::protobuf::MessageLite& header,
                size_t inline_below)
      : small_(header.SerializeAsString()), inline_below_(inline_below) {}

  std::string& small() { return small_; }

  // A non-empty length-delimited field: tag, length, then the bytes, copied
  // when fewer than inline_below, else referenced.
  void PutBytes(int field, const grpc::Slice& data) {
    const size_t n = data.size();
    PutVarint(&small_, static_cast<uint64_t>(field) << 3 | 2);
    PutVarint(&small_, n);
    if (n < inline_below_) {
      small_.append(reinterpret_cast<const char*>(data.begin()), n);
    } else {
      pieces_.push_back({begin_, small_.size(), &data});
      begin_ = small_.size();
    }
  }

  grpc::ByteBuffer Finish();

 private:
  struct Piece {
    size_t begin, end;  // in `small_`, before the payload
    const grpc::Slice* payload;
  };
  std::string small_;
  const size_t inline_below_;
  std::vector<Piece> pieces_;
  size_t begin_ = 0;
};

grpc::ByteBuffer MessageWriter::Finish() {
  char* base = nullptr;
  grpc::Slice all = AllocateSlice(small_.size(), &base);
  if (!small_.empty()) std::memcpy(base, small_.data(), small_.size());
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * pieces_.size() + 1);
  for (const Piece& p : pieces_) {
    if (p.end > p.begin) slices.push_back(all.sub(p.begin, p.end));
    slices.push_back(*p.payload);
  }
  if (small_.size() > begin_) slices.push_back(all.sub(begin_, small_.size()));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// Skips a field of wire type `wire` (0, 1, 2 or 5), its tag read already,
// which must end by `end` (bytes remaining when the enclosing record ends).
bool SkipField(SliceReader& r, int wire, size_t end) {
  std::string skip;
  switch (wire) {
    case 0: {
      uint64_t v;
      return r.ReadVarint(&v);
    }
    case 1:
    case 5:
      return r.remaining() >= end + (wire == 1 ? 8 : 4) &&
             r.Append(wire == 1 ? 8 : 4, &skip);
    case 2: {
      uint64_t n;
      return r.ReadVarint(&n) && r.remaining() >= end &&
             n <= r.remaining() - end && r.Append(n, &skip);
    }
    default:
      return false;
  }
}

// A SparseRows record of `len` bytes: its fields into `view`, its keys' and
// rows' bytes as the segments they span. Checks the sizes against num_rows.
absl::Status ReadSparseRecord(SliceReader& r, uint64_t len,
                              SparseRowsView* view,
                              std::vector<absl::string_view>* keys,
                              std::vector<absl::string_view>* rows) {
  keys->clear();
  rows->clear();
  if (len > r.remaining()) return Malformed("truncated sparse rows");
  const size_t end = r.remaining() - len;
  while (r.remaining() > end) {
    uint64_t t;
    if (!r.ReadVarint(&t)) return Malformed("truncated sparse rows field");
    const int f = static_cast<int>(t >> 3);
    const int w = static_cast<int>(t & 7);
    if (w == 0) {
      uint64_t v;
      if (!r.ReadVarint(&v)) return Malformed("truncated varint");
      // int32 fields as protobuf reads them: the low 32 bits.
      if (f == kTableField) view->table = static_cast<int32_t>(v);
      if (f == kSparseDTypeField)
        view->dtype = static_cast<DType>(static_cast<int32_t>(v));
      if (f == kNumRowsField) view->num_rows = static_cast<int64_t>(v);
      if (f == kDimField) view->dim = static_cast<int32_t>(v);
    } else if (w == 2 && (f == kKeysField || f == kRowsField)) {
      uint64_t n;
      if (!r.ReadVarint(&n) || r.remaining() < end || n > r.remaining() - end) {
        return Malformed("truncated bytes field");
      }
      std::vector<absl::string_view>* out = f == kKeysField ? keys : rows;
      out->clear();  // a repeated occurrence replaces, as in protobuf
      r.Segments(n, out);
    } else if (!SkipField(r, w, end)) {
      return Malformed("bad field in sparse rows");
    }
  }
  if (r.remaining() != end) return Malformed("sparse rows length mismatch");
  size_t key_bytes = 0, row_bytes = 0;
  for (absl::string_view s : *keys) key_bytes += s.size();
  for (absl::string_view s : *rows) row_bytes += s.size();
  const auto where = [&] {
    return absl::StrCat("sparse rows of table ", view->table, ": ");
  };
  if (view->num_rows < 0 || view->dim < 0) {
    return Malformed(absl::StrCat(where(), "num_rows ", view->num_rows,
                                  " and dim ", view->dim,
                                  " must not be negative"));
  }
  if (key_bytes != 0 &&
      (key_bytes % 8 != 0 ||
       key_bytes / 8 != static_cast<uint64_t>(view->num_rows))) {
    return Malformed(absl::StrCat(where(), "keys hold ", key_bytes,
                                  " bytes, not 8 x num_rows (", view->num_rows,
                                  ")"));
  }
  if (row_bytes != 0) {
    const size_t size = static_cast<size_t>(DTypeSize(view->dtype));
    // Compared by division: num_rows x dim may overflow.
    if (size == 0 || view->dim == 0 || row_bytes % size != 0 ||
        (row_bytes / size) % view->dim != 0 ||
        (row_bytes / size) / view->dim !=
            static_cast<uint64_t>(view->num_rows)) {
      return Malformed(absl::StrCat(
          where(), "rows hold ", row_bytes, " bytes, not num_rows (",
          view->num_rows, ") x dim (", view->dim, ") elements of dtype ",
          static_cast<int>(view->dtype)));
    }
  }
  size_t size = row_bytes;
  view->rows =
      rows->size() == 1 ? (*rows)[0] : absl::string_view(nullptr, size);
  return absl::OkStatus();
}

// Keys as an aligned span: in place when they lie aligned in one slice,
// else copied to `scratch` at `offset` (the span is then fixed up by the
// caller if the scratch may still grow).
absl::Span<const uint64_t> AlignedKeys(
    absl::Span<const absl::string_view> segments, size_t num_keys,
    std::vector<uint64_t>* scratch) {
  if (num_keys == 0) return {};
  if (segments.size() == 1 &&
      reinterpret_cast<uintptr_t>(segments[0].data()) % alignof(uint64_t) ==
          0) {
    return absl::MakeConstSpan(
        reinterpret_cast<const uint64_t*>(segments[0].data()), num_keys);
  }
  const size_t offset = scratch->size();
  scratch->resize(offset + num_keys);
  char* dst = reinterpret_cast<char*>(scratch->data() + offset);
  for (absl::string_view s : segments) {
    std::memcpy(dst, s.data(), s.size());
    dst += s.size();
  }
  return absl::MakeConstSpan(scratch->data() + offset, num_keys);
}

// The loop of every decoder: fields.chunks records go to on_chunk(view,
// segments, index segments; view.indices is null when they are not one
// segment), fields.sparse records to on_sparse(view, key segments, row
// segments), every other field to `header`. Templated so that the dense
// path pays for no indirection it did not pay before.
template <typename OnChunk, typename OnSparse>
absl::Status DecodeFields(const grpc::ByteBuffer& buffer, PayloadFields fields,
                          google::protobuf::MessageLite* header,
                          std::vector<grpc::Slice>* slices, OnChunk&& on_chunk,
                          OnSparse&& on_sparse) {
  slices->clear();
  if (!buffer.Dump(slices).ok()) return Malformed("unreadable buffer");
  SliceReader r(*slices);
  std::string rest;  // every other field, re-assembled for protobuf
  std::vector<absl::string_view> segments, key_segments, index_segments;
  while (r.remaining() > 0) {
    uint64_t tag;
    if (!r.ReadVarint(&tag)) return Malformed("truncated tag");
    const int field = static_cast<int>(tag >> 3);
    const int wire = static_cast<int>(tag & 7);
    if (field == 0) return Malformed("field number 0");
    if (field == fields.chunks && wire == 2) {
      uint64_t len;
      if (!r.ReadVarint(&len) || len > r.remaining()) {
        return Malformed("truncated chunk");
      }
      const size_t end = r.remaining() - len;
      ChunkView view;
      segments.clear();
      index_segments.clear();
      while (r.remaining() > end) {
        uint64_t t;
        if (!r.ReadVarint(&t)) return Malformed("truncated chunk field");
        const int f = static_cast<int>(t >> 3);
        const int w = static_cast<int>(t & 7);
        if (w == 0) {
          uint64_t v;
          if (!r.ReadVarint(&v)) return Malformed("truncated varint");
          if (f == kChunkIdField) view.chunk_id = static_cast<int64_t>(v);
          if (f == kDTypeField)
            view.dtype = static_cast<DType>(static_cast<int>(v));
          if (f == kNumElementsField)
            view.num_elements = static_cast<int64_t>(v);
        } else if (w == 2) {
          uint64_t n;
          if (!r.ReadVarint(&n) || r.remaining() < end ||
              n > r.remaining() - end) {
            return Malformed("truncated bytes field");
          }
          if (f == kDataField) {
            segments.clear();
            r.Segments(n, &segments);
          } else if (f == kIndicesField) {
            index_segments.clear();
            r.Segments(n, &index_segments);
          } else {
            std::string skip;
            r.Append(n, &skip);
          }
        } else if (w == 1 || w == 5) {
          std::string skip;
          if (!r.Append(w == 1 ? 8 : 4, &skip)) return Malformed("truncated");
        } else {
          return Malformed("unsupported wire type in chunk");
        }
      }
      if (r.remaining() != end) return Malformed("chunk length mismatch");
      size_t size = 0;
      for (absl::string_view s : segments) size += s.size();
      view.data =
          segments.size() == 1 ? segments[0] : absl::string_view(nullptr, size);
      size = 0;
      for (absl::string_view s : index_segments) size += s.size();
      view.indices = index_segments.size() == 1
                         ? index_segments[0]
                         : absl::string_view(nullptr, size);
      PS_RETURN_IF_ERROR(on_chunk(view, segments, index_segments));
      continue;
    }
    if (fields.sparse > 0 && field == fields.sparse && wire == 2) {
      uint64_t len;
      if (!r.ReadVarint(&len)) return Malformed("truncated sparse rows");
      SparseRowsView view;
      PS_RETURN_IF_ERROR(
          ReadSparseRecord(r, len, &view, &key_segments, &segments));
      PS_RETURN_IF_ERROR(on_sparse(view, key_segments, segments));
      continue;
    }
    PutVarint(&rest, tag);
    switch (wire) {
      case 0: {
        uint64_t v;
        if (!r.ReadVarint(&v)) return Malformed("truncated varint");
        PutVarint(&rest, v);
        break;
      }
      case 1:
      case 5:
        if (!r.Append(wire == 1 ? 8 : 4, &rest)) return Malformed("truncated");
        break;
      case 2: {
        uint64_t n;
        if (!r.ReadVarint(&n) || n > r.remaining()) {
          return Malformed("truncated bytes field");
        }
        PutVarint(&rest, n);
        r.Append(n, &rest);
        break;
      }
      default:
        return Malformed("unsupported wire type");
    }
  }
  if (!header->ParseFromString(rest)) return Malformed("bad header fields");
  return absl::OkStatus();
}

// A chunk's indices in one piece: in place when they are one segment, else
// gathered into `scratch`.
absl::string_view JoinedIndices(const ChunkView& view,
                                absl::Span<const absl::string_view> segments,
                                std::string* scratch) {
  if (view.indices.data() != nullptr || segments.empty()) return view.indices;
  scratch->clear();
  for (absl::string_view s : segments) scratch->append(s.data(), s.size());
  return *scratch;
}

// on_sparse of a message without sparse rows: never called.
struct NoSparse {
  absl::Status operator()(const SparseRowsView&,
                          absl::Span<const absl::string_view>,
                          absl::Span<const absl::string_view>) const {
    return absl::OkStatus();
  }
};

}  // namespace

grpc::Slice BorrowSlice(absl::string_view memory) {
  return grpc::Slice(const_cast<char*>(memory.data()), memory.size(),
                     &DestroyNothing);
}

grpc::Slice ShareSlice(absl::string_view memory,
                       std::shared_ptr<const void> owner) {
  auto* keep = new std::shared_ptr<const void>(std::move(owner));
  return grpc::Slice(
      const_cast<char*>(memory.data()), memory.size(),
      +[](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); },
      keep);
}

grpc::Slice AllocateSlice(size_t size, char** data) {
  // Never inlined: the bytes must not live inside the grpc_slice struct,
  // which is copied on return.
  grpc_slice s = grpc_slice_malloc_large(size);
  *data = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(s));
  return grpc::Slice(s, grpc::Slice::STEAL_REF);
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& header,
                               PayloadFields fields,
                               const std::vector<ChunkOut>& chunks,
                               const std::vector<SparseRowsOut>& sparse,
                               size_t inline_below) {
  MessageWriter w(header, inline_below);
  std::string record;
  for (const ChunkOut& c : chunks) {
    record.clear();
    PutChunkHeader(&record, c);
    const size_t n = c.data.size(), k = c.indices.size();
    PutVarint(&w.small(), static_cast<uint64_t>(fields.chunks) << 3 | 2);
    PutVarint(&w.small(), record.size() + BytesFieldSize(kIndicesField, k) +
                              BytesFieldSize(kDataField, n));
    w.small() += record;
    if (k > 0) w.PutBytes(kIndicesField, c.indices);
    if (n > 0) w.PutBytes(kDataField, c.data);
  }
  for (const SparseRowsOut& s : sparse) {
    record.clear();
    PutSparseHeader(&record, s);
    const size_t k = s.keys.size(), n = s.rows.size();
    PutVarint(&w.small(), static_cast<uint64_t>(fields.sparse) << 3 | 2);
    PutVarint(&w.small(), record.size() + BytesFieldSize(kKeysField, k) +
                              BytesFieldSize(kRowsField, n));
    w.small() += record;
    if (k > 0) w.PutBytes(kKeysField, s.keys);
    if (n > 0) w.PutBytes(kRowsField, s.rows);
  }
  return w.Finish();
}

grpc::ByteBuffer EncodeWithPayloads(const google::protobuf::MessageLite& header,
                                    int chunks_field,
                                    const std::vector<ChunkOut>& chunks,
                                    size_t inline_below) {
  return EncodeMessage(header, {chunks_field, 0}, chunks, {}, inline_below);
}

absl::Status DecodeSegmented(
    const grpc::ByteBuffer& buffer, int chunks_field,
    google::protobuf::MessageLite* header, std::vector<grpc::Slice>* slices,
    const std::function<absl::Status(
        const ChunkView& chunk, absl::Span<const absl::string_view> segments)>&
        on_chunk) {
  std::string scratch;
  return DecodeFields(
      buffer, {chunks_field, 0}, header, slices,
      [&](const ChunkView& view, absl::Span<const absl::string_view> segs,
          absl::Span<const absl::string_view> index_segs) {
        ChunkView v = view;
        v.indices = JoinedIndices(view, index_segs, &scratch);
        return on_chunk(v, segs);
      },
      NoSparse());
}

absl::Status DecodeSegmented(const grpc::ByteBuffer& buffer,
                             PayloadFields fields,
                             google::protobuf::MessageLite* header,
                             std::vector<grpc::Slice>* slices,
                             std::vector<uint64_t>* key_scratch,
                             const PayloadHandlers& handlers) {
  std::string scratch;
  return DecodeFields(
      buffer, fields, header, slices,
      [&](const ChunkView& view, absl::Span<const absl::string_view> segs,
          absl::Span<const absl::string_view> index_segs) {
        if (!handlers.on_chunk) return absl::OkStatus();
        ChunkView v = view;
        v.indices = JoinedIndices(view, index_segs, &scratch);
        return handlers.on_chunk(v, segs);
      },
      [&](const SparseRowsView& view, absl::Span<const absl::string_view> keys,
          absl::Span<const absl::string_view> rows) {
        if (!handlers.on_sparse) return absl::OkStatus();
        key_scratch->clear();
        SparseRowsView v = view;
        if (!keys.empty()) {
          v.keys = AlignedKeys(keys, static_cast<size_t>(view.num_rows),
                               key_scratch);
        }
        return handlers.on_sparse(v, rows);
      });
}

absl::Status DecodeWithPayloads(const grpc::ByteBuffer& buffer,
                                int chunks_field,
                                google::protobuf::MessageLite* header,
                                std::vector<ChunkView>* chunks,
                                std::vector<grpc::Slice>* slices,
                                std::string* arena) {
  chunks->clear();
  arena->clear();
  // Straddling payloads are gathered in the arena; their views are fixed up
  // at the end because the arena may move while it grows.
  std::vector<std::pair<size_t, size_t>> arena_views;    // chunk, offset
  std::vector<std::pair<size_t, size_t>> arena_indices;  // chunk, offset
  PS_RETURN_IF_ERROR(DecodeFields(
      buffer, {chunks_field, 0}, header, slices,
      [&](const ChunkView& view, absl::Span<const absl::string_view> segments,
          absl::Span<const absl::string_view> index_segments) {
        if (segments.size() > 1) {
          arena_views.emplace_back(chunks->size(), arena->size());
          for (absl::string_view s : segments)
            arena->append(s.data(), s.size());
        }
        if (index_segments.size() > 1) {
          arena_indices.emplace_back(chunks->size(), arena->size());
          for (absl::string_view s : index_segments)
            arena->append(s.data(), s.size());
        }
        chunks->push_back(view);
        return absl::OkStatus();
      },
      NoSparse()));
  for (const auto& [index, offset] : arena_views) {
    (*chunks)[index].data =
        absl::string_view(arena->data() + offset, (*chunks)[index].data.size());
  }
  for (const auto& [index, offset] : arena_indices) {
    (*chunks)[index].indices = absl::string_view(
        arena->data() + offset, (*chunks)[index].indices.size());
  }
  return absl::OkStatus();
}

absl::Status DecodeMessage(const grpc::ByteBuffer& buffer, PayloadFields fields,
                           google::protobuf::MessageLite* header,
                           DecodedMessage* out) {
  out->chunks.clear();
  out->sparse.clear();
  out->arena.clear();
  out->key_arena.clear();
  // Views into the arenas are offsets until the end: the arenas may move
  // while they grow.
  constexpr size_t kInPlace = ~size_t{0};
  std::vector<size_t> chunk_offsets, index_offsets, row_offsets, key_offsets;
  const auto gather = [&](absl::Span<const absl::string_view> segments) {
    if (segments.size() <= 1) return kInPlace;
    const size_t offset = out->arena.size();
    for (absl::string_view s : segments) out->arena.append(s.data(), s.size());
    return offset;
  };
  PS_RETURN_IF_ERROR(DecodeFields(
      buffer, fields, header, &out->slices,
      [&](const ChunkView& view, absl::Span<const absl::string_view> segments,
          absl::Span<const absl::string_view> index_segments) {
        chunk_offsets.push_back(gather(segments));
        index_offsets.push_back(gather(index_segments));
        out->chunks.push_back(view);
        return absl::OkStatus();
      },
      [&](const SparseRowsView& view, absl::Span<const absl::string_view> keys,
          absl::Span<const absl::string_view> rows) {
        SparseRowsView v = view;
        const size_t before = out->key_arena.size();
        if (!keys.empty()) {
          v.keys = AlignedKeys(keys, static_cast<size_t>(view.num_rows),
                               &out->key_arena);
        }
        key_offsets.push_back(out->key_arena.size() > before ? before
                                                             : kInPlace);
        row_offsets.push_back(gather(rows));
        out->sparse.push_back(v);
        return absl::OkStatus();
      }));
  for (size_t i = 0; i < out->chunks.size(); ++i) {
    ChunkView& c = out->chunks[i];
    if (chunk_offsets[i] != kInPlace) {
      c.data = absl::string_view(out->arena.data() + chunk_offsets[i],
                                 c.data.size());
    }
    if (index_offsets[i] != kInPlace) {
      c.indices = absl::string_view(out->arena.data() + index_offsets[i],
                                    c.indices.size());
    }
  }
  for (size_t i = 0; i < out->sparse.size(); ++i) {
    SparseRowsView& v = out->sparse[i];
    if (row_offsets[i] != kInPlace) {
      v.rows =
          absl::string_view(out->arena.data() + row_offsets[i], v.rows.size());
    }
    if (key_offsets[i] != kInPlace) {
      v.keys = absl::MakeConstSpan(out->key_arena.data() + key_offsets[i],
                                   v.keys.size());
    }
  }
  return absl::OkStatus();
}

std::vector<SparseRowsView> ViewsOfSparseRows(
    const google::protobuf::RepeatedPtrField<SparseRows>& rows,
    std::deque<std::vector<uint64_t>>* keys) {
  std::vector<SparseRowsView> views;
  for (const SparseRows& r : rows) {
    SparseRowsView v;
    v.table = r.table();
    v.dtype = r.dtype();
    v.num_rows = r.num_rows();
    v.dim = r.dim();
    std::vector<uint64_t>& k = keys->emplace_back(r.keys().size() / 8);
    if (!k.empty()) std::memcpy(k.data(), r.keys().data(), k.size() * 8);
    v.keys = k;
    v.rows = r.rows();
    views.push_back(v);
  }
  return views;
}

}  // namespace ps
