// The dense table's push validation: fp16/bf16 widening, segmented
// payloads, NaN/Inf checks, through ShardStore and on PrepareDenseGradient
// directly.
#include "server/shard/dense_gradient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

}  // namespace
}  // namespace ps::server
