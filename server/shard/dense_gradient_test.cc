// The dense table's push validation: fp16/bf16 widening, segmented
// payloads, NaN/Inf checks, through ShardStore and on PrepareDenseGradient
// directly.
#include "server/shard/dense_gradient.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "server/shard/shard_store.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

TEST(ShardStore, NonFiniteGradientsPassWhenTheJobAllowsThem) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.set_allow_nonfinite_gradients(true);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(
      PushValue(*store, 1, 1, 0, std::numeric_limits<float>::infinity(), true)
          .ok());
  EXPECT_TRUE(std::isinf(Weights(*store)[0]));
}

TEST(ShardStore, HalfPrecisionGradientsAreWidened) {
  for (DType dtype : {FLOAT16, BFLOAT16}) {
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(
        store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::ASP), {1})).ok());
    auto placement = *store->GetPlacement("job1");
    std::vector<std::vector<char>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (const Chunk& c : placement->chunks) {
      std::vector<float> g(c.num_elements, 0.75f);
      buffers.emplace_back(c.num_elements * 2);
      NarrowFromFloat(dtype, g, buffers.back().data());
    }
    for (const Chunk& c : placement->chunks) {
      args.chunks.push_back(
          Contiguous(c.chunk_id, dtype, c.num_elements,
                     absl::string_view(buffers[c.chunk_id].data(),
                                       buffers[c.chunk_id].size())));
    }
    ASSERT_TRUE(store->Push(args, Far()).ok());
    ExpectAll(Weights(*store), 0.25f);
  }
}

// Payloads split over receive buffers at odd offsets apply exactly like
// contiguous ones, and a NaN straddling two segments is still caught.
TEST(ShardStore, SegmentedPayloadsApplyAndAreChecked) {
  for (auto model : {ConsistencySpec::ASP, ConsistencySpec::BSP}) {
    for (size_t piece : {size_t{1}, size_t{7}, size_t{64}}) {
      FakeClock clock;
      auto store = NewStore(&clock);
      ASSERT_TRUE(store->SetupJob(JobSetup(MakeSpec(model), {1})).ok());
      auto placement = *store->GetPlacement("job1");
      std::vector<std::vector<float>> buffers;
      for (const Chunk& c : placement->chunks) {
        buffers.emplace_back(c.num_elements, 0.25f);
      }
      auto make = [&](uint64_t seq) {
        PushArgs args = PushHeader(1, seq, 0, 0, true);
        for (const Chunk& c : placement->chunks) {
          PushChunk pc;
          pc.chunk_id = c.chunk_id;
          pc.dtype = FLOAT32;
          pc.num_elements = c.num_elements;
          const char* p =
              reinterpret_cast<const char*>(buffers[c.chunk_id].data());
          const size_t bytes = c.num_elements * 4;
          for (size_t off = 0; off < bytes; off += piece) {
            pc.segments.emplace_back(p + off, std::min(piece, bytes - off));
          }
          args.chunks.push_back(std::move(pc));
        }
        return args;
      };
      // A NaN whose bytes straddle a segment boundary (element 3 is bytes
      // 12..15; 7-byte pieces cut at 14): refused, nothing applied.
      buffers[1][3] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(store->Push(make(1), Far()).status().code(),
                absl::StatusCode::kInvalidArgument);
      ExpectAll(Weights(*store), 1.0f);
      buffers[1][3] = 0.25f;
      auto r = store->Push(make(2), Far());
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->version, 1);
      ExpectAll(Weights(*store), 0.75f);
    }
  }
}

// Shard 0's view of MakeSpec's model placed on two shards.
struct TwoShardLayout {
  TwoShardLayout() {
    const JobSpec spec = MakeSpec(ConsistencySpec::ASP);
    const std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                          spec.model().tensors().end());
    placement = *ComputePlacement(tensors, 2, spec.chunk_bytes());
    local_index.assign(placement.chunks.size(), -1);
    int next = 0;
    for (int64_t id : placement.shard_chunks[0]) local_index[id] = next++;
  }
  DenseLayout layout() const { return {"job1", 0, &placement, local_index}; }
  int64_t foreign() const {  // a chunk of shard 1
    return placement.shard_chunks[1].front();
  }
  int64_t own() const { return placement.shard_chunks[0].front(); }
  Placement placement;
  std::vector<int> local_index;
};

// Aligned fp32 payloads are read in place; split ones (and, for a checked
// apply, every fp32 one) are left in the receive buffers; fp16 is widened.
TEST(DenseGradient, ReadsInPlaceWhatItCanAndCountsTheBytes) {
  const TwoShardLayout l;
  const int64_t id = l.own();
  const int64_t n = l.placement.chunks[id].num_elements;
  std::vector<float> g(n, 0.5f);
  const absl::string_view bytes(reinterpret_cast<const char*>(g.data()), n * 4);
  std::vector<char> half(n * 2);
  NarrowFromFloat(FLOAT16, g, half.data());

  const PushChunk c = Contiguous(id, FLOAT32, n, bytes);
  auto in_place = PrepareDenseGradient(l.layout(), {c}, false, false);
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  EXPECT_EQ((*in_place)->grads[0].data(), g.data());
  EXPECT_EQ((*in_place)->bytes, n * 4);
  EXPECT_FALSE((*in_place)->check_deferred);

  auto checked = PrepareDenseGradient(l.layout(), {c}, true, false);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ((*checked)->grads[0].data(), nullptr);
  EXPECT_TRUE((*checked)->check_deferred);

  PushChunk s = c;
  s.data = {};
  s.segments = {bytes.substr(0, 6), bytes.substr(6)};
  auto split = PrepareDenseGradient(l.layout(), {s}, false, false);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ((*split)->grads[0].data(), nullptr);
  EXPECT_EQ((*split)->bytes, n * 4);

  const PushChunk h =
      Contiguous(id, FLOAT16, n, absl::string_view(half.data(), half.size()));
  auto widened = PrepareDenseGradient(l.layout(), {h}, true, false);
  ASSERT_TRUE(widened.ok()) << widened.status();
  ASSERT_EQ((*widened)->grads[0].size(), static_cast<size_t>(n));
  EXPECT_EQ((*widened)->grads[0][n - 1], 0.5f);
  EXPECT_EQ((*widened)->bytes, n * 2);
}

TEST(DenseGradient, RefusesAnotherShardsChunkAndNamesIt) {
  const TwoShardLayout l;
  const int64_t id = l.foreign();
  const int64_t n = l.placement.chunks[id].num_elements;
  std::vector<float> g(n, 0.5f);
  const PushChunk c = Contiguous(
      id, FLOAT32, n,
      absl::string_view(reinterpret_cast<const char*>(g.data()), n * 4));
  const absl::Status s =
      PrepareDenseGradient(l.layout(), {c}, false, false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lives on shard 1, not on shard 0"),
            std::string::npos)
      << s;
}

// The finiteness check looks at the exponent bits only: NaN, +Inf and -Inf
// are refused, the largest finite floats and denormals pass.
TEST(DenseGradient, AllFiniteTellsNanAndInfFromExtremeFloats) {
  const float max = std::numeric_limits<float>::max();
  const float denormal = std::numeric_limits<float>::denorm_min();
  std::vector<float> g(37, 1.0f);
  g[3] = max;
  g[4] = -max;
  g[5] = denormal;
  EXPECT_TRUE(AllFinite(g));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> b = g;
    b[36] = bad;
    EXPECT_FALSE(AllFinite(b)) << bad;
  }
}

// ---- Sparse updates of dense chunks (ChunkPayload.indices, top-k
// compression): applied as the dense gradient they stand for, zeros
// counted, with the job's optimizer.

// A sparse update's storage: offsets and values per chunk.
struct SparseUpdate {
  std::vector<int64_t> chunk_ids;
  std::vector<std::vector<uint32_t>> indices;
  std::vector<std::vector<float>> values;

  // The push, its payloads pointing into this update.
  PushArgs Args(int64_t worker, uint64_t seq, int64_t clock,
                int64_t base) const {
    PushArgs args = PushHeader(worker, seq, clock, base, true);
    for (size_t i = 0; i < chunk_ids.size(); ++i) {
      PushChunk c = Contiguous(
          chunk_ids[i], FLOAT32, static_cast<int64_t>(values[i].size()),
          absl::string_view(reinterpret_cast<const char*>(values[i].data()),
                            values[i].size() * 4));
      c.indices =
          absl::string_view(reinterpret_cast<const char*>(indices[i].data()),
                            indices[i].size() * 4);
      args.chunks.push_back(c);
    }
    return args;
  }
  // The dense gradients it stands for (zeros elsewhere), by chunk.
  std::vector<std::vector<float>> Dense(const Placement& p) const {
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < chunk_ids.size(); ++i) {
      out.emplace_back(p.chunks[chunk_ids[i]].num_elements, 0.0f);
      for (size_t k = 0; k < indices[i].size(); ++k) {
        out.back()[indices[i][k]] = values[i][k];
      }
    }
    return out;
  }
};

// Worker w's update of step t: 3 entries of every chunk, at offsets and
// with values that change with both (some repeat, some do not).
SparseUpdate UpdateOf(const Placement& p, int64_t w, int64_t t) {
  SparseUpdate u;
  for (const Chunk& c : p.chunks) {
    u.chunk_ids.push_back(c.chunk_id);
    std::vector<uint32_t> at;
    for (uint32_t k : {0u, 5u, 9u}) {
      at.push_back(static_cast<uint32_t>((k + 2 * t + w) % c.num_elements));
    }
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    std::vector<float> v;
    for (size_t k = 0; k < at.size(); ++k) {
      v.push_back(0.1f * static_cast<float>(k + 1 + w) *
                  (t % 2 == 0 ? 1.0f : -0.5f));
    }
    u.indices.push_back(std::move(at));
    u.values.push_back(std::move(v));
  }
  return u;
}

PushArgs DenseArgs(const std::vector<std::vector<float>>& grads,
                   const SparseUpdate& u, int64_t worker, uint64_t seq,
                   int64_t clock, int64_t base) {
  PushArgs args = PushHeader(worker, seq, clock, base, true);
  for (size_t i = 0; i < grads.size(); ++i) {
    args.chunks.push_back(Contiguous(
        u.chunk_ids[i], FLOAT32, static_cast<int64_t>(grads[i].size()),
        absl::string_view(reinterpret_cast<const char*>(grads[i].data()),
                          grads[i].size() * 4)));
  }
  return args;
}

// A sparse push updates the weights and the optimizer's state exactly as
// the dense push of its zero-filled gradient: for SGD, momentum and Adam
// (with weight decay), applied at once (ASP) and summed over a BSP step of
// two workers.
TEST(DenseGradient, SparseUpdateIsTheDenseUpdateOfItsZeroFilledGradient) {
  for (auto kind :
       {OptimizerSpec::SGD, OptimizerSpec::MOMENTUM, OptimizerSpec::ADAM}) {
    for (auto model : {ConsistencySpec::ASP, ConsistencySpec::BSP}) {
      SCOPED_TRACE(absl::StrCat(OptimizerSpec::Kind_Name(kind), " ",
                                ConsistencySpec::Model_Name(model)));
      JobSpec spec = MakeSpec(model);
      spec.mutable_optimizer()->set_kind(kind);
      spec.mutable_optimizer()->set_learning_rate(0.1f);
      if (kind == OptimizerSpec::MOMENTUM) {
        spec.mutable_optimizer()->set_momentum(0.9f);
      }
      spec.mutable_optimizer()->set_weight_decay(0.01f);
      FakeClock clock;
      auto sparse = NewStore(&clock), dense = NewStore(&clock);
      ASSERT_TRUE(sparse->SetupJob(JobSetup(spec, {1, 2})).ok());
      ASSERT_TRUE(dense->SetupJob(JobSetup(spec, {1, 2})).ok());
      const Placement& p = **sparse->GetPlacement("job1");
      for (int64_t t = 0; t < 4; ++t) {
        for (int64_t w : {1, 2}) {
          const SparseUpdate u = UpdateOf(p, w, t);
          const std::vector<std::vector<float>> g = u.Dense(p);
          const uint64_t seq = static_cast<uint64_t>(t + 1);
          const int64_t base = model == ConsistencySpec::BSP ? t : 0;
          auto a = sparse->Push(u.Args(w, seq, t, base), Far());
          ASSERT_TRUE(a.ok()) << a.status();
          auto b = dense->Push(DenseArgs(g, u, w, seq, t, base), Far());
          ASSERT_TRUE(b.ok()) << b.status();
          EXPECT_EQ(a->version, b->version);
        }
      }
      const std::vector<float> ws = Weights(*sparse), wd = Weights(*dense);
      EXPECT_EQ(Version(*sparse), model == ConsistencySpec::BSP ? 4 : 8);
      EXPECT_EQ(ws, wd);
      EXPECT_NE(ws, std::vector<float>(ws.size(), 1.0f));
    }
  }
}

// What "zeros counted" means for momentum: an element touched once keeps
// moving with its velocity on the later pushes that do not touch it (lazy
// momentum would leave it where it was).
TEST(DenseGradient, SparseUpdateMovesUntouchedElementsByTheirMomentum) {
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  spec.mutable_optimizer()->set_momentum(0.5f);
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  SparseUpdate first, second;
  first.chunk_ids = second.chunk_ids = {0};
  first.indices = {{3}};
  first.values = {{1.0f}};
  second.indices = {{7}};
  second.values = {{2.0f}};
  ASSERT_TRUE(store->Push(first.Args(1, 1, 0, 0), Far()).ok());
  std::vector<float> w = Weights(*store);
  // v = g = 1, w = 1 - 0.5 * 1.
  EXPECT_FLOAT_EQ(w[3], 0.5f);
  EXPECT_FLOAT_EQ(w[7], 1.0f);
  ASSERT_TRUE(store->Push(second.Args(1, 2, 1, 1), Far()).ok());
  w = Weights(*store);
  // Element 3: v = 0.5 * 1 + 0 = 0.5, w = 0.5 - 0.25; element 7: v = 2.
  EXPECT_FLOAT_EQ(w[3], 0.25f);
  EXPECT_FLOAT_EQ(w[7], 0.0f);
  EXPECT_FLOAT_EQ(w[0], 1.0f);
}

// Malformed sparse updates are refused whole, naming the chunk, and apply
// nothing.
TEST(DenseGradient, SparseUpdateRefusesBadIndices) {
  struct Case {
    const char* name;
    std::vector<uint32_t> indices;
    std::vector<float> values;
    size_t index_bytes;  // 0: 4 per index
    const char* want;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"out of range",
       {2, 16},
       {1, 1},
       0,
       "sparse index 16 at position 1 is outside the chunk's"},
      {"descending", {5, 2}, {1, 1}, 0, "does not follow 5"},
      {"repeated", {4, 4}, {1, 1}, 0, "does not follow 4"},
      {"short indices", {1, 2}, {1, 1}, 6, "6 bytes of indices, expected 2"},
      {"more than the chunk", std::vector<uint32_t>(17, 0),
       std::vector<float>(17, 1.0f), 0, "a sparse update of 17 elements"},
      {"nan", {1, 2}, {1, nan}, 0, "holds NaN or Inf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(
        store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::ASP), {1})).ok());
    SparseUpdate u;
    u.chunk_ids = {1};
    u.indices = {c.indices};
    u.values = {c.values};
    PushArgs args = u.Args(1, 1, 0, 0);
    if (c.index_bytes > 0) {
      args.chunks[0].indices = args.chunks[0].indices.substr(0, c.index_bytes);
    }
    const absl::Status s = store->Push(args, Far()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("chunk 1"), std::string::npos) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    ExpectAll(Weights(*store), 1.0f);
  }
}

}  // namespace
}  // namespace ps::server
