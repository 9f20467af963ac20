// Top-k compression per chunk: error feedback exact over steps, the wire
// payload (uint32 offsets, values in the wire dtype), the counters, and
// the parameter client's pushes carrying it.
#include "worker/client/chunk_compression.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client.h"

namespace ps::client {
namespace {

// Tensors "w" (1000 floats) and "b" (30) in chunks of at most 100 floats:
// w in chunks 0..9, b in chunk 10.
Placement TwoTensors(int shards) {
  std::vector<TensorSpec> tensors(2);
  tensors[0].set_name("w");
  tensors[0].add_shape(1000);
  tensors[1].set_name("b");
  tensors[1].add_shape(30);
  return *ComputePlacement(tensors, shards, 400);
}

std::string Bytes(const grpc::Slice& s) {
  return std::string(reinterpret_cast<const char*>(s.begin()), s.size());
}

std::vector<uint32_t> Offsets(const std::string& bytes) {
  std::vector<uint32_t> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

std::vector<float> Values(DType dtype, const std::string& bytes) {
  std::vector<float> out(bytes.size() / DTypeSize(dtype));
  EXPECT_TRUE(WidenToFloat(dtype, bytes, absl::MakeSpan(out)).ok());
  return out;
}

// Gradients in eighths of small integers: every sum below is exact in fp32,
// so error feedback can be checked for equality.
std::vector<float> Gradient(int64_t n, int step, int64_t chunk) {
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>((i * 7 + step * 13 + chunk * 5) % 23 - 11) / 8;
  }
  return g;
}

// Over several steps, per chunk: what was sent plus the residual equals the
// sum of the gradients, element for element; each push sends k entries at
// strictly ascending offsets.
TEST(ChunkCompressor, SentPlusResidualIsTheSumOfTheGradients) {
  const Placement p = TwoTensors(2);
  CompressionCounters counters;
  auto compressor = ChunkCompressor::Create(p, 0.1, FLOAT32, &counters);
  ASSERT_TRUE(compressor.ok()) << compressor.status();
  ChunkCompressor& cc = **compressor;
  EXPECT_EQ(cc.k(0), 10);
  EXPECT_EQ(cc.k(10), 3);  // ceil(0.1 x 30)
  constexpr int kSteps = 6;
  int64_t dense = 0, sent = 0;
  for (const Chunk& c : p.chunks) {
    std::vector<float> total(c.num_elements, 0.0f), delivered = total;
    for (int step = 0; step < kSteps; ++step) {
      const std::vector<float> g = Gradient(c.num_elements, step, c.chunk_id);
      for (int64_t i = 0; i < c.num_elements; ++i) total[i] += g[i];
      ChunkOut out;
      ASSERT_TRUE(cc.Compress(c.chunk_id, g, &out).ok());
      EXPECT_EQ(out.chunk_id, c.chunk_id);
      EXPECT_EQ(out.dtype, FLOAT32);
      ASSERT_EQ(out.num_elements, cc.k(c.chunk_id));
      const std::vector<uint32_t> at = Offsets(Bytes(out.indices));
      const std::vector<float> v = Values(FLOAT32, Bytes(out.data));
      ASSERT_EQ(at.size(), static_cast<size_t>(out.num_elements));
      ASSERT_EQ(v.size(), at.size());
      for (size_t i = 0; i < at.size(); ++i) {
        ASSERT_LT(at[i], static_cast<uint32_t>(c.num_elements));
        if (i > 0) {
          ASSERT_LT(at[i - 1], at[i]);
        }
        delivered[at[i]] += v[i];
      }
      dense += c.num_elements;
      sent += out.num_elements;
    }
    const std::vector<float> r = cc.Residual(c.chunk_id);
    for (int64_t i = 0; i < c.num_elements; ++i) {
      ASSERT_EQ(delivered[i] + r[i], total[i])
          << "chunk " << c.chunk_id << " element " << i;
    }
  }
  EXPECT_EQ(counters.dense_elements.load(), dense);
  EXPECT_EQ(counters.sent_elements.load(), sent);
  EXPECT_EQ(counters.dense_bytes.load(), dense * 4);
  EXPECT_EQ(counters.sent_bytes.load(), sent * 8);
  cc.Reset();
  for (const Chunk& c : p.chunks) {
    EXPECT_EQ(cc.Residual(c.chunk_id),
              std::vector<float>(c.num_elements, 0.0f));
  }
}

TEST(ChunkCompressor, ValuesTravelInTheWireDtype) {
  const Placement p = TwoTensors(1);
  CompressionCounters counters;
  auto compressor = ChunkCompressor::Create(p, 0.05, FLOAT16, &counters);
  ASSERT_TRUE(compressor.ok());
  std::vector<float> g(100, 0.0f);
  g[17] = 3.0f;
  g[42] = -2.5f;
  g[90] = 0.5f;
  g[3] = 0.25f;
  g[60] = 1.0f;
  g[61] = 0.125f;  // sixth: left in the residual
  ChunkOut out;
  ASSERT_TRUE((*compressor)->Compress(0, g, &out).ok());
  EXPECT_EQ(out.dtype, FLOAT16);
  EXPECT_EQ(out.num_elements, 5);
  EXPECT_EQ(Offsets(Bytes(out.indices)),
            (std::vector<uint32_t>{3, 17, 42, 60, 90}));
  EXPECT_EQ(out.data.size(), 10u);
  EXPECT_EQ(Values(FLOAT16, Bytes(out.data)),
            (std::vector<float>{0.25f, 3.0f, -2.5f, 1.0f, 0.5f}));
  EXPECT_EQ((*compressor)->Residual(0)[61], 0.125f);
  EXPECT_EQ(counters.sent_bytes.load(), 5 * (4 + 2));
  EXPECT_EQ(counters.dense_bytes.load(), 100 * 2);
}

TEST(ChunkCompressor, ReportGivesTheWindowsFractionAndTheBytesSaved) {
  CompressionCounters counters;
  CompressionReport report(&counters);
  using Points = std::vector<std::pair<std::string, double>>;
  EXPECT_EQ(report.Points(),
            (Points{{"topk_sent_fraction", 0.0}, {"topk_saved_mb", 0.0}}));
  counters.dense_elements += 1000;
  counters.sent_elements += 100;
  counters.dense_bytes += 4000000;
  counters.sent_bytes += 800000;
  EXPECT_EQ(report.Points(),
            (Points{{"topk_sent_fraction", 0.1}, {"topk_saved_mb", 3.2}}));
  counters.dense_elements += 1000;
  counters.sent_elements += 10;
  EXPECT_EQ(report.Points(),
            (Points{{"topk_sent_fraction", 0.01}, {"topk_saved_mb", 3.2}}));
}

TEST(ChunkCompressor, RefusesBadArguments) {
  const Placement p = TwoTensors(1);
  for (double ratio : {0.0, -0.5, 1.5, std::nan("")}) {
    EXPECT_EQ(
        ChunkCompressor::Create(p, ratio, FLOAT32, nullptr).status().code(),
        absl::StatusCode::kInvalidArgument)
        << ratio;
  }
  auto compressor = ChunkCompressor::Create(p, 0.5, FLOAT32, nullptr);
  ASSERT_TRUE(compressor.ok());
  std::vector<float> g(99, 1.0f);
  ChunkOut out;
  EXPECT_EQ((*compressor)->Compress(0, g, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*compressor)->Compress(11, g, &out).code(),
            absl::StatusCode::kInvalidArgument);
}

// The parameter client with topk_ratio: every chunk of a push goes as its
// k entries (indices + values, in the wire dtype), messages sized by what
// they carry; a ratio out of range is refused.
TEST(ChunkCompressor, ParameterClientPushesSparseChunks) {
  const Placement p = TwoTensors(2);
  for (DType dtype : {FLOAT32, BFLOAT16}) {
    SCOPED_TRACE(DType_Name(dtype));
    ParameterClientOptions options;
    options.server_addresses.resize(2);
    options.wire_dtype = dtype;
    options.topk_ratio = 0.1;
    CompressionCounters counters;
    options.compression_counters = &counters;
    auto t = std::make_unique<FakeTransport>(2);
    FakeTransport* transport = t.get();
    auto client = ParameterClient::CreateWithTransport(options, "job", 1, p,
                                                       std::move(t));
    ASSERT_TRUE(client.ok()) << client.status();
    std::vector<float> w(1000), b(30);
    for (size_t i = 0; i < w.size(); ++i) w[i] = (i % 100 == 37) ? 5.0f : 0.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) / 32;
    Ticket ticket = (*client)->PushTensors({{0, w}, {1, b}}, 0);
    ASSERT_TRUE(transport->WaitForAttempts(2));
    int chunks = 0;
    for (const FakeRequest& r : transport->Waiting()) {
      for (const FakeChunk& c : r.chunks) {
        ++chunks;
        const int64_t k = c.chunk_id == 10 ? 3 : 10;
        EXPECT_EQ(c.num_elements, k);
        EXPECT_EQ(c.dtype, dtype);
        ASSERT_EQ(c.indices.size(), static_cast<size_t>(k) * 4);
        EXPECT_EQ(c.data.size(), static_cast<size_t>(k * DTypeSize(dtype)));
        const std::vector<uint32_t> at = Offsets(c.indices);
        const std::vector<float> v = Values(dtype, c.data);
        if (c.chunk_id == 10) {
          // The three largest of b: elements 27..29.
          EXPECT_EQ(at, (std::vector<uint32_t>{27, 28, 29}));
          EXPECT_EQ(v[2], 29.0f / 32);
        } else {
          // Element 37, then zeros, the lowest offsets first.
          EXPECT_EQ(at, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 37}));
          EXPECT_EQ(v[9], 5.0f);
        }
      }
    }
    EXPECT_EQ(chunks, 11);
    EXPECT_EQ(counters.sent_elements.load(), 10 * 10 + 3);
    EXPECT_EQ(counters.dense_elements.load(), 1030);
    transport->AnswerAll([](const FakeRequest&) {
      return FakeReply{absl::OkStatus(), FakeTransport::Encode(PushResponse())};
    });
    EXPECT_TRUE(ticket.Wait(absl::Seconds(30)).ok());
  }
  ParameterClientOptions bad;
  bad.server_addresses.resize(2);
  bad.topk_ratio = 1.5;
  EXPECT_EQ(ParameterClient::CreateWithTransport(
                bad, "job", 1, p, std::make_unique<FakeTransport>(2))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::client
