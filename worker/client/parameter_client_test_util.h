// Fixtures shared by the parameter client's tests over the fake transport
// (parameter_client_test.cc, parameter_client_step_end_test.cc): a
// two-tensor placement, fake shards that answer pulls and pushes, a rig
// holding a client over them, and the caller's weight buffers.
#ifndef PS_WORKER_CLIENT_PARAMETER_CLIENT_TEST_UTIL_H_
#define PS_WORKER_CLIENT_PARAMETER_CLIENT_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/platform/fake_clock.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client.h"

namespace ps::client {

inline constexpr absl::Duration kWait = absl::Seconds(30);
inline constexpr int kPullChunksField = 2;
inline constexpr int kPushPulledChunksField = 7;

// Tensors "w" (1000 floats) and "b" (30) in chunks of at most 100 floats:
// w in chunks 0..9, b in chunk 10.
inline Placement TwoTensors(int shards, int64_t chunk_bytes = 400) {
  std::vector<TensorSpec> tensors(2);
  tensors[0].set_name("w");
  tensors[0].add_shape(1000);
  tensors[1].set_name("b");
  tensors[1].add_shape(30);
  return *ComputePlacement(tensors, shards, chunk_bytes);
}

// The weights the fake shards hold: exact in fp16 and bf16.
inline float Weight(int64_t chunk, int64_t i) {
  return static_cast<float>(chunk % 8) + 0.25f * static_cast<float>(i % 4);
}

// Answers as shards would: pulls and fused pulls with the chunks asked for
// (Weight), each shard with its version and min clock; pushes with the
// shard's version. Every request must name its shard (a server may hold
// several shards of a job after a failover).
struct Shards {
  explicit Shards(const Placement& p)
      : placement(p),
        version(p.num_shards, 0),
        min_clock(p.num_shards, 0),
        pulled_version(p.num_shards, -1) {}

  std::vector<FakeChunk> Chunks(const PullRequest& r) const {
    std::vector<FakeChunk> out;
    if (r.version_only()) return out;
    const DType dtype = r.dtype() == DTYPE_UNSPECIFIED ? FLOAT32 : r.dtype();
    for (int64_t id : r.chunk_ids()) {
      const Chunk& c = placement.chunks[id];
      std::vector<float> values(c.num_elements);
      for (int64_t i = 0; i < c.num_elements; ++i) values[i] = Weight(id, i);
      FakeChunk fc{id, dtype, c.num_elements,
                   std::string(c.num_elements * DTypeSize(dtype), '\0')};
      NarrowFromFloat(dtype, values, fc.data.data());
      out.push_back(std::move(fc));
    }
    return out;
  }

  FakeReply operator()(const FakeRequest& r) {
    EXPECT_TRUE(r.names_its_shard()) << "sent to shard " << r.shard;
    if (r.rpc == Rpc::kPull) {
      PullResponse response;
      response.set_version(version[r.shard]);
      response.set_min_clock(min_clock[r.shard]);
      return {
          absl::OkStatus(),
          FakeTransport::Encode(response, kPullChunksField, Chunks(r.pull))};
    }
    PushResponse response;
    response.set_version(version[r.shard]);
    if (!r.push.has_then_pull() || !honour_then_pull) {
      return {absl::OkStatus(), FakeTransport::Encode(response)};
    }
    response.set_pulled(true);
    response.set_pulled_version(pulled_version[r.shard] >= 0
                                    ? pulled_version[r.shard]
                                    : version[r.shard]);
    response.set_pulled_min_clock(min_clock[r.shard]);
    return {absl::OkStatus(),
            FakeTransport::Encode(response, kPushPulledChunksField,
                                  Chunks(r.push.then_pull()))};
  }

  const Placement& placement;
  std::vector<int64_t> version, min_clock;
  std::vector<int64_t> pulled_version;  // -1: as version
  bool honour_then_pull = true;
};

struct Rig {
  explicit Rig(const Placement& p, ParameterClientOptions options = {},
               int64_t worker = 1)
      : placement(p), shards(placement) {
    auto t = std::make_unique<FakeTransport>(p.num_shards);
    transport = t.get();
    options.server_addresses.resize(p.num_shards);
    auto c = ParameterClient::CreateWithTransport(options, "job", worker, p,
                                                  std::move(t), &clock);
    EXPECT_TRUE(c.ok()) << c.status();
    client = *std::move(c);
  }
  // Ends what a failed assertion left in flight (else the client's
  // destructor would wait for it).
  ~Rig() {
    if (client != nullptr) client->CancelInFlight();
  }
  int AnswerAll() { return transport->AnswerAll(std::ref(shards)); }

  const Placement placement;
  Shards shards;
  FakeClock clock;
  FakeTransport* transport = nullptr;
  std::unique_ptr<ParameterClient> client;
};

struct Weights {
  std::vector<float> w = std::vector<float>(1000, -1.0f),
                     b = std::vector<float>(30, -1.0f);
  std::vector<absl::Span<float>> spans() {
    return {absl::MakeSpan(w), absl::MakeSpan(b)};
  }
};

inline void ExpectPulled(const Placement& p, const Weights& weights,
                         const std::set<int64_t>& chunks) {
  for (const Chunk& c : p.chunks) {
    const std::vector<float>& t = c.tensor_index == 0 ? weights.w : weights.b;
    for (int64_t i = 0; i < c.num_elements; ++i) {
      const float want = chunks.count(c.chunk_id) ? Weight(c.chunk_id, i) : -1;
      ASSERT_EQ(t[c.offset + i], want)
          << "chunk " << c.chunk_id << " [" << i << "]";
    }
  }
}

inline std::set<int64_t> AllChunks(const Placement& p) {
  std::set<int64_t> all;
  for (const Chunk& c : p.chunks) all.insert(c.chunk_id);
  return all;
}

struct WireCase {
  const char* name;
  DType dtype;
  int64_t max_request_bytes;
  // Pull messages per shard of the 2-shard placement (5 and 6 chunks of
  // 100 / 100 / 30 floats).
  std::vector<int> pulls_per_shard;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_PARAMETER_CLIENT_TEST_UTIL_H_
