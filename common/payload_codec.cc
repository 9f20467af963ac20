#include "common/payload_codec.h"

#include <grpc/slice.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
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

grpc::ByteBuffer EncodeWithPayloads(const google::protobuf::MessageLite& header,
                                    int chunks_field,
                                    const std::vector<ChunkOut>& chunks,
                                    size_t inline_below) {
  // All small pieces go into one buffer; the slice list then alternates
  // sub-slices of it with the borrowed payloads.
  std::string small = header.SerializeAsString();
  struct Piece {
    size_t begin, end;  // in `small`
    const grpc::Slice* payload;
  };
  std::vector<Piece> pieces;
  size_t begin = 0;
  std::string chunk_header;
  for (const ChunkOut& c : chunks) {
    chunk_header.clear();
    PutChunkHeader(&chunk_header, c);
    const size_t n = c.data.size();
    // proto3 omits an empty bytes field.
    const size_t payload_len =
        chunk_header.size() +
        (n == 0 ? 0 : VarintSize(kDataField << 3 | 2) + VarintSize(n) + n);
    PutVarint(&small, static_cast<uint64_t>(chunks_field) << 3 | 2);
    PutVarint(&small, payload_len);
    small += chunk_header;
    if (n == 0) continue;
    PutVarint(&small, kDataField << 3 | 2);
    PutVarint(&small, n);
    if (n < inline_below) {
      small.append(reinterpret_cast<const char*>(c.data.begin()), n);
    } else {
      pieces.push_back({begin, small.size(), &c.data});
      begin = small.size();
    }
  }
  char* base = nullptr;
  grpc::Slice all = AllocateSlice(small.size(), &base);
  if (!small.empty()) std::memcpy(base, small.data(), small.size());
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * pieces.size() + 1);
  for (const Piece& p : pieces) {
    if (p.end > p.begin) slices.push_back(all.sub(p.begin, p.end));
    slices.push_back(*p.payload);
  }
  if (small.size() > begin) slices.push_back(all.sub(begin, small.size()));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status DecodeSegmented(
    const grpc::ByteBuffer& buffer, int chunks_field,
    google::protobuf::MessageLite* header, std::vector<grpc::Slice>* slices,
    const std::function<absl::Status(
        const ChunkView& chunk, absl::Span<const absl::string_view> segments)>&
        on_chunk) {
  slices->clear();
  if (!buffer.Dump(slices).ok()) return Malformed("unreadable buffer");
  SliceReader r(*slices);
  std::string rest;  // every other field, re-assembled for protobuf
  std::vector<absl::string_view> segments;
  while (r.remaining() > 0) {
    uint64_t tag;
    if (!r.ReadVarint(&tag)) return Malformed("truncated tag");
    const int field = static_cast<int>(tag >> 3);
    const int wire = static_cast<int>(tag & 7);
    if (field == chunks_field && wire == 2) {
      uint64_t len;
      if (!r.ReadVarint(&len) || len > r.remaining()) {
        return Malformed("truncated chunk");
      }
      const size_t end = r.remaining() - len;
      ChunkView view;
      segments.clear();
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
      PS_RETURN_IF_ERROR(on_chunk(view, segments));
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
  std::vector<std::pair<size_t, size_t>> arena_views;  // chunk, offset
  PS_RETURN_IF_ERROR(DecodeSegmented(
      buffer, chunks_field, header, slices,
      [&](const ChunkView& view, absl::Span<const absl::string_view> segments) {
        if (segments.size() > 1) {
          arena_views.emplace_back(chunks->size(), arena->size());
          for (absl::string_view s : segments)
            arena->append(s.data(), s.size());
        }
        chunks->push_back(view);
        return absl::OkStatus();
      }));
  for (const auto& [index, offset] : arena_views) {
    (*chunks)[index].data =
        absl::string_view(arena->data() + offset, (*chunks)[index].data.size());
  }
  return absl::OkStatus();
}

}  // namespace ps
