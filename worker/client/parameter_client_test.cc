// The parameter client over a fake transport (no sockets): how calls are cut
// into messages, what the messages carry, how answers land in the caller's
// buffers and tickets, retries keeping sequence numbers, and errors. The
// end of step (EndStep, EndStepAndPull, PushTensorsAndPull):
// parameter_client_step_end_test.cc. The same client over real gRPC shards:
// tests/parameter_client_grpc_test.cc.
#include "worker/client/parameter_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client_test_util.h"

namespace ps::client {
namespace {

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
