// The parameter client's own cost per sparse step, without a network: a
// PullRows and a PushRows of a batch of unique Zipf(1.05) keys over 2
// shards through a fake transport whose answers are encoded beforehand
// (the fake's decoding of each request, which copies its keys and rows,
// is counted too: an upper bound of the client's CPU per step).
//
//   bazel run -c opt //worker/client:sparse_client_benchmark
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "tools/data/zipf.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client.h"
#include "worker/client/unique_keys.h"
#include "worker/data/random.h"

namespace ps::client {
namespace {

constexpr int kShards = 2;

struct Setup {
  Setup(int batch, int dim, DType dtype) : dim(dim) {
    auto zipf = data_tools::ZipfSampler::Create(10'000'000, 1.05);
    worker::data::SplitMix64 rng(1);
    std::vector<uint64_t> drawn;
    while (static_cast<int>(drawn.size()) < 3 * batch) {
      drawn.push_back(static_cast<uint64_t>(zipf->Sample(rng)));
    }
    KeyDeduplicator dedup;
    dedup.DeduplicateByShard(drawn, TableSalt("emb"), kShards, &keys);
    keys.keys.resize(std::min<size_t>(keys.keys.size(), batch));
    dedup.DeduplicateByShard(std::vector<uint64_t>(keys.keys), TableSalt("emb"),
                             kShards, &keys);
    rows.resize(keys.keys.size() * dim);
    grads.assign(keys.keys.size() * dim, 1.0f);
    std::vector<TensorSpec> tensors;
    placement = *ComputePlacement(tensors, kShards, 1 << 18);
    auto t = std::make_unique<FakeTransport>(kShards);
    transport = t.get();
    ParameterClientOptions o;
    o.server_addresses.resize(kShards);
    SparseTableSpec table;
    table.set_name("emb");
    table.set_dim(dim);
    table.set_dtype(dtype);
    o.sparse_tables = {table};
    client = *ParameterClient::CreateWithTransport(o, "job", 1, placement,
                                                   std::move(t));
    // Each shard's answer, encoded once.
    for (int s = 0; s < kShards; ++s) {
      const int64_t n = keys.shard_begin[s + 1] - keys.shard_begin[s];
      FakeSparse f{0,   dtype, n,
                   dim, {},    std::string(n * dim * DTypeSize(dtype), '\1')};
      answers.push_back(FakeTransport::EncodeSparse(PullResponse(),
                                                    kPullResponseFields, {f}));
    }
  }

  int dim;
  UniqueKeys keys;
  std::vector<float> rows, grads;
  Placement placement;
  FakeTransport* transport = nullptr;
  std::unique_ptr<ParameterClient> client;
  std::vector<grpc::ByteBuffer> answers;
};

void BM_PullRows(benchmark::State& state) {
  Setup s(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
          static_cast<DType>(state.range(2)));
  for (auto _ : state) {
    Ticket t =
        s.client->PullRows(0, 0, {{0, s.keys.keys, absl::MakeSpan(s.rows)}});
    s.transport->AnswerAll([&](const FakeRequest& r) {
      return FakeReply{absl::OkStatus(), s.answers[r.shard]};
    });
    benchmark::DoNotOptimize(t.Wait(absl::Seconds(10)));
  }
  state.SetItemsProcessed(state.iterations() * s.keys.keys.size());
}
BENCHMARK(BM_PullRows)->ArgsProduct({{4096}, {16, 64}, {FLOAT32, FLOAT16}});

void BM_PushRows(benchmark::State& state) {
  Setup s(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
          static_cast<DType>(state.range(2)));
  const grpc::ByteBuffer ack = FakeTransport::Encode(PushResponse());
  for (auto _ : state) {
    Ticket t = s.client->PushRows({{0, s.keys.keys, s.grads}}, 0, 0);
    s.transport->AnswerAll([&](const FakeRequest&) {
      return FakeReply{absl::OkStatus(), ack};
    });
    benchmark::DoNotOptimize(t.Wait(absl::Seconds(10)));
  }
  state.SetItemsProcessed(state.iterations() * s.keys.keys.size());
}
BENCHMARK(BM_PushRows)->ArgsProduct({{4096}, {16, 64}, {FLOAT32, FLOAT16}});

}  // namespace
}  // namespace ps::client
