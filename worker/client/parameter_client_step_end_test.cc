// The parameter client's end of step over a fake transport (no sockets):
// EndStep, EndStepAndPull (BSP and pipelined) and PushTensorsAndPull, how
// they cut messages, ask weights back and report versions. The rest of the
// client: parameter_client_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client.h"
#include "worker/client/parameter_client_test_util.h"

namespace ps::client {
namespace {

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

}  // namespace
}  // namespace ps::client
