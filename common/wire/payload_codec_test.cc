#include "common/wire/payload_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cast_math.h"

namespace ps {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// A buffer holding `bytes` cut into slices of `piece` bytes.
grpc::ByteBuffer Cut(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<float> Ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.5f * i;
  return v;
}

absl::string_view Bytes(const std::vector<float>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(float));
}

PushRequest Header() {
  PushRequest h;
  h.set_job_id("job-7");
  h.set_worker_id(3);
  h.set_seq(12);
  h.set_clock(4);
  h.set_base_version(4);
  h.set_end_of_step(true);
  return h;
}

TEST(PayloadCodec, EncodesExactlyWhatProtobufWrites) {
  // Sizes below and above the inline threshold, and an empty payload.
  const std::vector<std::vector<float>> tensors = {
      Ramp(3, 1), Ramp(5000, 2), {}, Ramp(70000, -3)};
  std::vector<ChunkOut> out;
  PushRequest expected = Header();
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.push_back({static_cast<int64_t>(i), FLOAT32,
                   static_cast<int64_t>(tensors[i].size()),
                   BorrowSlice(Bytes(tensors[i]))});
    ChunkPayload* c = expected.add_chunks();
    c->set_chunk_id(i);
    c->set_dtype(FLOAT32);
    c->set_num_elements(tensors[i].size());
    c->set_data(std::string(Bytes(tensors[i])));
  }
  const grpc::ByteBuffer buffer = EncodeWithPayloads(Header(), 6, out);
  const std::string wire = Flatten(buffer);
  // Plain protobuf reads the same message (the header fields come first on
  // our wire, so the bytes differ only in field order).
  PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(parsed.SerializeAsString() == expected.SerializeAsString())
      << "decoded message differs";
  // The large payloads are referenced, not copied.
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  bool found = false;
  for (const grpc::Slice& s : slices) {
    found |=
        reinterpret_cast<const char*>(s.begin()) == Bytes(tensors[3]).data();
  }
  EXPECT_TRUE(found);
}

struct DecodeCase {
  const char* name;
  size_t piece;  // slice size of the received buffer
};

TEST(PayloadCodec, DecodesWhateverTheSlicing) {
  PushRequest message = Header();
  const std::vector<float> a = Ramp(1000, 1), b = Ramp(7, 9);
  for (const auto* t : {&a, &b}) {
    ChunkPayload* c = message.add_chunks();
    c->set_chunk_id(t == &a ? 0 : 41);
    c->set_dtype(FLOAT32);
    c->set_num_elements(t->size());
    c->set_data(std::string(Bytes(*t)));
  }
  const std::string wire = message.SerializeAsString();
  const std::vector<DecodeCase> cases = {
      {"one_slice", wire.size()}, {"bytes", 1}, {"odd", 37}, {"4k", 4096}};
  std::string arena;
  for (const DecodeCase& c : cases) {
    SCOPED_TRACE(c.name);
    PushRequest header;
    std::vector<ChunkView> chunks;
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(DecodeWithPayloads(Cut(wire, c.piece), 6, &header, &chunks,
                                   &slices, &arena)
                    .ok());
    EXPECT_EQ(header.job_id(), "job-7");
    EXPECT_EQ(header.seq(), 12u);
    EXPECT_TRUE(header.end_of_step());
    EXPECT_EQ(header.chunks_size(), 0);
    ASSERT_EQ(chunks.size(), 2u);
    EXPECT_EQ(chunks[0].chunk_id, 0);
    EXPECT_EQ(chunks[0].num_elements, 1000);
    EXPECT_EQ(chunks[0].data, Bytes(a));
    EXPECT_EQ(chunks[1].chunk_id, 41);
    EXPECT_EQ(chunks[1].dtype, FLOAT32);
    EXPECT_EQ(chunks[1].data, Bytes(b));
  }
}

TEST(PayloadCodec, RejectsMalformedInput) {
  PushRequest message = Header();
  message.add_chunks()->set_data(std::string(100, 'x'));
  const std::string wire = message.SerializeAsString();
  std::string arena;
  for (size_t cut : {wire.size() - 1, wire.size() - 50, size_t{3}}) {
    PushRequest header;
    std::vector<ChunkView> chunks;
    std::vector<grpc::Slice> slices;
    EXPECT_EQ(DecodeWithPayloads(Cut(wire.substr(0, cut), 16), 6, &header,
                                 &chunks, &slices, &arena)
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << "cut at " << cut;
  }
}

TEST(PayloadCodec, HalfPrecisionRoundTrips) {
  const std::vector<float> values = {0.0f,  -0.0f,   1.0f,  -2.5f,   65504.0f,
                                     1e-7f, 3.1415f, 1e-3f, -100.25f};
  for (DType dtype : {FLOAT16, BFLOAT16}) {
    std::string wire(values.size() * 2, '\0');
    NarrowFromFloat(dtype, values, wire.data());
    std::vector<float> back(values.size());
    ASSERT_TRUE(WidenToFloat(dtype, wire, absl::MakeSpan(back)).ok());
    const float rel = dtype == FLOAT16 ? 1e-3f : 8e-3f;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_LE(std::fabs(back[i] - values[i]),
                1e-7f + rel * std::fabs(values[i]))
          << DType_Name(dtype) << " " << values[i] << " -> " << back[i];
    }
  }
  EXPECT_EQ(kernels::FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(kernels::HalfBitsToFloat(0x3c00), 1.0f);
  EXPECT_TRUE(
      std::isinf(kernels::HalfBitsToFloat(kernels::FloatToHalfBits(1e6f))));
  EXPECT_TRUE(std::isnan(
      kernels::HalfBitsToFloat(kernels::FloatToHalfBits(std::nanf("")))));
  std::vector<float> out(2);
  EXPECT_EQ(
      WidenToFloat(FLOAT32, std::string(7, 'x'), absl::MakeSpan(out)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DTypeSize(static_cast<DType>(9)), 0);
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The wire bits at the edges: round to nearest even (ties included), the
// largest half, overflow, subnormals, signed zero, NaN kept a quiet NaN.
TEST(PayloadCodec, NarrowsToTheExpectedBitsAtTheEdges) {
  struct Case {
    DType dtype;
    float value;
    uint16_t bits;
  };
  const Case cases[] = {
      {FLOAT16, 1.0f, 0x3c00},
      {FLOAT16, 1.0f + 0x1p-11f, 0x3c00},  // tie: to the even 1.0
      {FLOAT16, 1.0f + 0x3p-11f, 0x3c02},  // tie: to the even 1 + 2^-9
      {FLOAT16, 65504.0f, 0x7bff},
      {FLOAT16, 65519.99f, 0x7bff},
      {FLOAT16, 65520.0f, 0x7c00},
      {FLOAT16, -std::numeric_limits<float>::infinity(), 0xfc00},
      {FLOAT16, 0x1p-14f, 0x0400},  // smallest normal half
      {FLOAT16, 0x1p-24f, 0x0001},  // smallest subnormal half
      {FLOAT16, 0x1p-25f, 0x0000},  // tie: to the even 0
      {FLOAT16, 0x3p-25f, 0x0002},  // tie: to the even 2 units
      {FLOAT16, -0.0f, 0x8000},
      {FLOAT16, FromBits(0x7f800001u), 0x7e00},  // signalling NaN
      {BFLOAT16, 1.0f + 0x1p-8f, 0x3f80},        // tie: to the even 1.0
      {BFLOAT16, 1.0f + 0x3p-8f, 0x3f82},
      {BFLOAT16, FromBits(0x7f800001u), 0x7fc0},
      {BFLOAT16, -0.0f, 0x8000},
  };
  for (const Case& c : cases) {
    uint16_t bits = 0;
    NarrowFromFloat(c.dtype, {&c.value, 1}, reinterpret_cast<char*>(&bits));
    EXPECT_EQ(bits, c.bits) << DType_Name(c.dtype) << " " << c.value;
    float back = 0;
    ASSERT_TRUE(
        WidenToFloat(c.dtype,
                     absl::string_view(reinterpret_cast<const char*>(&bits), 2),
                     absl::MakeSpan(&back, 1))
            .ok());
    if (std::isnan(c.value)) {
      EXPECT_TRUE(std::isnan(back));
    } else if (bits == 0x7c00 || bits == 0xfc00) {
      EXPECT_TRUE(std::isinf(back));
    } else {
      EXPECT_EQ(std::signbit(back), std::signbit(c.value));
      // Half an ulp: 2^-11 (fp16) or 2^-8 (bf16) relative, 2^-25 absolute.
      const float rel = c.dtype == FLOAT16 ? 0x1p-11f : 0x1p-8f;
      EXPECT_LE(std::fabs(back - c.value), 0x1p-25f + rel * std::fabs(c.value))
          << c.value;
    }
  }
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(PayloadCodec, RoundTripsItsOwnEncoding) {
  const std::vector<std::vector<float>> tensors = {
      Ramp(250, 1), Ramp(5000, 2), {}, Ramp(300, 4), Ramp(20000, -3)};
  for (int64_t first_id : {0, 5, 200, 100000}) {
    std::vector<ChunkOut> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.push_back({first_id + static_cast<int64_t>(i), FLOAT32,
                     static_cast<int64_t>(tensors[i].size()),
                     BorrowSlice(Bytes(tensors[i]))});
    }
    for (bool end_of_step : {false, true}) {
      PushRequest h = Header();
      h.set_end_of_step(end_of_step);
      const grpc::ByteBuffer buffer = EncodeWithPayloads(h, 6, out);
      for (size_t piece : {size_t{1} << 30, size_t{7}, size_t{4096}}) {
        const grpc::ByteBuffer received = Cut(Flatten(buffer), piece);
        PushRequest header;
        std::vector<ChunkView> chunks;
        std::vector<grpc::Slice> slices;
        std::string arena;
        absl::Status s =
            DecodeWithPayloads(received, 6, &header, &chunks, &slices, &arena);
        ASSERT_TRUE(s.ok())
            << s << " first id " << first_id << " piece " << piece;
        EXPECT_EQ(header.end_of_step(), end_of_step);
        ASSERT_EQ(chunks.size(), tensors.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
          EXPECT_EQ(chunks[i].chunk_id, first_id + static_cast<int64_t>(i));
          EXPECT_EQ(chunks[i].data, Bytes(tensors[i]));
        }
      }
    }
  }
  // No chunks at all (an end-of-step marker).
  const grpc::ByteBuffer empty = EncodeWithPayloads(Header(), 6, {});
  PushRequest header;
  std::vector<ChunkView> chunks;
  std::vector<grpc::Slice> slices;
  std::string arena;
  ASSERT_TRUE(
      DecodeWithPayloads(empty, 6, &header, &chunks, &slices, &arena).ok());
  EXPECT_EQ(header.job_id(), "job-7");
  EXPECT_TRUE(chunks.empty());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(PayloadCodec, SharedSliceKeepsItsOwnerUntilReleased) {
  auto owner = std::make_shared<std::vector<float>>(Ramp(64, 0));
  std::weak_ptr<std::vector<float>> weak = owner;
  {
    grpc::Slice s = ShareSlice(Bytes(*owner), owner);
    owner.reset();
    EXPECT_FALSE(weak.expired());
    EXPECT_EQ(s.size(), 64 * sizeof(float));
  }
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// Sparse rows of `dtype`: `n` keys (spread over the 64 bits) and n x dim
// values narrowed to `dtype`.
struct SparseCase {
  SparseCase(int32_t table, DType dtype, int64_t n, int32_t dim)
      : values(Ramp(static_cast<size_t>(n * dim), -7.25f)),
        wire(values.size() * DTypeSize(dtype), '\0') {
    for (int64_t i = 0; i < n; ++i) {
      keys.push_back(0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1));
    }
    NarrowFromFloat(dtype, values, wire.data());
    out.table = table;
    out.dtype = dtype;
    out.num_rows = n;
    out.dim = dim;
  }
  // What to encode, borrowing this case's keys and rows (so built where the
  // case lives, not copied with it).
  SparseRowsOut Out(bool with_keys = true, bool with_rows = true) const {
    SparseRowsOut o = out;
    if (with_keys) o.keys = BorrowSlice(KeyBytes());
    if (with_rows) o.rows = BorrowSlice(wire);
    return o;
  }
  absl::string_view KeyBytes() const {
    return absl::string_view(reinterpret_cast<const char*>(keys.data()),
                             keys.size() * 8);
  }
  void AddTo(google::protobuf::RepeatedPtrField<SparseRows>* field) const {
    SparseRows* s = field->Add();
    s->set_table(out.table);
    s->set_dtype(out.dtype);
    s->set_num_rows(out.num_rows);
    s->set_dim(out.dim);
    s->set_keys(std::string(KeyBytes()));
    s->set_rows(wire);
  }
  void Expect(const SparseRowsView& v) const {
    EXPECT_EQ(v.table, out.table);
    EXPECT_EQ(v.dtype, out.dtype);
    EXPECT_EQ(v.num_rows, out.num_rows);
    EXPECT_EQ(v.dim, out.dim);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(v.keys.data()) % alignof(uint64_t),
              0u);
    EXPECT_TRUE(
        std::equal(v.keys.begin(), v.keys.end(), keys.begin(), keys.end()));
    EXPECT_TRUE(v.rows == wire);
    // What the server sees after widening: the values, rounded to dtype.
    std::vector<float> widened(values.size());
    ASSERT_TRUE(WidenToFloat(v.dtype, v.rows, absl::MakeSpan(widened)).ok());
    for (size_t i = 0; i < values.size(); i += 97) {
      EXPECT_NEAR(widened[i], values[i], std::fabs(values[i]) / 128 + 1e-6);
    }
  }
  std::vector<uint64_t> keys;
  std::vector<float> values;
  std::string wire;
  SparseRowsOut out;  // the fields, without keys and rows
};

TEST(PayloadCodec, SparseRowsRoundTripInEveryDtypeAndSlicing) {
  for (DType dtype : {FLOAT32, FLOAT16, BFLOAT16}) {
    SCOPED_TRACE(DType_Name(dtype));
    // Above the inline threshold (referenced), below it (copied), empty.
    const std::vector<SparseCase> cases = {
        {0, dtype, 700, 16}, {2, dtype, 3, 5}, {1, dtype, 0, 8}};
    const std::vector<float> dense = Ramp(2000, 3);
    std::vector<ChunkOut> chunks = {
        {4, FLOAT32, 2000, BorrowSlice(Bytes(dense))}};
    std::vector<SparseRowsOut> sparse;
    PushRequest expected = Header();
    ChunkPayload* c = expected.add_chunks();
    c->set_chunk_id(4);
    c->set_dtype(FLOAT32);
    c->set_num_elements(2000);
    c->set_data(std::string(Bytes(dense)));
    for (const SparseCase& s : cases) {
      sparse.push_back(s.Out());
      s.AddTo(expected.mutable_sparse());
    }
    const grpc::ByteBuffer buffer =
        EncodeMessage(Header(), kPushRequestFields, chunks, sparse);
    // Plain protobuf reads what protobuf itself would have written.
    PushRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
    EXPECT_TRUE(parsed.SerializeAsString() == expected.SerializeAsString());
    // The large keys and rows are referenced, not copied.
    std::vector<grpc::Slice> sent;
    ASSERT_TRUE(buffer.Dump(&sent).ok());
    int referenced = 0;
    for (const grpc::Slice& s : sent) {
      const char* p = reinterpret_cast<const char*>(s.begin());
      referenced +=
          p == cases[0].wire.data() || p == cases[0].KeyBytes().data();
    }
    EXPECT_EQ(referenced, 2);
    // Our encoding and protobuf's, received whole or cut anywhere.
    DecodedMessage out;
    for (const std::string& wire :
         {Flatten(buffer), expected.SerializeAsString()}) {
      for (size_t piece : {wire.size(), size_t{1}, size_t{7}, size_t{4096}}) {
        SCOPED_TRACE(piece);
        PushRequest header;
        absl::Status st =
            DecodeMessage(Cut(wire, piece), kPushRequestFields, &header, &out);
        ASSERT_TRUE(st.ok()) << st;
        EXPECT_EQ(header.job_id(), "job-7");
        EXPECT_EQ(header.sparse_size(), 0);
        EXPECT_EQ(header.chunks_size(), 0);
        ASSERT_EQ(out.chunks.size(), 1u);
        EXPECT_EQ(out.chunks[0].chunk_id, 4);
        EXPECT_TRUE(out.chunks[0].data == Bytes(dense));
        ASSERT_EQ(out.sparse.size(), cases.size());
        for (size_t i = 0; i < cases.size(); ++i)
          cases[i].Expect(out.sparse[i]);
      }
    }
  }
}

TEST(PayloadCodec, ChunkIndicesRoundTripWhateverTheSlicing) {
  // A sparse update of a chunk (ChunkPayload.indices): large indices are
  // referenced, small ones copied; a dense chunk beside them has none.
  std::vector<uint32_t> big(3000), small = {2, 5, 11};
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint32_t>(3 * i);
  const std::vector<float> big_values = Ramp(big.size(), 1);
  const std::vector<float> small_values = Ramp(small.size(), -2);
  const std::vector<float> dense = Ramp(20, 7);
  const auto index_bytes = [](const std::vector<uint32_t>& v) {
    return absl::string_view(reinterpret_cast<const char*>(v.data()),
                             v.size() * sizeof(uint32_t));
  };
  std::vector<ChunkOut> chunks(3);
  PushRequest expected = Header();
  const std::vector<const std::vector<uint32_t>*> indices = {&big, &small,
                                                             nullptr};
  const std::vector<const std::vector<float>*> values = {&big_values,
                                                         &small_values, &dense};
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i].chunk_id = static_cast<int64_t>(i) + 1;
    chunks[i].num_elements = static_cast<int64_t>(values[i]->size());
    chunks[i].data = BorrowSlice(Bytes(*values[i]));
    ChunkPayload* c = expected.add_chunks();
    c->set_chunk_id(chunks[i].chunk_id);
    c->set_dtype(FLOAT32);
    c->set_num_elements(chunks[i].num_elements);
    if (indices[i] != nullptr) {
      chunks[i].indices = BorrowSlice(index_bytes(*indices[i]));
      c->set_indices(std::string(index_bytes(*indices[i])));
    }
    c->set_data(std::string(Bytes(*values[i])));
  }
  const grpc::ByteBuffer buffer =
      EncodeMessage(Header(), kPushRequestFields, chunks, {});
  PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  EXPECT_TRUE(parsed.SerializeAsString() == expected.SerializeAsString());
  std::vector<grpc::Slice> sent;
  ASSERT_TRUE(buffer.Dump(&sent).ok());
  bool referenced = false;
  for (const grpc::Slice& s : sent) {
    referenced |=
        reinterpret_cast<const char*>(s.begin()) == index_bytes(big).data();
  }
  EXPECT_TRUE(referenced);
  for (const std::string& wire :
       {Flatten(buffer), expected.SerializeAsString()}) {
    for (size_t piece : {wire.size(), size_t{1}, size_t{7}, size_t{4096}}) {
      SCOPED_TRACE(piece);
      const auto expect = [&](const std::vector<ChunkView>& got) {
        ASSERT_EQ(got.size(), 3u);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].chunk_id, chunks[i].chunk_id);
          EXPECT_TRUE(got[i].data == Bytes(*values[i]));
          EXPECT_TRUE(got[i].indices == (indices[i] == nullptr
                                             ? absl::string_view()
                                             : index_bytes(*indices[i])));
        }
      };
      PushRequest header;
      DecodedMessage out;
      absl::Status st =
          DecodeMessage(Cut(wire, piece), kPushRequestFields, &header, &out);
      ASSERT_TRUE(st.ok()) << st;
      expect(out.chunks);
      std::vector<ChunkView> views;
      std::vector<grpc::Slice> slices;
      std::string arena;
      ASSERT_TRUE(DecodeWithPayloads(Cut(wire, piece), 6, &header, &views,
                                     &slices, &arena)
                      .ok());
      expect(views);
      // The lowest level: indices in one piece during the call.
      std::vector<std::string> seen_indices;
      std::vector<uint64_t> key_scratch;
      PayloadHandlers handlers;
      handlers.on_chunk = [&](const ChunkView& v,
                              absl::Span<const absl::string_view>) {
        seen_indices.emplace_back(v.indices);
        return absl::OkStatus();
      };
      ASSERT_TRUE(DecodeSegmented(Cut(wire, piece), kPushRequestFields, &header,
                                  &slices, &key_scratch, handlers)
                      .ok());
      ASSERT_EQ(seen_indices.size(), 3u);
      EXPECT_TRUE(seen_indices[0] == index_bytes(big));
      EXPECT_TRUE(seen_indices[1] == index_bytes(small));
      EXPECT_TRUE(seen_indices[2].empty());
    }
  }
}

TEST(PayloadCodec, SparseRowsOfPullsAndAnswers) {
  // A pull request: keys only; protobuf's encoding decodes too.
  SparseCase pull(1, FLOAT16, 50, 8);
  PullRequest request;
  request.set_job_id("j");
  request.set_version_only(true);
  DecodedMessage out;
  PullRequest header;
  ASSERT_TRUE(
      DecodeMessage(Cut(Flatten(EncodeMessage(request, kPullRequestFields, {},
                                              {pull.Out(true, false)})),
                        3),
                    kPullRequestFields, &header, &out)
          .ok());
  EXPECT_TRUE(header.version_only());
  ASSERT_EQ(out.sparse.size(), 1u);
  EXPECT_EQ(out.sparse[0].num_rows, 50);
  EXPECT_TRUE(std::equal(out.sparse[0].keys.begin(), out.sparse[0].keys.end(),
                         pull.keys.begin(), pull.keys.end()));
  EXPECT_TRUE(out.sparse[0].rows.empty());

  // An answer: rows only, in a PullResponse and a PushResponse.
  SparseCase answer(0, BFLOAT16, 40, 32);
  PullResponse response;
  response.set_version(9);
  ASSERT_TRUE(DecodeMessage(EncodeMessage(response, kPullResponseFields, {},
                                          {answer.Out(false, true)}),
                            kPullResponseFields, &response, &out)
                  .ok());
  EXPECT_EQ(response.version(), 9);
  ASSERT_EQ(out.sparse.size(), 1u);
  EXPECT_TRUE(out.sparse[0].keys.empty());
  EXPECT_TRUE(out.sparse[0].rows == answer.wire);
  PushResponse pushed;
  pushed.set_pulled(true);
  ASSERT_TRUE(
      DecodeMessage(Cut(Flatten(EncodeMessage(pushed, kPushResponseFields, {},
                                              {answer.Out(false, true)})),
                        100),
                    kPushResponseFields, &pushed, &out)
          .ok());
  EXPECT_TRUE(pushed.pulled());
  ASSERT_EQ(out.sparse.size(), 1u);
  EXPECT_TRUE(out.sparse[0].rows == answer.wire);
}

TEST(PayloadCodec, SparseRowsRejectsMalformedInput) {
  const auto rows = [](int table, DType dtype, int64_t n, int32_t dim,
                       size_t key_bytes, size_t row_bytes) {
    PushRequest m;
    SparseRows* s = m.add_sparse();
    s->set_table(table);
    s->set_dtype(dtype);
    s->set_num_rows(n);
    s->set_dim(dim);
    s->set_keys(std::string(key_bytes, 'k'));
    s->set_rows(std::string(row_bytes, 'r'));
    return m.SerializeAsString();
  };
  const std::string good = rows(0, FLOAT16, 10, 4, 80, 80);
  struct Case {
    const char* name;
    std::string wire;
    const char* message;  // a part of the error
  };
  const std::vector<Case> cases = {
      {"keys not whole", rows(0, FLOAT32, 10, 4, 79, 160), "keys hold 79"},
      {"keys of another count", rows(0, FLOAT32, 10, 4, 88, 160),
       "not 8 x num_rows"},
      {"rows of another count", rows(0, FLOAT32, 10, 4, 80, 164),
       "rows hold 164"},
      {"rows of another dtype", rows(0, FLOAT16, 10, 4, 80, 160),
       "rows hold 160"},
      {"rows of an unknown dtype",
       rows(0, static_cast<DType>(9), 10, 4, 80, 160), "dtype 9"},
      {"rows of dim 0", rows(0, FLOAT32, 10, 0, 80, 160), "rows hold"},
      {"negative num_rows", rows(0, FLOAT32, -1, 4, 0, 0), "must not be"},
      {"negative dim", rows(0, FLOAT32, 1, -4, 8, 0), "must not be"},
      {"truncated", good.substr(0, good.size() - 1), "truncated"},
      {"cut in the keys", good.substr(0, 40), "truncated"},
      // The record claims more bytes than its keys field leaves.
      {"record shorter than its rows",
       [] {
         SparseRows r;
         r.set_num_rows(1);
         r.set_dim(1);
         r.set_rows(std::string(4, 'r'));
         const std::string record = r.SerializeAsString();
         std::string w = "\x52";  // field 10, length-delimited
         w.push_back(static_cast<char>(record.size() - 2));
         return w + record.substr(0, record.size() - 2) + "\x08\x01";
       }(),
       "truncated"},
  };
  DecodedMessage out;
  for (const Case& c : cases) {
    for (size_t piece : {size_t{1} << 20, size_t{3}}) {
      PushRequest header;
      const absl::Status s =
          DecodeMessage(Cut(c.wire, piece), kPushRequestFields, &header, &out);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_NE(s.message().find(c.message), absl::string_view::npos)
          << c.name << ": " << s.message();
    }
  }
  PushRequest header;
  EXPECT_TRUE(
      DecodeMessage(Cut(good, 5), kPushRequestFields, &header, &out).ok());
}

TEST(PayloadCodec, SparseRowsSegmentedAlignsKeysAndStopsOnError) {
  SparseCase a(0, FLOAT32, 600, 8), b(1, FLOAT32, 9, 8);
  const std::string wire = Flatten(
      EncodeMessage(Header(), kPushRequestFields, {}, {a.Out(), b.Out()}));
  // One leading byte shifts every key off its alignment.
  std::string shifted = "x" + wire;
  grpc::Slice whole(shifted.data(), shifted.size());
  grpc::Slice unaligned = whole.sub(1, shifted.size());
  for (const grpc::ByteBuffer& buffer :
       {grpc::ByteBuffer(&unaligned, 1), Cut(wire, 1000)}) {
    PushRequest header;
    std::vector<grpc::Slice> slices;
    std::vector<uint64_t> scratch;
    int seen = 0;
    PayloadHandlers handlers;
    handlers.on_sparse = [&](const SparseRowsView& v,
                             absl::Span<const absl::string_view> segments) {
      const SparseCase& c = seen++ == 0 ? a : b;
      std::string rows;
      for (absl::string_view s : segments) rows.append(s.data(), s.size());
      EXPECT_TRUE(rows == c.wire);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.keys.data()) % 8, 0u);
      EXPECT_TRUE(std::equal(v.keys.begin(), v.keys.end(), c.keys.begin(),
                             c.keys.end()));
      return absl::OkStatus();
    };
    ASSERT_TRUE(DecodeSegmented(buffer, kPushRequestFields, &header, &slices,
                                &scratch, handlers)
                    .ok());
    EXPECT_EQ(seen, 2);
    handlers.on_sparse = [&](const SparseRowsView&,
                             absl::Span<const absl::string_view>) {
      ++seen;
      return absl::FailedPreconditionError("stop");
    };
    EXPECT_EQ(DecodeSegmented(buffer, kPushRequestFields, &header, &slices,
                              &scratch, handlers)
                  .code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(seen, 3);
  }
}

}  // namespace
}  // namespace ps
