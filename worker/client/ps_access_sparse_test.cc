// PsAccess's sparse tables through the real parameter
// client over a fake transport whose shards answer from a thread of the
// test: rows pulled as the consistency model waits, rows asked back by a
// push in place once the step ends, pulled again when the push is refused
// as too stale, and errors naming the shard.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client.h"
#include "worker/client/ps_access.h"
#include "worker/client/request_test_util.h"

namespace ps::client {
namespace {
using client::Rpc;

float RowValue(uint64_t key, int k) {
  return static_cast<float>(key % 100) + 0.5f * static_cast<float>(k);
}

constexpr int kDim = 4;

// Shards holding one 10-float tensor and table "emb" (dim 4): pulls and
// then_pulls answered with zeros for chunks and RowValue for rows, versions
// as `version` says; `refuse_rows` refuses pushes of rows as too stale.
struct Shards {
  std::vector<FakeSparse> Rows(const std::vector<std::vector<uint64_t>>& keys) {
    std::vector<FakeSparse> out;
    for (const std::vector<uint64_t>& k : keys) {
      FakeSparse f{0, FLOAT32, static_cast<int64_t>(k.size()), kDim, {}, {}};
      std::vector<float> v(k.size() * kDim);
      for (size_t i = 0; i < k.size(); ++i) {
        for (int e = 0; e < kDim; ++e) v[i * kDim + e] = RowValue(k[i], e);
      }
      f.rows.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      out.push_back(std::move(f));
    }
    return out;
  }
  std::vector<FakeChunk> Chunks(const PullRequest& r) const {
    std::vector<FakeChunk> out;
    if (r.sparse_only() || r.version_only()) return out;
    for (int64_t id : r.chunk_ids()) {
      const Chunk& c = placement->chunks[id];
      out.push_back(
          {id, FLOAT32, c.num_elements, std::string(c.num_elements * 4, '\0')});
    }
    return out;
  }

  FakeReply operator()(const FakeRequest& r) {
    if (r.rpc == Rpc::kPull) {
      min_versions.push_back(r.pull.min_version());
      std::vector<std::vector<uint64_t>> keys;
      for (const FakeSparse& s : r.sparse) keys.push_back(s.keys);
      PullResponse response;
      response.set_version(version);
      return {absl::OkStatus(),
              FakeTransport::EncodeSparse(response, kPullResponseFields,
                                          Rows(keys), Chunks(r.pull))};
    }
    if (!r.sparse.empty() && refuse_rows) {
      return FakeReply::Error(absl::AbortedError("too stale"));
    }
    if (!r.sparse.empty()) row_push_seqs.push_back(r.push.seq());
    if (r.push.end_of_step()) end_seqs.push_back(r.push.seq());
    PushResponse response;
    response.set_version(version);
    if (r.push.has_then_pull()) {
      const PullRequest& ask = r.push.then_pull();
      min_versions.push_back(ask.min_version());
      std::vector<std::vector<uint64_t>> keys;
      for (const SparseRows& s : ask.sparse()) {
        std::vector<uint64_t> k(s.num_rows());
        std::memcpy(k.data(), s.keys().data(), s.keys().size());
        keys.push_back(std::move(k));
      }
      response.set_pulled(true);
      response.set_pulled_version(version);
      return {absl::OkStatus(),
              FakeTransport::EncodeSparse(response, kPushResponseFields,
                                          Rows(keys), Chunks(ask))};
    }
    return {absl::OkStatus(), FakeTransport::Encode(response)};
  }

  const Placement* placement = nullptr;
  int64_t version = 3;
  bool refuse_rows = false;
  // Written by the answering thread, read once it has stopped.
  std::vector<int64_t> min_versions;
  std::vector<uint64_t> row_push_seqs, end_seqs;
};

struct Rig {
  explicit Rig(ConsistencySpec::Model model) {
    std::vector<TensorSpec> tensors(1);
    tensors[0].set_name("w");
    tensors[0].add_shape(10);
    placement = *ComputePlacement(tensors, 2, 400);
    shards.placement = &placement;
    auto t = std::make_unique<FakeTransport>(2);
    transport = t.get();
    ParameterClientOptions options;
    options.server_addresses = {"a", "b"};
    SparseTableSpec table;
    table.set_name("emb");
    table.set_dim(kDim);
    options.sparse_tables = {table};
    auto c = ParameterClient::CreateWithTransport(options, "job", 1, placement,
                                                  std::move(t));
    EXPECT_TRUE(c.ok()) << c.status();
    access = NewPsAccess(*std::move(c), model, {});
    answering = std::thread([this] {
      while (!stop.load()) {
        if (transport->WaitForAttempts(1, absl::Milliseconds(20))) {
          transport->AnswerAll(
              [this](const FakeRequest& r) { return shards(r); });
        }
      }
    });
  }
  ~Rig() { Stop(); }
  void Stop() {
    stop.store(true);
    if (answering.joinable()) answering.join();
  }

  Placement placement;
  Shards shards;
  FakeTransport* transport = nullptr;
  std::unique_ptr<ParameterAccess> access;
  std::atomic<bool> stop{false};
  std::thread answering;
};

void ExpectRows(const std::vector<uint64_t>& keys,
                const std::vector<float>& rows) {
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int e = 0; e < kDim; ++e) {
      ASSERT_EQ(rows[i * kDim + e], RowValue(keys[i], e)) << "key " << keys[i];
    }
  }
}

const std::vector<uint64_t> kKeys = {11, 2, 93, 4000000007, 5, 61, 7, 808};

TEST(PsAccessSparse, PullRowsWaitsAsTheConsistencyModelSays) {
  for (auto model : {ConsistencySpec::BSP, ConsistencySpec::ASP}) {
    Rig rig(model);
    std::vector<float> rows(kKeys.size() * kDim);
    absl::StatusOr<CallResult> v =
        rig.access->Pull(RowsOf(4, {{0, kKeys, absl::MakeSpan(rows)}})).Wait();
    rig.Stop();
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->version, 3);
    ExpectRows(kKeys, rows);
    ASSERT_FALSE(rig.shards.min_versions.empty());
    for (int64_t m : rig.shards.min_versions) {
      EXPECT_EQ(m, model == ConsistencySpec::BSP ? 4 : 0);
    }
  }
}

// One Pull of weights and rows waits for both (the version: the
// weights'), each as the consistency model says; rows pushed with Push are
// completed by the step's end.
TEST(PsAccessSparse, OnePullBringsWeightsAndRows) {
  Rig rig(ConsistencySpec::BSP);
  std::vector<float> rows(kKeys.size() * kDim);
  std::vector<float> w(10, -1.0f);
  PullArgs pull = PullOf(4, {absl::MakeSpan(w)});
  pull.rows = {{0, kKeys, absl::MakeSpan(rows)}};
  absl::StatusOr<CallResult> pulled = rig.access->Pull(pull).Wait();
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 3);
  ExpectRows(kKeys, rows);
  EXPECT_EQ(w, std::vector<float>(10, 0.0f));  // the shards' weights
  ASSERT_FALSE(rig.shards.min_versions.empty());
  for (int64_t m : rig.shards.min_versions) EXPECT_EQ(m, 4);
  std::vector<float> grads(kKeys.size() * kDim, 1.0f);
  ASSERT_TRUE(rig.access->Push(RowGradsOf(4, 3, {{0, kKeys, grads}})).ok());
  absl::StatusOr<CallResult> end = rig.access->EndStep(EndOf(4, 3)).Wait();
  rig.Stop();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_FALSE(rig.shards.row_push_seqs.empty());
  EXPECT_EQ(rig.shards.end_seqs.size(), 2u);
}

// The rows a push asks back are in place once FinishAndPull returns, and
// the pushes of rows come before the end of step on each shard.
TEST(PsAccessSparse, RowsAskedBackArriveWithTheStepEnd) {
  Rig rig(ConsistencySpec::BSP);
  const std::vector<uint64_t> next = {1, 22, 333, 4444, 55555};
  std::vector<float> grads(kKeys.size() * kDim, 1.0f);
  std::vector<float> next_rows(next.size() * kDim);
  std::vector<float> w(10);
  StepArgs push = RowGradsOf(2, 1, {{0, kKeys, grads}});
  push.next_rows = {{0, next, absl::MakeSpan(next_rows)}};
  ASSERT_TRUE(rig.access->Push(push).ok());
  absl::StatusOr<CallResult> end =
      rig.access->EndStep(EndOf(2, 1, {absl::MakeSpan(w)})).Wait();
  rig.Stop();
  ASSERT_TRUE(end.ok()) << end.status();
  ExpectRows(next, next_rows);
  for (int64_t m : rig.shards.min_versions) EXPECT_EQ(m, 3);
  ASSERT_FALSE(rig.shards.row_push_seqs.empty());
  ASSERT_EQ(rig.shards.end_seqs.size(), 2u);
  // Each shard's sequence: the rows' push, then the end of step.
  const uint64_t first_end =
      std::min(rig.shards.end_seqs[0], rig.shards.end_seqs[1]);
  for (uint64_t seq : rig.shards.row_push_seqs) EXPECT_LT(seq, first_end);
}

// A push refused as too stale (ASP max_staleness) brings no rows: they are
// pulled on their own before the step's end returns.
TEST(PsAccessSparse, RowsOfARefusedPushArePulledAgain) {
  Rig rig(ConsistencySpec::ASP);
  rig.shards.refuse_rows = true;
  const std::vector<uint64_t> next = {9, 99, 999};
  std::vector<float> grads(kKeys.size() * kDim, 1.0f);
  std::vector<float> next_rows(next.size() * kDim, -1.0f);
  StepArgs push = RowGradsOf(2, 1, {{0, kKeys, grads}});
  push.next_rows = {{0, next, absl::MakeSpan(next_rows)}};
  ASSERT_TRUE(rig.access->Push(push).ok());
  absl::StatusOr<CallResult> staleness =
      rig.access->EndStep(EndOf(2, 1)).Wait();
  rig.Stop();
  ASSERT_TRUE(staleness.ok()) << staleness.status();
  ExpectRows(next, next_rows);
}

// ASP with overlap_communication: the step's end goes out at once with the
// dense gradient and the rows' pushes; the wait brings the rows asked for
// and the next weights, and pulls rows again after a refused push.
TEST(PsAccessSparse, AnEndWithRowsBringsRowsAndWeights) {
  for (bool refuse : {false, true}) {
    Rig rig(ConsistencySpec::ASP);
    rig.shards.refuse_rows = refuse;
    const std::vector<uint64_t> next = {1, 22, 333, 4444, 55555};
    std::vector<float> grads(kKeys.size() * kDim, 1.0f);
    std::vector<float> dense_grad(10, 0.5f);
    std::vector<float> next_rows(next.size() * kDim, -1.0f);
    std::vector<float> w(10, -1.0f);
    StepArgs step = GradsOf(2, 1, {dense_grad});
    step.rows = {{0, kKeys, grads}};
    step.next_rows = {{0, next, absl::MakeSpan(next_rows)}};
    step.next_weights = {absl::MakeSpan(w)};
    absl::StatusOr<CallResult> end = rig.access->EndStep(step).Wait();
    rig.Stop();
    ASSERT_TRUE(end.ok()) << end.status();
    EXPECT_EQ(end->version, 3);
    ExpectRows(next, next_rows);
    EXPECT_EQ(w, std::vector<float>(10, 0.0f));  // the shards' weights
    EXPECT_EQ(rig.shards.end_seqs.size(), 2u);
    EXPECT_EQ(rig.shards.row_push_seqs.empty(), refuse) << refuse;
    for (int64_t m : rig.shards.min_versions) EXPECT_EQ(m, 0);
  }
}

TEST(PsAccessSparse, ErrorsNameTheShard) {
  Rig rig(ConsistencySpec::ASP);
  rig.Stop();
  std::vector<float> rows(kKeys.size() * kDim);
  std::thread shards([&] {
    ASSERT_TRUE(rig.transport->WaitForAttempts(2));
    rig.transport->AnswerAll([&](const FakeRequest& r) {
      if (r.shard == 1) {
        return FakeReply::Error(
            absl::ResourceExhaustedError("table emb is full on shard 1"));
      }
      return rig.shards(r);
    });
  });
  absl::StatusOr<CallResult> v =
      rig.access->Pull(RowsOf(0, {{0, kKeys, absl::MakeSpan(rows)}})).Wait();
  shards.join();
  EXPECT_TRUE(absl::IsResourceExhausted(v.status())) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(),
                                "rows pull at clock 0: "
                                "/ps.ParameterService/Pull to shard 1 "
                                "(fake-shard-1)"))
      << v.status();
}

}  // namespace
}  // namespace ps::client
