#include "common/payload_codec.h"

#include <gtest/gtest.h>

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
