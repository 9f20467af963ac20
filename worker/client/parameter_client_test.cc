// The parameter client over a fake transport (no sockets): how calls are cut
// into messages, what the messages carry, how answers land in the caller's
// buffers and tickets, retries keeping sequence numbers, and errors. The
// same client over real gRPC shards: tests/parameter_client_grpc_test.cc.
#include "worker/client/parameter_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"

namespace ps::client {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);
constexpr int kPullChunksField = 2;
constexpr int kPushPulledChunksField = 7;

// Tensors "w" (1000 floats) and "b" (30) in chunks of at most 100 floats:
// w in chunks 0..9, b in chunk 10.
Placement TwoTensors(int shards, int64_t chunk_bytes = 400) {
  std::vector<TensorSpec> tensors(2);
  tensors[0].set_name("w");
  tensors[0].add_shape(1000);
  tensors[1].set_name("b");
  tensors[1].add_shape(30);
  return *ComputePlacement(tensors, shards, chunk_bytes);
}

// The weights the fake shards hold: exact in fp16 and bf16.
float Weight(int64_t chunk, int64_t i) {
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

void ExpectPulled(const Placement& p, const Weights& weights,
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

std::set<int64_t> AllChunks(const Placement& p) {
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

// PullAll asks each shard for its chunks in messages of at most
// max_request_bytes on the wire and writes every chunk into the caller's
// tensors, converting from the wire dtype.
TEST(ParameterClient, PullAllCutsMessagesAndFillsTheTensors) {
  const Placement p = TwoTensors(2);
  ASSERT_EQ(p.shard_chunks[0].size() + p.shard_chunks[1].size(), 11u);
  const std::vector<WireCase> cases = {
      {"one_message_per_shard", FLOAT32, 1 << 20, {1, 1}},
      {"a_message_per_chunk",
       FLOAT32,
       400,
       {static_cast<int>(p.shard_chunks[0].size()),
        static_cast<int>(p.shard_chunks[1].size())}},
      {"fp16_two_chunks_per_message", FLOAT16, 400, {3, 3}},
      {"bf16", BFLOAT16, 1 << 20, {1, 1}},
  };
  for (const WireCase& c : cases) {
    SCOPED_TRACE(c.name);
    ParameterClientOptions options;
    options.wire_dtype = c.dtype;
    options.max_request_bytes = c.max_request_bytes;
    Rig rig(p, options);
    Weights weights;
    Ticket t = rig.client->PullAll(3, 2, weights.spans());
    std::vector<int> pulls(2, 0);
    std::set<int64_t> asked;
    for (const FakeRequest& r : rig.transport->Waiting()) {
      ASSERT_EQ(r.rpc, Rpc::kPull);
      EXPECT_EQ(r.pull.job_id(), "job");
      EXPECT_EQ(r.pull.worker_id(), 1);
      EXPECT_EQ(r.pull.clock(), 3);
      EXPECT_EQ(r.pull.min_version(), 2);
      EXPECT_EQ(r.pull.dtype(), c.dtype);
      int64_t bytes = 0;
      for (int64_t id : r.pull.chunk_ids()) {
        EXPECT_EQ(p.chunks[id].shard, r.shard);
        EXPECT_TRUE(asked.insert(id).second) << "chunk " << id << " twice";
        bytes += p.chunks[id].num_elements * DTypeSize(c.dtype);
      }
      EXPECT_LE(bytes, c.max_request_bytes);
      ++pulls[r.shard];
    }
    EXPECT_EQ(pulls, c.pulls_per_shard);
    EXPECT_EQ(asked, AllChunks(p));
    EXPECT_EQ(t.Wait(absl::ZeroDuration()).code(),
              absl::StatusCode::kDeadlineExceeded);
    rig.AnswerAll();
    ASSERT_TRUE(t.Wait(kWait).ok()) << t.Wait(kWait);
    ExpectPulled(p, weights, AllChunks(p));
  }
}

// Each shard is asked even when it holds no chunk (its version counts).
TEST(ParameterClient, PullAllAsksAShardWithoutChunksForItsVersion) {
  const Placement p = TwoTensors(20);  // 11 chunks on 20 shards
  Rig rig(p);
  Weights weights;
  Ticket t = rig.client->PullAll(0, 0, weights.spans());
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  ASSERT_EQ(waiting.size(), 20u);
  int version_only = 0;
  for (const FakeRequest& r : waiting) version_only += r.pull.version_only();
  EXPECT_EQ(version_only, 9);
  for (int s = 0; s < 20; ++s) rig.shards.version[s] = 100 + s;
  rig.shards.version[13] = 42;  // a shard without chunks
  ASSERT_TRUE(p.shard_chunks[13].empty());
  rig.AnswerAll();
  ASSERT_TRUE(t.Wait(kWait).ok());
  EXPECT_EQ(t.version(), 42);
  ExpectPulled(p, weights, AllChunks(p));
}

// A pull's version and min clock are the lowest over the shards, and each
// shard's version becomes the base version of the next push to it.
TEST(ParameterClient, VersionsAreTheLowestAndPushesBaseOnEachShards) {
  const Placement p = TwoTensors(2);
  Rig rig(p);
  rig.shards.version = {5, 3};
  rig.shards.min_clock = {4, 6};
  Weights weights;
  Ticket pull = rig.client->PullAll(7, 0, weights.spans());
  rig.AnswerAll();
  ASSERT_TRUE(pull.Wait(kWait).ok());
  EXPECT_EQ(pull.version(), 3);
  EXPECT_EQ(pull.min_clock(), 4);

  const std::vector<float> gw(1000, 1.0f);
  Ticket push = rig.client->PushTensor(0, gw, 7);
  Ticket explicit_base = rig.client->PushTensor(0, gw, 7, 2);
  std::map<int, std::vector<int64_t>> bases;  // by shard
  for (const FakeRequest& r : rig.transport->Waiting()) {
    bases[r.shard].push_back(r.push.base_version());
  }
  EXPECT_EQ(bases[0], (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(bases[1], (std::vector<int64_t>{3, 2}));
  rig.shards.version = {9, 8};
  rig.AnswerAll();
  ASSERT_TRUE(push.Wait(kWait).ok());
  EXPECT_EQ(push.version(), 8);
}

// Pushes are cut into whole chunks, grouped per shard into messages of at
// most max_request_bytes of payload (a bigger chunk alone), each carrying
// its chunks' gradient in the wire dtype.
TEST(ParameterClient, PushesSplitAtMaxRequestBytes) {
  struct Case {
    const char* name;
    DType dtype;
    int64_t max_request_bytes;
    int chunks_per_message;  // of 100 floats (the 30-float one aside)
  };
  const std::vector<Case> cases = {
      {"whole_shard", FLOAT32, 1 << 20, 100},
      {"one_chunk", FLOAT32, 400, 1},
      {"smaller_than_a_chunk", FLOAT32, 100, 1},
      {"three_chunks", FLOAT32, 1200, 3},
      {"fp16_two_chunks", FLOAT16, 400, 2},
      {"bf16_three_chunks", BFLOAT16, 700, 3},
  };
  const Placement p = TwoTensors(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ParameterClientOptions options;
    options.wire_dtype = c.dtype;
    options.max_request_bytes = c.max_request_bytes;
    Rig rig(p, options);
    std::vector<float> gw(1000), gb(30);
    for (int i = 0; i < 1000; ++i) gw[i] = 0.5f * (i % 16);
    for (int i = 0; i < 30; ++i) gb[i] = -0.25f * (i % 8);
    Ticket t = rig.client->PushTensors({{0, gw}, {1, gb}}, 4);
    std::set<int64_t> pushed;
    for (const FakeRequest& r : rig.transport->Waiting()) {
      ASSERT_EQ(r.rpc, Rpc::kPush);
      EXPECT_EQ(r.push.clock(), 4);
      EXPECT_FALSE(r.push.end_of_step());
      EXPECT_TRUE(r.push.chunks_final());
      EXPECT_FALSE(r.push.has_then_pull());
      const int64_t limit = std::max<int64_t>(
          c.max_request_bytes, 100 * DTypeSize(c.dtype));  // one chunk
      EXPECT_LE(r.payload_bytes(), limit);
      EXPECT_LE(static_cast<int>(r.chunks.size()), c.chunks_per_message);
      for (const FakeChunk& fc : r.chunks) {
        const Chunk& chunk = p.chunks[fc.chunk_id];
        EXPECT_EQ(chunk.shard, r.shard);
        EXPECT_TRUE(pushed.insert(fc.chunk_id).second);
        EXPECT_EQ(fc.dtype, c.dtype);
        std::vector<float> got(fc.num_elements);
        ASSERT_TRUE(WidenToFloat(fc.dtype, fc.data, absl::MakeSpan(got)).ok());
        const std::vector<float>& g = chunk.tensor_index == 0 ? gw : gb;
        for (int64_t i = 0; i < fc.num_elements; ++i) {
          ASSERT_EQ(got[i], g[chunk.offset + i]);
        }
      }
    }
    EXPECT_EQ(pushed, AllChunks(p));
    rig.AnswerAll();
    EXPECT_TRUE(t.Wait(kWait).ok());
  }
}

// fp32 payloads are sent from the caller's gradient memory (zero copy):
// a chunk's slice lies inside the gradient buffer.
TEST(ParameterClient, PushPayloadsBorrowTheGradientMemory) {
  std::vector<TensorSpec> tensors(1);
  tensors[0].set_name("big");
  tensors[0].add_shape(1 << 14);
  const Placement p = *ComputePlacement(tensors, 1, 16 << 10);  // 4 chunks
  for (DType dtype : {FLOAT32, FLOAT16}) {
    SCOPED_TRACE(DType_Name(dtype));
    ParameterClientOptions options;
    options.wire_dtype = dtype;
    Rig rig(p, options);
    std::vector<float> grad(1 << 14, 1.0f);
    const char* begin = reinterpret_cast<const char*>(grad.data());
    const char* end = begin + grad.size() * sizeof(float);
    Ticket t = rig.client->PushTensor(0, grad, 0);
    std::vector<FakeRequest> waiting = rig.transport->Waiting();
    ASSERT_EQ(waiting.size(), 1u);
    int borrowed = 0;
    for (auto [data, size] : waiting[0].slices) {
      if (data >= begin && data + size <= end) ++borrowed;
    }
    EXPECT_EQ(borrowed, dtype == FLOAT32 ? 4 : 0);
    rig.AnswerAll();
    EXPECT_TRUE(t.Wait(kWait).ok());
  }
}

// A push retried after UNAVAILABLE carries the same sequence number (so the
// shard applies it once); the next push takes the next one. Sequence
// numbers start at SeqBase(incarnation) + 1, per shard.
TEST(ParameterClient, RetriedPushKeepsItsSequenceNumber) {
  const Placement p = TwoTensors(1);
  ParameterClientOptions options;
  options.incarnation = 3;
  options.retry.initial_backoff = absl::Milliseconds(50);
  Rig rig(p, options);
  const std::vector<float> gb(30, 1.0f);
  Ticket first = rig.client->PushTensor(1, gb, 0);
  FakeRequest sent = rig.transport->Answer([](const FakeRequest&) {
    return FakeReply::Error(absl::UnavailableError("down"));
  });
  EXPECT_EQ(sent.push.seq(), SeqBase(3) + 1);
  EXPECT_EQ(
      rig.transport->PendingTimers(),
      (std::vector<absl::Time>{rig.clock.Now() + absl::Milliseconds(50)}));
  EXPECT_EQ(rig.transport->FireTimers(), 1);
  FakeRequest resent = rig.transport->Answer(std::ref(rig.shards));
  EXPECT_EQ(resent.push.seq(), SeqBase(3) + 1);
  EXPECT_EQ(resent.chunks.size(), sent.chunks.size());
  EXPECT_EQ(resent.chunks[0].data, sent.chunks[0].data);
  ASSERT_TRUE(first.Wait(kWait).ok());
  Ticket second = rig.client->EndStep(0);
  EXPECT_EQ(rig.transport->Answer(std::ref(rig.shards)).push.seq(),
            SeqBase(3) + 2);
  EXPECT_TRUE(second.Wait(kWait).ok());
}

// A push ticket counts the messages the shards reported as duplicates
// (already applied) and as dropped (late for their BSP step).
TEST(ParameterClient, PushTicketsCountDuplicatesAndDropped) {
  const Placement p = TwoTensors(2);
  ParameterClientOptions options;
  options.max_request_bytes = 400;  // a message per chunk
  Rig rig(p, options);
  const std::vector<float> gw(1000, 1.0f);
  Ticket t = rig.client->PushTensor(0, gw, 0);
  int n = 0;
  rig.transport->AnswerAll([&](const FakeRequest&) {
    PushResponse r;
    r.set_version(10 + n);
    r.set_duplicate(n % 3 == 0);
    r.set_dropped(n % 4 == 1);
    ++n;
    return FakeReply{absl::OkStatus(), FakeTransport::Encode(r)};
  });
  ASSERT_EQ(n, 10);
  ASSERT_TRUE(t.Wait(kWait).ok());
  EXPECT_EQ(t.duplicates(), 4);  // 0, 3, 6, 9
  EXPECT_EQ(t.dropped(), 3);     // 1, 5, 9
  EXPECT_EQ(t.version(), 10);
}

// EndStep sends one empty end-of-step push per shard.
TEST(ParameterClient, EndStepTellsEveryShard) {
  const Placement p = TwoTensors(3);
  Rig rig(p);
  Ticket t = rig.client->EndStep(5, 4);
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  ASSERT_EQ(waiting.size(), 3u);
  for (const FakeRequest& r : waiting) {
    EXPECT_TRUE(r.push.end_of_step());
    EXPECT_EQ(r.push.clock(), 5);
    EXPECT_EQ(r.push.base_version(), 4);
    EXPECT_TRUE(r.chunks.empty());
  }
  rig.shards.version = {7, 6, 9};
  rig.AnswerAll();
  ASSERT_TRUE(t.Wait(kWait).ok());
  EXPECT_EQ(t.version(), 6);
}

// Not pipelined (BSP): the end of step goes in messages of at most
// max_request_bytes; only the last, which ends the step, asks back weights
// (one message's worth), and the rest is pulled once it is answered.
TEST(ParameterClient, EndStepAndPullPullsTheRestAfterTheEndOfStep) {
  const Placement p = TwoTensors(1);
  ParameterClientOptions options;
  options.max_request_bytes = 400;  // one chunk per message
  options.pipeline_step_end = false;
  Rig rig(p, options);
  const std::vector<float> gw(1000, 0.5f), gb(30, 0.5f);
  Weights weights;
  ParameterClient::StepTickets t = rig.client->EndStepAndPull(
      {{1, gb}, {0, gw}}, 2, 1, 3, 3, weights.spans());
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  ASSERT_EQ(waiting.size(), 11u);
  for (size_t m = 0; m < waiting.size(); ++m) {
    const FakeRequest& r = waiting[m];
    ASSERT_EQ(r.rpc, Rpc::kPush);
    const bool last = m + 1 == waiting.size();
    EXPECT_EQ(r.push.end_of_step(), last) << m;
    EXPECT_EQ(r.push.has_then_pull(), last) << m;
    EXPECT_EQ(r.push.clock(), 2);
    EXPECT_EQ(r.push.base_version(), 1);
  }
  const PullRequest& then = waiting.back().push.then_pull();
  EXPECT_EQ(then.clock(), 3);
  EXPECT_EQ(then.min_version(), 3);
  ASSERT_EQ(then.chunk_ids_size(), 1);
  EXPECT_EQ(then.chunk_ids(0), waiting.back().chunks[0].chunk_id);
  // The pushes before the last: no pull yet.
  for (int m = 0; m < 10; ++m) rig.transport->Answer(std::ref(rig.shards));
  EXPECT_TRUE(t.end.Wait(absl::ZeroDuration()).code() ==
              absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(rig.transport->Waiting().size(), 1u);
  rig.shards.version = {3};
  rig.transport->Answer(std::ref(rig.shards));  // the end of step
  EXPECT_TRUE(t.end.Wait(kWait).ok());
  waiting = rig.transport->Waiting();
  ASSERT_EQ(waiting.size(), 10u);  // the other chunks, a Pull each
  for (const FakeRequest& r : waiting) {
    EXPECT_EQ(r.rpc, Rpc::kPull);
    EXPECT_EQ(r.pull.clock(), 3);
    EXPECT_EQ(r.pull.min_version(), 3);
  }
  EXPECT_FALSE(t.pull.Done());
  rig.AnswerAll();
  ASSERT_TRUE(t.pull.Wait(kWait).ok()) << t.pull.Wait(kWait);
  EXPECT_EQ(t.pull.version(), 3);
  ExpectPulled(p, weights, AllChunks(p));
}

// Pipelined (ASP/SSP): each shard's part goes in about
// connections_per_shard messages that each ask back their own chunks; only
// the last message's answer (the end of step) gives the pulled version,
// which becomes the base of the next push.
TEST(ParameterClient, PipelinedEndOfStepTakesTheVersionOfItsLastAnswer) {
  const Placement p = TwoTensors(1);
  ParameterClientOptions options;
  options.connections_per_shard = 2;
  options.pipeline_step_end = true;
  Rig rig(p, options);
  const std::vector<float> gw(1000, 0.5f), gb(30, 0.5f);
  Weights weights;
  ParameterClient::StepTickets t = rig.client->EndStepAndPull(
      {{0, gw}, {1, gb}}, 0, ParameterClient::kPulledVersion, 1, 0,
      weights.spans());
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  // About two messages of at most half the shard's bytes: w's first five
  // chunks, its last five, then b's.
  ASSERT_EQ(waiting.size(), 3u);
  std::set<int64_t> asked;
  for (const FakeRequest& r : waiting) {
    ASSERT_TRUE(r.push.has_then_pull());
    EXPECT_LE(r.payload_bytes(), 2060);
    std::set<int64_t> own;
    for (const FakeChunk& c : r.chunks) own.insert(c.chunk_id);
    const std::set<int64_t> ids(r.push.then_pull().chunk_ids().begin(),
                                r.push.then_pull().chunk_ids().end());
    EXPECT_EQ(ids, own);
    asked.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(asked, AllChunks(p));
  // The first answer predates the worker's own end of step: version 7;
  // the end of step's answer: 9.
  auto reply = [&](const FakeRequest& r) {
    rig.shards.pulled_version[0] = r.push.end_of_step() ? 9 : 7;
    rig.shards.version[0] = r.push.end_of_step() ? 9 : 7;
    return rig.shards(r);
  };
  EXPECT_EQ(rig.transport->AnswerAll(reply), 3);
  ASSERT_TRUE(t.end.Wait(kWait).ok());
  ASSERT_TRUE(t.pull.Wait(kWait).ok());
  EXPECT_EQ(t.pull.version(), 9);
  EXPECT_EQ(t.end.version(), 7);  // the lowest push answer
  ExpectPulled(p, weights, AllChunks(p));
  const std::vector<float> g1(30, 1.0f);
  Ticket next = rig.client->PushTensor(1, g1, 1);
  EXPECT_EQ(rig.transport->Answer(std::ref(rig.shards)).push.base_version(), 9);
  EXPECT_TRUE(next.Wait(kWait).ok());
}

// Pipelined over several shards: about connections_per_shard messages in
// all, so each shard's part goes in ceil(connections / shards) messages,
// each asking back its own chunks, the last one ending the step.
TEST(ParameterClient, PipelinedEndOfStepSpreadsConnectionsOverShards) {
  struct Case {
    int shards;
    int connections;
    size_t messages_per_shard;
  };
  const std::vector<Case> cases = {
      {1, 2, 2}, {2, 2, 1}, {2, 1, 1}, {2, 4, 2}, {3, 2, 1}, {3, 6, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.shards, " shards, ", c.connections,
                              " connections per shard"));
    // One tensor of 12 chunks: every shard holds several.
    std::vector<TensorSpec> tensors(1);
    tensors[0].set_name("w");
    tensors[0].add_shape(1200);
    const Placement p = *ComputePlacement(tensors, c.shards, 400);
    ParameterClientOptions options;
    options.connections_per_shard = c.connections;
    options.pipeline_step_end = true;
    Rig rig(p, options);
    const std::vector<float> gw(1200, 0.5f);
    std::vector<float> w(1200, -1.0f);
    const std::vector<absl::Span<float>> spans = {absl::MakeSpan(w)};
    ParameterClient::StepTickets t = rig.client->EndStepAndPull(
        {{0, gw}}, 0, ParameterClient::kPulledVersion, 1, 0, spans);
    std::map<int, size_t> per_shard;
    std::map<int, int> ends;
    std::set<int64_t> asked;
    for (const FakeRequest& r : rig.transport->Waiting()) {
      ++per_shard[r.shard];
      if (r.push.end_of_step()) ++ends[r.shard];
      ASSERT_TRUE(r.push.has_then_pull());
      std::set<int64_t> own;
      for (const FakeChunk& ch : r.chunks) own.insert(ch.chunk_id);
      const std::set<int64_t> ids(r.push.then_pull().chunk_ids().begin(),
                                  r.push.then_pull().chunk_ids().end());
      EXPECT_EQ(ids, own);
      asked.insert(ids.begin(), ids.end());
    }
    for (int s = 0; s < c.shards; ++s) {
      EXPECT_EQ(per_shard[s], c.messages_per_shard) << "shard " << s;
      EXPECT_EQ(ends[s], 1) << "shard " << s;
    }
    EXPECT_EQ(asked.size(), p.chunks.size());
    rig.AnswerAll();
    ASSERT_TRUE(t.end.Wait(kWait).ok());
    ASSERT_TRUE(t.pull.Wait(kWait).ok());
    for (const Chunk& ch : p.chunks) {
      ASSERT_EQ(w[ch.offset], Weight(ch.chunk_id, 0))
          << "chunk " << ch.chunk_id;
    }
  }
}

// A shard that answers the fused push without weights (one that predates
// then_pull): the client pulls what it asked for.
TEST(ParameterClient, EndStepAndPullPullsItselfWhenTheAnswerHasNoWeights) {
  const Placement p = TwoTensors(2);
  Rig rig(p);
  rig.shards.honour_then_pull = false;
  const std::vector<float> gw(1000, 0.5f), gb(30, 0.5f);
  Weights weights;
  ParameterClient::StepTickets t = rig.client->EndStepAndPull(
      {{0, gw}, {1, gb}}, 0, 0, 1, 0, weights.spans());
  int pushes = 0, pulls = 0;
  rig.transport->AnswerAll([&](const FakeRequest& r) {
    (r.rpc == Rpc::kPush ? pushes : pulls)++;
    return rig.shards(r);
  });
  EXPECT_GT(pushes, 0);
  EXPECT_EQ(pulls, pushes);
  ASSERT_TRUE(t.end.Wait(kWait).ok());
  ASSERT_TRUE(t.pull.Wait(kWait).ok());
  ExpectPulled(p, weights, AllChunks(p));
}

// Chunks that earlier calls of the step asked back are not asked again; a
// shard left with nothing to ask for asks for its version only.
TEST(ParameterClient, EndStepAndPullSkipsChunksAlreadyAsked) {
  const Placement p = TwoTensors(2);
  Rig rig(p);
  Weights weights;
  std::vector<int64_t> shard0(p.shard_chunks[0].begin(),
                              p.shard_chunks[0].end());
  std::vector<int64_t> already = shard0;
  already.push_back(p.shard_chunks[1][0]);
  ParameterClient::StepTickets t =
      rig.client->EndStepAndPull({}, 0, 0, 1, 0, weights.spans(), already);
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  ASSERT_EQ(waiting.size(), 2u);
  for (const FakeRequest& r : waiting) {
    EXPECT_TRUE(r.push.end_of_step());
    EXPECT_TRUE(r.chunks.empty());
    const PullRequest& then = r.push.then_pull();
    if (r.shard == 0) {
      EXPECT_TRUE(then.version_only());
      EXPECT_EQ(then.chunk_ids_size(), 0);
    } else {
      const std::vector<int64_t> ids(then.chunk_ids().begin(),
                                     then.chunk_ids().end());
      EXPECT_EQ(ids, std::vector<int64_t>(p.shard_chunks[1].begin() + 1,
                                          p.shard_chunks[1].end()));
    }
  }
  rig.AnswerAll();
  ASSERT_TRUE(t.pull.Wait(kWait).ok());
  std::set<int64_t> want(p.shard_chunks[1].begin() + 1,
                         p.shard_chunks[1].end());
  ExpectPulled(p, weights, want);
}

// When the end of step fails, so does its pull, and no pull is sent.
TEST(ParameterClient, AFailedEndOfStepFailsItsPull) {
  const Placement p = TwoTensors(1);
  ParameterClientOptions options;
  options.max_request_bytes = 400;
  options.pipeline_step_end = false;
  Rig rig(p, options);
  Weights weights;
  const std::vector<float> gb(30, 0.5f);
  ParameterClient::StepTickets t =
      rig.client->EndStepAndPull({{1, gb}}, 0, 0, 1, 1, weights.spans());
  rig.transport->AnswerAll([](const FakeRequest&) {
    return FakeReply::Error(absl::FailedPreconditionError("worker 1 evicted"));
  });
  EXPECT_EQ(rig.transport->started(), 1);
  EXPECT_EQ(t.end.Wait(kWait).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.pull.Wait(kWait).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.pull.Wait(kWait).message().find("worker 1 evicted"),
            std::string::npos);
}

// PushTensorsAndPull: every message asks back its own chunks, which can be
// waited for as each answer lands; the pull's version is the lowest of
// all answers.
TEST(ParameterClient, PushTensorsAndPullBringsEachMessagesChunks) {
  const Placement p = TwoTensors(2);
  ParameterClientOptions options;
  options.max_request_bytes = 800;  // two chunks per message
  Rig rig(p, options);
  const std::vector<float> gw(1000, 0.5f);
  Weights weights;
  const absl::Span<const float> head = absl::MakeConstSpan(gw).first(600);
  ParameterClient::StepTickets t =
      rig.client->PushTensorsAndPull({{0, head}}, 0, 0, 1, 1, weights.spans());
  std::vector<FakeRequest> waiting = rig.transport->Waiting();
  // Chunks 0..5, three on each shard: two messages per shard.
  ASSERT_EQ(waiting.size(), 4u);
  for (const FakeRequest& r : waiting) EXPECT_LE(r.chunks.size(), 2u);
  const std::vector<int64_t> first = ChunksOverlapping(p, 0, 0, 600);
  EXPECT_EQ(first, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  int answered = 0;
  std::set<int64_t> arrived;
  rig.transport->AnswerAll([&](const FakeRequest& r) {
    const std::vector<int64_t> ids(r.push.then_pull().chunk_ids().begin(),
                                   r.push.then_pull().chunk_ids().end());
    std::vector<int64_t> own;
    for (const FakeChunk& c : r.chunks) own.push_back(c.chunk_id);
    std::sort(own.begin(), own.end());
    EXPECT_EQ(ids, own);
    EXPECT_FALSE(r.push.end_of_step());
    // What earlier answers brought is there already.
    EXPECT_TRUE(
        t.pull
            .WaitForChunks(std::vector<int64_t>(arrived.begin(), arrived.end()),
                           absl::ZeroDuration())
            .ok());
    arrived.insert(ids.begin(), ids.end());
    rig.shards.pulled_version[r.shard] = 5 + answered++;
    return rig.shards(r);
  });
  ASSERT_TRUE(t.pull.Wait(kWait).ok());
  EXPECT_TRUE(t.pull.WaitForChunks(first, absl::ZeroDuration()).ok());
  EXPECT_EQ(t.pull.version(), 5);
  ExpectPulled(p, weights, std::set<int64_t>(first.begin(), first.end()));
}

// CancelInFlight ends calls waiting for an answer or for a retry with
// CANCELLED; the client works as before afterwards.
TEST(ParameterClient, CancelInFlightEndsWaitingAndRetryingCalls) {
  const Placement p = TwoTensors(2);
  ParameterClientOptions options;
  options.send_thread = true;
  Rig rig(p, options);
  Weights weights;
  Ticket pull = rig.client->PullAll(0, 0, weights.spans());
  ASSERT_TRUE(rig.transport->WaitForAttempts(2));
  rig.transport->Answer([](const FakeRequest&) {
    return FakeReply::Error(absl::UnavailableError("down"));
  });
  ASSERT_EQ(rig.transport->PendingTimers().size(), 1u);
  rig.client->CancelInFlight();
  ASSERT_TRUE(pull.Done());
  EXPECT_EQ(pull.Wait(kWait).code(), absl::StatusCode::kCancelled);
  Ticket again = rig.client->PullAll(0, 0, weights.spans());
  ASSERT_TRUE(rig.transport->WaitForAttempts(2));
  rig.AnswerAll();
  EXPECT_TRUE(again.Wait(kWait).ok());
}

// A shard's error ends the call with a message naming the method, the
// shard and its address.
TEST(ParameterClient, ErrorsNameTheShard) {
  const Placement p = TwoTensors(2);
  Rig rig(p);
  Weights weights;
  Ticket pull = rig.client->PullAll(0, 0, weights.spans());
  rig.transport->AnswerAll([&](const FakeRequest& r) {
    if (r.shard == 1)
      return FakeReply::Error(absl::NotFoundError("no job 'job'"));
    return rig.shards(r);
  });
  absl::Status s = pull.Wait(kWait);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/ps.ParameterService/Pull to shard 1 "
                             "(fake-shard-1), attempt 1"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("no job 'job'"), std::string::npos) << s;
}

// Arguments that do not match the placement fail the ticket at once and
// send nothing; so do options out of range at creation.
TEST(ParameterClient, RejectsMismatchedArguments) {
  const Placement p = TwoTensors(2);
  Rig rig(p);
  std::vector<float> short_tensor(10), gw(1000);
  Weights weights;
  const absl::StatusCode kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(rig.client->PushTensor(0, short_tensor, 0).Wait(kWait).code(),
            kBad);
  EXPECT_EQ(rig.client->PushTensor(7, short_tensor, 0).Wait(kWait).code(),
            kBad);
  EXPECT_EQ(rig.client->PushTensor(-1, short_tensor, 0).Wait(kWait).code(),
            kBad);
  EXPECT_EQ(
      rig.client
          ->PushTensors({{0, absl::MakeConstSpan(gw).subspan(50, 100), 50}}, 0)
          .Wait(kWait)
          .code(),
      kBad);  // not whole chunks
  EXPECT_EQ(
      rig.client->PullAll(0, 0, {absl::MakeSpan(weights.w)}).Wait(kWait).code(),
      kBad);
  EXPECT_EQ(rig.client
                ->PullAll(0, 0,
                          {absl::MakeSpan(weights.w).first(999),
                           absl::MakeSpan(weights.b)})
                .Wait(kWait)
                .code(),
            kBad);
  ParameterClient::StepTickets bad = rig.client->EndStepAndPull(
      {{0, short_tensor}}, 0, 0, 1, 0, weights.spans());
  EXPECT_EQ(bad.end.Wait(kWait).code(), kBad);
  EXPECT_EQ(bad.pull.Wait(kWait).code(), kBad);
  bad = rig.client->PushTensorsAndPull({{0, gw}}, 0, 0, 1, 0,
                                       {absl::MakeSpan(weights.w)});
  EXPECT_EQ(bad.end.Wait(kWait).code(), kBad);
  EXPECT_EQ(bad.pull.Wait(kWait).code(), kBad);
  EXPECT_EQ(rig.transport->started(), 0);

  struct Case {
    const char* name;
    int transport_shards;
    ParameterClientOptions options;
  };
  std::vector<Case> cases(4);
  cases[0] = {"transport to 3 shards", 3, {}};
  cases[1] = {"no connections", 2, {}};
  cases[1].options.connections_per_shard = 0;
  cases[2] = {"tiny messages", 2, {}};
  cases[2].options.max_request_bytes = 2;
  cases[3] = {"unknown dtype", 2, {}};
  cases[3].options.wire_dtype = static_cast<DType>(77);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ParameterClient::CreateWithTransport(
                  c.options, "job", 1, p,
                  std::make_unique<FakeTransport>(c.transport_shards))
                  .status()
                  .code(),
              kBad);
  }
  ParameterClientOptions two_addresses;
  two_addresses.server_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  EXPECT_EQ(ParameterClient::Create(two_addresses, "job", 1, TwoTensors(1))
                .status()
                .code(),
            kBad);
}

}  // namespace
}  // namespace ps::client
