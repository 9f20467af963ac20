// The parameter client's sparse tables over a fake transport (no sockets):
// keys placed on their shards, rows back into the caller's buffers in the
// keys' order (whatever the answers' slicing and dtype), duplicate keys
// summed before the push, splitting at the message limit, exactly-once
// retries, then_pull, and errors naming the shard.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/platform/fake_clock.h"
#include "common/platform/rpc.h"
#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "common/wire/sparse_rows.h"
#include "worker/client/fake_transport.h"
#include "worker/client/parameter_client.h"
#include "worker/client/unique_keys.h"

namespace ps::client {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

DType Known(DType d) { return d == DTYPE_UNSPECIFIED ? FLOAT32 : d; }

// The value of element k of a row: exact in fp16 and bf16.
float RowValue(int table, uint64_t key, int k) {
  return static_cast<float>(key % 60 + table) +
         0.25f * static_cast<float>(k % 4);
}

Placement OneTensor(int shards) {
  std::vector<TensorSpec> tensors(1);
  tensors[0].set_name("w");
  tensors[0].add_shape(10);
  return *ComputePlacement(tensors, shards, 400);
}

SparseTableSpec Table(const std::string& name, int dim, DType dtype = FLOAT32) {
  SparseTableSpec t;
  t.set_name(name);
  t.set_dim(dim);
  t.set_dtype(dtype);
  return t;
}

// Answers as shards would: the rows of the keys asked for (RowValue) in the
// dtype asked for, and pushes with the shard's version; records every push's
// gradients by (table, key). Every request must name its shard.
struct SparseShards {
  explicit SparseShards(std::vector<SparseTableSpec> t, int shards)
      : tables(std::move(t)), version(shards, 0) {}

  FakeSparse Rows(int table, DType dtype, const std::vector<uint64_t>& keys) {
    const int dim = tables[table].dim();
    dtype = Known(dtype);
    std::vector<float> values(keys.size() * dim);
    for (size_t i = 0; i < keys.size(); ++i) {
      for (int k = 0; k < dim; ++k)
        values[i * dim + k] = RowValue(table, keys[i], k);
    }
    FakeSparse out{
        table, dtype, static_cast<int64_t>(keys.size()),
        dim,   {},    std::string(values.size() * DTypeSize(dtype), '\0')};
    NarrowFromFloat(dtype, values, out.rows.data());
    return out;
  }

  FakeReply operator()(const FakeRequest& r) {
    EXPECT_TRUE(r.names_its_shard()) << "sent to shard " << r.shard;
    if (r.rpc == Rpc::kPull) {
      PullResponse response;
      response.set_version(version[r.shard]);
      std::vector<FakeSparse> rows;
      for (const FakeSparse& s : r.sparse) {
        rows.push_back(Rows(s.table, s.dtype, s.keys));
      }
      return {absl::OkStatus(),
              FakeTransport::EncodeSparse(response, kPullResponseFields, rows)};
    }
    for (const FakeSparse& s : r.sparse) {
      const int dim = tables[s.table].dim();
      std::vector<float> g(s.num_rows * dim);
      EXPECT_TRUE(WidenToFloat(Known(s.dtype), s.rows, absl::MakeSpan(g)).ok());
      for (int64_t i = 0; i < s.num_rows; ++i) {
        auto& sum = pushed[{s.table, s.keys[i]}];
        sum.resize(dim);
        for (int k = 0; k < dim; ++k) sum[k] += g[i * dim + k];
      }
    }
    PushResponse response;
    response.set_version(version[r.shard]);
    if (!r.push.has_then_pull() || !honour_then_pull) {
      return {absl::OkStatus(), FakeTransport::Encode(response)};
    }
    response.set_pulled(true);
    response.set_pulled_version(version[r.shard] + 1);
    std::vector<FakeSparse> rows;
    for (const SparseRows& s : r.push.then_pull().sparse()) {
      std::vector<uint64_t> keys(s.num_rows());
      EXPECT_EQ(s.keys().size(), 8 * keys.size());
      std::memcpy(keys.data(), s.keys().data(), s.keys().size());
      rows.push_back(Rows(s.table(), s.dtype(), keys));
    }
    return {absl::OkStatus(),
            FakeTransport::EncodeSparse(response, kPushResponseFields, rows)};
  }

  std::vector<SparseTableSpec> tables;
  std::vector<int64_t> version;
  bool honour_then_pull = true;
  std::map<std::pair<int, uint64_t>, std::vector<float>> pushed;
};

struct Rig {
  Rig(int shards, std::vector<SparseTableSpec> tables,
      ParameterClientOptions options = {})
      : placement(OneTensor(shards)), server(tables, shards) {
    auto t = std::make_unique<FakeTransport>(shards);
    transport = t.get();
    options.server_addresses.resize(shards);
    options.sparse_tables = std::move(tables);
    auto c = ParameterClient::CreateWithTransport(options, "job", 1, placement,
                                                  std::move(t), &clock);
    EXPECT_TRUE(c.ok()) << c.status();
    client = *std::move(c);
  }
  int AnswerAll() {
    return transport->AnswerAll(
        [this](const FakeRequest& r) { return server(r); });
  }

  FakeClock clock;
  Placement placement;
  SparseShards server;
  FakeTransport* transport = nullptr;
  std::unique_ptr<ParameterClient> client;
};

std::vector<uint64_t> RandomKeys(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::set<uint64_t> seen;
  std::vector<uint64_t> keys;
  while (static_cast<int>(keys.size()) < n) {
    const uint64_t k = rng() % 1000000;
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

void ExpectRows(int table, int dim, const std::vector<uint64_t>& keys,
                const std::vector<float>& rows) {
  ASSERT_EQ(rows.size(), keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int k = 0; k < dim; ++k) {
      ASSERT_EQ(rows[i * dim + k], RowValue(table, keys[i], k))
          << "key " << keys[i] << " (position " << i << ") element " << k;
    }
  }
}

TEST(SparseClient, PullSendsEachKeyToItsShardAndFillsRowsInOrder) {
  Rig rig(3, {Table("a", 4), Table("b", 8)});
  const std::vector<uint64_t> a = RandomKeys(300, 1), b = RandomKeys(50, 2);
  std::vector<float> ra(a.size() * 4, -1), rb(b.size() * 8, -1);
  rig.server.version = {7, 5, 9};
  Ticket t = rig.client->PullRows(
      3, 2, {{0, a, absl::MakeSpan(ra)}, {1, b, absl::MakeSpan(rb)}});
  ASSERT_TRUE(rig.transport->WaitForAttempts(3));
  std::multiset<uint64_t> sent_a, sent_b;
  for (const FakeRequest& r : rig.transport->Waiting()) {
    EXPECT_EQ(r.rpc, Rpc::kPull);
    EXPECT_TRUE(r.pull.sparse_only());
    EXPECT_EQ(r.pull.clock(), 3);
    EXPECT_EQ(r.pull.min_version(), 2);
    EXPECT_EQ(r.pull.job_id(), "job");
    ASSERT_EQ(r.sparse.size(), 2u) << "one record per table";
    for (const FakeSparse& s : r.sparse) {
      EXPECT_TRUE(s.rows.empty());
      const std::string name = s.table == 0 ? "a" : "b";
      for (uint64_t k : s.keys) {
        EXPECT_EQ(KeyShard(name, k, 3), r.shard) << "key " << k;
        (s.table == 0 ? sent_a : sent_b).insert(k);
      }
    }
  }
  EXPECT_EQ(sent_a, std::multiset<uint64_t>(a.begin(), a.end()));
  EXPECT_EQ(sent_b, std::multiset<uint64_t>(b.begin(), b.end()));
  EXPECT_EQ(rig.AnswerAll(), 3);
  ASSERT_TRUE(t.Wait(kWait).ok()) << t.Wait(kWait);
  EXPECT_EQ(t.version(), 5);
  ExpectRows(0, 4, a, ra);
  ExpectRows(1, 8, b, rb);
}

// Keys grouped by shard go out as slices of the caller's memory, and the
// gradients of an fp32 table too.
TEST(SparseClient, KeysGroupedByShardAreSentFromTheCallersMemory) {
  Rig rig(2, {Table("emb", 16)});
  KeyDeduplicator dedup;
  UniqueKeys u;
  dedup.DeduplicateByShard(RandomKeys(3000, 3), TableSalt("emb"), 2, &u);
  std::vector<float> rows(u.keys.size() * 16);
  std::vector<float> grads(u.keys.size() * 16, 0.5f);
  Ticket pull = rig.client->PullRows(0, 0, {{0, u.keys, absl::MakeSpan(rows)}});
  Ticket push = rig.client->PushRows({{0, u.keys, grads}}, 0);
  ASSERT_TRUE(rig.transport->WaitForAttempts(4));
  auto borrowed = [](const FakeRequest& r, const void* p) {
    for (const auto& [data, size] : r.slices) {
      if (data == p) return true;
    }
    return false;
  };
  for (const FakeRequest& r : rig.transport->Waiting()) {
    const int64_t begin = u.shard_begin[r.shard];
    EXPECT_TRUE(borrowed(r, u.keys.data() + begin)) << "shard " << r.shard;
    if (r.rpc == Rpc::kPush) {
      EXPECT_TRUE(borrowed(r, grads.data() + begin * 16));
    }
  }
  rig.AnswerAll();
  ASSERT_TRUE(pull.Wait(kWait).ok());
  ASSERT_TRUE(push.Wait(kWait).ok());
  ExpectRows(0, 16, u.keys, rows);
}

// A batch with repeated keys: unique keys, the gradients summed per key
// through the inverse index, each key pushed once.
TEST(SparseClient, DuplicateKeysArePushedOnceWithTheirSum) {
  Rig rig(2, {Table("emb", 2)});
  const std::vector<uint64_t> batch = {5, 9, 5, 77, 9, 5, 1234567};
  std::vector<float> per_position;
  for (size_t i = 0; i < batch.size(); ++i) {
    per_position.push_back(static_cast<float>(i));
    per_position.push_back(1.0f);
  }
  KeyDeduplicator dedup;
  UniqueKeys u;
  dedup.Deduplicate(batch, &u);
  std::vector<float> sums(u.keys.size() * 2);
  ASSERT_TRUE(
      SumRowsByInverse(u.inverse, 2, per_position, absl::MakeSpan(sums)).ok());
  Ticket t = rig.client->PushRows({{0, u.keys, sums}}, 4);
  rig.AnswerAll();
  ASSERT_TRUE(t.Wait(kWait).ok());
  std::map<std::pair<int, uint64_t>, std::vector<float>> expected = {
      {{0, 5}, {0 + 2 + 5, 3}},
      {{0, 9}, {1 + 4, 2}},
      {{0, 77}, {3, 1}},
      {{0, 1234567}, {6, 1}}};
  EXPECT_EQ(rig.server.pushed, expected);
}

TEST(SparseClient, BigCallsAreSplitAtTheMessageLimit) {
  ParameterClientOptions options;
  options.max_request_bytes = 1024;  // 15 rows of dim 16 fp32 a message
  Rig rig(1, {Table("a", 16), Table("b", 1)}, options);
  const std::vector<uint64_t> a = RandomKeys(200, 4), b = RandomKeys(300, 5);
  std::vector<float> ra(a.size() * 16), rb(b.size());
  Ticket pull = rig.client->PullRows(
      0, 0, {{0, a, absl::MakeSpan(ra)}, {1, b, absl::MakeSpan(rb)}});
  std::vector<float> ga(a.size() * 16, 1.0f), gb(b.size(), 2.0f);
  Ticket push = rig.client->PushRows({{0, a, ga}, {1, b, gb}}, 0);
  int pulls = 0;
  std::set<uint64_t> seqs;
  while (rig.transport->WaitForAttempts(1, absl::ZeroDuration())) {
    const FakeRequest r = rig.transport->Answer(
        [&](const FakeRequest& r) { return rig.server(r); });
    std::set<int> tables;
    int64_t bytes = 0;
    for (const FakeSparse& s : r.sparse) {
      EXPECT_TRUE(tables.insert(s.table).second) << "a table twice";
      const int dim = s.table == 0 ? 16 : 1;
      bytes += kSparseRowsOverhead +
               s.num_rows *
                   (r.rpc == Rpc::kPull ? std::max(8, 4 * dim) : 8 + 4 * dim);
    }
    EXPECT_LE(bytes, 1024);
    if (r.rpc == Rpc::kPull) ++pulls;
    if (r.rpc == Rpc::kPush) {
      EXPECT_TRUE(seqs.insert(r.push.seq()).second);
    }
  }
  EXPECT_GE(pulls, 14);         // 200 rows of 64 bytes at 15 a message
  EXPECT_GE(seqs.size(), 18u);  // and 300 rows of 12 bytes at 80
  ASSERT_TRUE(pull.Wait(kWait).ok());
  ASSERT_TRUE(push.Wait(kWait).ok());
  ExpectRows(0, 16, a, ra);
  ExpectRows(1, 1, b, rb);
  EXPECT_EQ(rig.server.pushed.size(), a.size() + b.size());
  for (uint64_t k : a) {
    EXPECT_EQ(rig.server.pushed[std::make_pair(0, k)][15], 1.0f);
  }
  for (uint64_t k : b) {
    EXPECT_EQ(rig.server.pushed[std::make_pair(1, k)][0], 2.0f);
  }
}

// Rows whose bytes arrive cut anywhere (rows and elements straddling the
// received slices), in every dtype, land in order.
TEST(SparseClient, RowsStraddlingSlicesInEveryDtype) {
  for (DType dtype : {FLOAT32, FLOAT16, BFLOAT16}) {
    Rig rig(2, {Table("t", 3, dtype)});
    const std::vector<uint64_t> keys = RandomKeys(500, 6);
    std::vector<float> rows(keys.size() * 3);
    Ticket t = rig.client->PullRows(0, 0, {{0, keys, absl::MakeSpan(rows)}});
    rig.transport->AnswerAll([&](const FakeRequest& r) {
      for (const FakeSparse& s : r.sparse) EXPECT_EQ(Known(s.dtype), dtype);
      FakeReply reply = rig.server(r);
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(reply.response.Dump(&slices).ok());
      std::string all;
      for (const grpc::Slice& s : slices) {
        all.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      std::vector<grpc::Slice> cut;
      for (size_t i = 0; i < all.size(); i += 7) {
        cut.emplace_back(all.data() + i, std::min<size_t>(7, all.size() - i));
      }
      reply.response = grpc::ByteBuffer(cut.data(), cut.size());
      return reply;
    });
    ASSERT_TRUE(t.Wait(kWait).ok()) << t.Wait(kWait);
    ExpectRows(0, 3, keys, rows);
  }
}

TEST(SparseClient, NarrowDtypesArePushedNarrow) {
  for (DType dtype : {FLOAT16, BFLOAT16}) {
    Rig rig(1, {Table("t", 4, dtype)});
    const std::vector<uint64_t> keys = {1, 2, 3};
    const std::vector<float> grads = {1,  2,  3, 4,  0.5, 0.25,
                                      -1, -2, 8, 16, 32,  64};
    Ticket t = rig.client->PushRows({{0, keys, grads}}, 0);
    ASSERT_TRUE(rig.transport->WaitForAttempts(1));
    const FakeRequest r = rig.transport->Waiting()[0];
    ASSERT_EQ(r.sparse.size(), 1u);
    EXPECT_EQ(r.sparse[0].dtype, dtype);
    EXPECT_EQ(r.sparse[0].rows.size(), grads.size() * 2);
    rig.AnswerAll();
    ASSERT_TRUE(t.Wait(kWait).ok());
    EXPECT_EQ(rig.server.pushed[std::make_pair(0, uint64_t{2})],
              (std::vector<float>{0.5, 0.25, -1, -2}));
  }
}

// A push that fails with UNAVAILABLE is retried with the same sequence
// number and the same rows, so the shard applies it once.
TEST(SparseClient, RetriedPushKeepsItsSequenceNumber) {
  Rig rig(1, {Table("t", 2)});
  const std::vector<uint64_t> keys = {10, 20};
  const std::vector<float> grads = {1, 2, 3, 4};
  const std::vector<float> dense_grad(10, 0.0f);
  Ticket dense = rig.client->PushTensor(0, dense_grad, 0);
  Ticket t = rig.client->PushRows({{0, keys, grads}}, 0);
  ASSERT_TRUE(rig.transport->WaitForAttempts(2));
  FakeRequest first_dense = rig.transport->Answer(
      [&](const FakeRequest& r) { return rig.server(r); });
  const FakeRequest first = rig.transport->Answer([](const FakeRequest&) {
    return FakeReply::Error(absl::UnavailableError("shard restarting"));
  });
  EXPECT_EQ(first_dense.push.seq(), SeqBase(0) + 1);
  EXPECT_EQ(first.push.seq(), SeqBase(0) + 2) << "one sequence with dense";
  ASSERT_EQ(rig.transport->FireTimers(), 1);
  ASSERT_TRUE(rig.transport->WaitForAttempts(1));
  const FakeRequest second = rig.transport->Answer([](const FakeRequest&) {
    PushResponse response;
    response.set_duplicate(true);
    return FakeReply{absl::OkStatus(), FakeTransport::Encode(response)};
  });
  EXPECT_EQ(second.push.seq(), first.push.seq());
  ASSERT_EQ(second.sparse.size(), 1u);
  EXPECT_EQ(second.sparse[0].keys, first.sparse[0].keys);
  EXPECT_EQ(second.sparse[0].rows, first.sparse[0].rows);
  ASSERT_TRUE(t.Wait(kWait).ok());
  EXPECT_EQ(t.duplicates(), 1);
  ASSERT_TRUE(dense.Wait(kWait).ok());
}

// A failover moves shard 0 while a push is in flight on both shards: shard
// 0's part is sent again to the new address at once, with its sequence
// number and rows (the new primary holds it already: a duplicate); shard
// 1's part is not disturbed.
TEST(SparseClient, APushInFlightFollowsItsShardToItsNewAddress) {
  Rig rig(2, {Table("t", 2)});
  const std::vector<uint64_t> keys = RandomKeys(20, 3);
  const std::vector<float> grads(keys.size() * 2, 0.5f);
  Ticket t = rig.client->PushRows({{0, keys, grads}}, 0);
  ASSERT_TRUE(rig.transport->WaitForAttempts(2));
  const std::vector<FakeRequest> before = rig.transport->Waiting();
  EXPECT_EQ(rig.client->SetServerAddresses({"b"}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(rig.client->SetServerAddresses({"a2", "fake-shard-1"}).ok());
  const std::vector<FakeRequest> after = rig.transport->Waiting();
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(rig.transport->cancelled(), 1);
  for (const FakeRequest& r : after) {
    const FakeRequest& was = before[0].shard == r.shard ? before[0] : before[1];
    EXPECT_EQ(r.address, r.shard == 0 ? "a2" : "fake-shard-1");
    EXPECT_EQ(r.push.seq(), was.push.seq());
    ASSERT_EQ(r.sparse.size(), 1u);
    EXPECT_EQ(r.sparse[0].keys, was.sparse[0].keys);
  }
  rig.transport->AnswerAll([&](const FakeRequest& r) {
    if (r.shard == 1) return rig.server(r);
    EXPECT_TRUE(r.names_its_shard());
    PushResponse response;
    response.set_duplicate(true);
    return FakeReply{absl::OkStatus(), FakeTransport::Encode(response)};
  });
  ASSERT_TRUE(t.Wait(kWait).ok()) << t.Wait(kWait);
  EXPECT_EQ(t.duplicates(), 1);
}

TEST(SparseClient, ErrorsNameTheShard) {
  Rig rig(2, {Table("t", 2)});
  const std::vector<uint64_t> keys = RandomKeys(40, 7);
  std::vector<float> rows(keys.size() * 2);
  Ticket t = rig.client->PullRows(0, 0, {{0, keys, absl::MakeSpan(rows)}});
  rig.transport->AnswerAll([&](const FakeRequest& r) {
    if (r.shard == 1) {
      return FakeReply::Error(
          absl::ResourceExhaustedError("table t is at capacity"));
    }
    return rig.server(r);
  });
  absl::Status s = t.Wait(kWait);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shard 1")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "fake-shard-1")) << s;

  // An answer with fewer rows than asked.
  Ticket bad = rig.client->PullRows(0, 0, {{0, keys, absl::MakeSpan(rows)}});
  rig.transport->AnswerAll([&](const FakeRequest& r) {
    PullResponse response;
    FakeSparse rows = rig.server.Rows(0, FLOAT32, r.sparse[0].keys);
    if (r.shard == 0) {
      rows.num_rows -= 1;
      rows.rows.resize(rows.rows.size() - 8);
    }
    return FakeReply{
        absl::OkStatus(),
        FakeTransport::EncodeSparse(response, kPullResponseFields, {rows})};
  });
  s = bad.Wait(kWait);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shard 0")) << s;
}

TEST(SparseClient, BadArgumentsFailWithoutSending) {
  Rig rig(2, {Table("t", 2)});
  const std::vector<uint64_t> keys = {1, 2};
  std::vector<float> rows(4), short_rows(3);
  struct Case {
    const char* what;
    Ticket ticket;
  };
  std::vector<Case> cases = {
      {"unknown table",
       rig.client->PullRows(0, 0, {{1, keys, absl::MakeSpan(rows)}})},
      {"short rows",
       rig.client->PullRows(0, 0, {{0, keys, absl::MakeSpan(short_rows)}})},
      {"short grads", rig.client->PushRows({{0, keys, short_rows}}, 0)},
      {"table twice",
       rig.client->PushRows({{0, keys, rows}, {0, keys, rows}}, 0)},
      {"negative table",
       rig.client
           ->PushRowsAndPull({}, 0, 0, 1, 0, {{-1, keys, absl::MakeSpan(rows)}})
           .pull},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(absl::IsInvalidArgument(c.ticket.Wait(kWait))) << c.what;
  }
  EXPECT_EQ(rig.transport->started(), 0);
}

// The next batch's rows ride on the push; where the shard ignores
// then_pull, they are pulled after it.
TEST(SparseClient, PushAndPullBringsTheNextRows) {
  for (bool honour : {true, false}) {
    Rig rig(2, {Table("t", 4), Table("u", 2)});
    rig.server.honour_then_pull = honour;
    rig.server.version = {3, 4};
    const std::vector<uint64_t> keys = RandomKeys(30, 8);
    const std::vector<uint64_t> next = RandomKeys(60, 9);
    std::vector<float> grads(keys.size() * 4, 1.0f);
    std::vector<float> rows(next.size() * 2);
    ParameterClient::StepTickets t = rig.client->PushRowsAndPull(
        {{0, keys, grads}}, 5, 2, 6, 6, {{1, next, absl::MakeSpan(rows)}});
    ASSERT_TRUE(rig.transport->WaitForAttempts(2));
    for (const FakeRequest& r : rig.transport->Waiting()) {
      ASSERT_EQ(r.rpc, Rpc::kPush);
      EXPECT_EQ(r.push.clock(), 5);
      EXPECT_EQ(r.push.base_version(), 2);
      EXPECT_FALSE(r.push.end_of_step());
      ASSERT_TRUE(r.push.has_then_pull());
      EXPECT_EQ(r.push.then_pull().clock(), 6);
      EXPECT_EQ(r.push.then_pull().min_version(), 6);
      EXPECT_TRUE(r.push.then_pull().sparse_only());
    }
    rig.AnswerAll();
    ASSERT_TRUE(t.end.Wait(kWait).ok());
    ASSERT_TRUE(t.pull.Wait(kWait).ok()) << t.pull.Wait(kWait);
    ExpectRows(1, 2, next, rows);
    EXPECT_EQ(t.pull.version(), honour ? 4 : 3) << honour;
    EXPECT_EQ(rig.server.pushed.size(), keys.size());
  }
}

// A failed push fails the rows it asked for.
TEST(SparseClient, FailedPushFailsItsPull) {
  Rig rig(1, {Table("t", 4)});
  const std::vector<uint64_t> keys = {1}, next = {2, 3};
  std::vector<float> grads(4), rows(8);
  ParameterClient::StepTickets t = rig.client->PushRowsAndPull(
      {{0, keys, grads}}, 0, 0, 1, 0, {{0, next, absl::MakeSpan(rows)}});
  rig.transport->AnswerAll([](const FakeRequest&) {
    return FakeReply::Error(absl::InvalidArgumentError("NaN in a gradient"));
  });
  EXPECT_TRUE(absl::IsInvalidArgument(t.end.Wait(kWait)));
  EXPECT_TRUE(absl::IsInvalidArgument(t.pull.Wait(kWait)));
}

TEST(SparseClient, RefusesBadTables) {
  ParameterClientOptions options;
  options.server_addresses.resize(1);
  options.sparse_tables = {Table("t", 0)};
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParameterClient::CreateWithTransport(options, "job", 1, OneTensor(1),
                                           std::make_unique<FakeTransport>(1))
          .status()));
}

}  // namespace
}  // namespace ps::client
