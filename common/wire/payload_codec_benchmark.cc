// fp16 / bf16 payload conversion (NarrowFromFloat and WidenToFloat over one
// message worth of elements) and the codec's encode and decode of dense
// and sparse Push messages. Run with
//   bazel run //common/wire:payload_codec_benchmark
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/wire/payload_codec.h"

namespace ps {
namespace {

constexpr int64_t kElements = 1 << 20;

enum class Range {
  kNormal,  // every value a normal half
  kMixed,   // magnitudes 2^-21..2^3: a fifth below 2^-14 (subnormal halves)
};

// Gradient-like values of random sign and magnitude.
std::vector<float> Values(Range range) {
  std::vector<float> v(kElements);
  const int exponents = range == Range::kNormal ? 12 : 24;
  const int lowest = range == Range::kNormal ? -12 : -20;
  uint32_t state = 12345;
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) / 16777216.0f;  // [0,1)
    x = (unit - 0.5f) *
        std::ldexp(1.0f, static_cast<int>(state % exponents) + lowest);
  }
  return v;
}

void BM_Narrow(benchmark::State& state, DType dtype, Range range) {
  const std::vector<float> src = Values(range);
  std::string dst(src.size() * DTypeSize(dtype), '\0');
  for (auto _ : state) {
    NarrowFromFloat(dtype, src, dst.data());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_Widen(benchmark::State& state, DType dtype, Range range) {
  const std::vector<float> values = Values(range);
  std::string wire(values.size() * DTypeSize(dtype), '\0');
  NarrowFromFloat(dtype, values, wire.data());
  std::vector<float> dst(values.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        WidenToFloat(dtype, wire, absl::MakeSpan(dst)).ok());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// A PushRequest of `chunks` chunks of `floats` floats each.
struct DenseMessage {
  DenseMessage(int chunks, int floats)
      : data(static_cast<size_t>(chunks) * floats, 0.5f) {
    header.set_job_id("job");
    header.set_worker_id(3);
    header.set_seq(77);
    header.set_clock(5);
    for (int i = 0; i < chunks; ++i) {
      out.push_back({i, FLOAT32, floats,
                     BorrowSlice(absl::string_view(
                         reinterpret_cast<const char*>(data.data()) +
                             static_cast<size_t>(i) * floats * 4,
                         static_cast<size_t>(floats) * 4))});
    }
  }
  std::vector<float> data;
  PushRequest header;
  std::vector<ChunkOut> out;
};

// As gRPC hands a received message over: the bytes in slices of 16 KiB.
grpc::ByteBuffer Received(const grpc::ByteBuffer& sent) {
  std::vector<grpc::Slice> slices;
  (void)sent.Dump(&slices);
  std::string flat;
  for (const grpc::Slice& s : slices) {
    flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  std::vector<grpc::Slice> pieces;
  for (size_t i = 0; i < flat.size(); i += 16384) {
    pieces.emplace_back(flat.data() + i,
                        std::min<size_t>(16384, flat.size() - i));
  }
  return grpc::ByteBuffer(pieces.data(), pieces.size());
}

void BM_EncodeDense(benchmark::State& state) {
  DenseMessage m(state.range(0), state.range(1));
  for (auto _ : state) {
    grpc::ByteBuffer b = EncodeWithPayloads(m.header, 6, m.out);
    benchmark::DoNotOptimize(b.Length());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_DecodeDenseSegmented(benchmark::State& state) {
  DenseMessage m(state.range(0), state.range(1));
  const grpc::ByteBuffer received =
      Received(EncodeWithPayloads(m.header, 6, m.out));
  std::vector<grpc::Slice> slices;
  for (auto _ : state) {
    PushRequest header;
    size_t bytes = 0;
    absl::Status s = DecodeSegmented(
        received, 6, &header, &slices,
        [&](const ChunkView&, absl::Span<const absl::string_view> segs) {
          for (absl::string_view seg : segs) bytes += seg.size();
          return absl::OkStatus();
        });
    benchmark::DoNotOptimize(s.ok());
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_DecodeDenseViews(benchmark::State& state) {
  DenseMessage m(state.range(0), state.range(1));
  const grpc::ByteBuffer received =
      Received(EncodeWithPayloads(m.header, 6, m.out));
  std::vector<grpc::Slice> slices;
  std::vector<ChunkView> chunks;
  std::string arena;
  for (auto _ : state) {
    PushRequest header;
    benchmark::DoNotOptimize(
        DecodeWithPayloads(received, 6, &header, &chunks, &slices, &arena)
            .ok());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// A PushRequest of one SparseRows: `rows` distinct keys, rows of `dim`
// values in `dtype` (a batch's embedding gradients).
struct SparseMessage {
  SparseMessage(int rows, int dim, DType dtype)
      : keys(rows),
        wire(static_cast<size_t>(rows) * dim * DTypeSize(dtype), 1) {
    for (int i = 0; i < rows; ++i) {
      keys[i] = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
    }
    header.set_job_id("job");
    header.set_worker_id(3);
    header.set_seq(77);
    header.set_clock(5);
    out.push_back(
        {0, dtype, rows, dim,
         BorrowSlice(absl::string_view(
             reinterpret_cast<const char*>(keys.data()), keys.size() * 8)),
         BorrowSlice(wire)});
  }
  std::vector<uint64_t> keys;
  std::string wire;
  PushRequest header;
  std::vector<SparseRowsOut> out;
};

void BM_EncodeSparse(benchmark::State& state, DType dtype) {
  SparseMessage m(state.range(0), state.range(1), dtype);
  for (auto _ : state) {
    grpc::ByteBuffer b = EncodeMessage(m.header, kPushRequestFields, {}, m.out);
    benchmark::DoNotOptimize(b.Length());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() *
                          (m.wire.size() + 8 * m.keys.size()));
}

// Views of the received keys and rows (rows gathered from their 16 KiB
// slices, keys aligned), as the server takes a push in.
void BM_DecodeSparseViews(benchmark::State& state, DType dtype) {
  SparseMessage m(state.range(0), state.range(1), dtype);
  const grpc::ByteBuffer received =
      Received(EncodeMessage(m.header, kPushRequestFields, {}, m.out));
  DecodedMessage out;
  for (auto _ : state) {
    PushRequest header;
    benchmark::DoNotOptimize(
        DecodeMessage(received, kPushRequestFields, &header, &out).ok());
    benchmark::DoNotOptimize(out.sparse[0].keys.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() *
                          (m.wire.size() + 8 * m.keys.size()));
}

// The same, segmented: no copy of the rows (keys straddling slices copied).
void BM_DecodeSparseSegmented(benchmark::State& state, DType dtype) {
  SparseMessage m(state.range(0), state.range(1), dtype);
  const grpc::ByteBuffer received =
      Received(EncodeMessage(m.header, kPushRequestFields, {}, m.out));
  std::vector<grpc::Slice> slices;
  std::vector<uint64_t> scratch;
  PayloadHandlers handlers;
  size_t bytes = 0;
  handlers.on_sparse = [&](const SparseRowsView& v,
                           absl::Span<const absl::string_view> segs) {
    bytes += v.keys.size();
    for (absl::string_view seg : segs) bytes += seg.size();
    return absl::OkStatus();
  };
  for (auto _ : state) {
    PushRequest header;
    benchmark::DoNotOptimize(DecodeSegmented(received, kPushRequestFields,
                                             &header, &slices, &scratch,
                                             handlers)
                                 .ok());
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() *
                          (m.wire.size() + 8 * m.keys.size()));
}

// {rows, dim}: a 4096-key batch of 64-wide embeddings, and a smaller one.
BENCHMARK_CAPTURE(BM_EncodeSparse, fp32, FLOAT32)
    ->Args({4096, 64})
    ->Args({512, 16});
BENCHMARK_CAPTURE(BM_EncodeSparse, fp16, FLOAT16)->Args({4096, 64});
BENCHMARK_CAPTURE(BM_DecodeSparseViews, fp32, FLOAT32)
    ->Args({4096, 64})
    ->Args({512, 16});
BENCHMARK_CAPTURE(BM_DecodeSparseViews, fp16, FLOAT16)->Args({4096, 64});
BENCHMARK_CAPTURE(BM_DecodeSparseSegmented, fp32, FLOAT32)->Args({4096, 64});

// {chunks, floats per chunk}: many small chunks (inline), a few 256 KiB ones.
BENCHMARK(BM_EncodeDense)->Args({64, 256})->Args({16, 65536});
BENCHMARK(BM_DecodeDenseSegmented)->Args({64, 256})->Args({16, 65536});
BENCHMARK(BM_DecodeDenseViews)->Args({64, 256})->Args({16, 65536});

BENCHMARK_CAPTURE(BM_Narrow, fp16_normal, FLOAT16, Range::kNormal);
BENCHMARK_CAPTURE(BM_Narrow, fp16_mixed, FLOAT16, Range::kMixed);
BENCHMARK_CAPTURE(BM_Narrow, bf16_mixed, BFLOAT16, Range::kMixed);
BENCHMARK_CAPTURE(BM_Widen, fp16_normal, FLOAT16, Range::kNormal);
BENCHMARK_CAPTURE(BM_Widen, fp16_mixed, FLOAT16, Range::kMixed);
BENCHMARK_CAPTURE(BM_Widen, bf16_mixed, BFLOAT16, Range::kMixed);

}  // namespace
}  // namespace ps

BENCHMARK_MAIN();
