// The dense table: through ShardStore (a push applied as a whole) and on
// its own through the table seam (table.h).
#include "server/shard/dense_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/platform/fake_clock.h"
#include "common/spec/model.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "gmock/gmock.h"
#include "server/shard/apply_pool.h"
#include "server/shard/dense_gradient.h"
#include "server/shard/shard_store.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

// ASP applies a push of several chunks as a whole: with SGD the NaN/Inf
// check runs inside the update, whose results are published only once every
// chunk is found finite, so a bad last chunk leaves the first ones as they
// were too (momentum: checked before anything is applied). Chunks in fp16
// or bf16 mix with fp32 ones.
TEST(ShardStore, AspPushWithOneBadChunkChangesNoChunk) {
  for (auto kind : {OptimizerSpec::SGD, OptimizerSpec::MOMENTUM}) {
    for (DType first : {FLOAT32, BFLOAT16}) {
      SCOPED_TRACE(testing::Message() << OptimizerSpec::Kind_Name(kind) << " "
                                      << DType_Name(first));
      FakeClock clock;
      auto store = NewStore(&clock);
      JobSpec spec = MakeSpec(ConsistencySpec::ASP);
      spec.mutable_optimizer()->set_kind(kind);
      spec.mutable_optimizer()->set_momentum(0.5f);
      ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
      auto placement = *store->GetPlacement("job1");
      const std::vector<float> before = Weights(*store);
      std::vector<std::vector<char>> buffers;
      for (const Chunk& c : placement->chunks) {
        const std::vector<float> g(c.num_elements, 0.25f);
        const DType dtype = c.chunk_id == 0 ? first : FLOAT32;
        buffers.emplace_back(c.num_elements * DTypeSize(dtype));
        NarrowFromFloat(dtype, g, buffers.back().data());
      }
      auto make = [&](uint64_t seq) {
        PushArgs args = PushHeader(1, seq, 0, 0, true);
        // The chunks in descending order: the locks are still taken in one.
        for (auto it = placement->chunks.rbegin();
             it != placement->chunks.rend(); ++it) {
          const std::vector<char>& b = buffers[it->chunk_id];
          args.chunks.push_back(Contiguous(
              it->chunk_id, it->chunk_id == 0 ? first : FLOAT32,
              it->num_elements, absl::string_view(b.data(), b.size())));
        }
        return args;
      };
      // The chunk pushed last holds an Inf.
      const float inf = std::numeric_limits<float>::infinity();
      std::memcpy(buffers[1].data() + 8, &inf, 4);
      auto bad = store->Push(make(1), Far());
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(bad.status().message()),
                  testing::HasSubstr("chunk 1 of the gradient holds NaN"));
      EXPECT_EQ(Weights(*store), before);
      EXPECT_EQ(Version(*store), 0);
      EXPECT_EQ(store->GetShardStatus("job1")->rejected_pushes(), 1);
      // Repaired, the next push applies to every chunk once (momentum's
      // velocity started from zero: the bad push left it alone).
      const float quarter = 0.25f;
      std::memcpy(buffers[1].data() + 8, &quarter, 4);
      ASSERT_TRUE(store->Push(make(2), Far()).ok());
      ExpectAll(Weights(*store), 0.75f);
      EXPECT_EQ(Version(*store), 1);
    }
  }
}

// --- DenseTable on its own, through the seam -------------------------------

// MakeSpec's dense table on shard `shard` of `num_shards` (chunks: "a" is
// 0, 1, 2; "b" is 3, 4).
std::unique_ptr<DenseTable> NewTable(const JobSpec& spec, int shard = 0,
                                     int num_shards = 1) {
  std::vector<TensorSpec> tensors = *ExpandModel(spec.model());
  auto placement = std::make_shared<const Placement>(
      *ComputePlacement(tensors, num_shards, spec.chunk_bytes()));
  auto table =
      DenseTable::Create("job1", spec, std::move(tensors), placement, shard);
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

// A push by `worker` to chunks `ids`, element i of a chunk at offset o of
// tensor t holding value(t, o + i); its payload lives in `storage`.
template <typename Fn>
PushArgs ChunkPush(int64_t worker, const std::vector<int64_t>& ids, Fn value,
                   std::vector<std::vector<float>>* storage) {
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  const Placement p =
      *ComputePlacement(*ExpandModel(spec.model()), 1, spec.chunk_bytes());
  PushArgs args = PushHeader(worker, 1, 0, 0, false);
  storage->reserve(storage->size() + ids.size());
  for (int64_t id : ids) {
    const Chunk& c = p.chunks[id];
    std::vector<float>& g = storage->emplace_back(c.num_elements);
    for (int64_t i = 0; i < c.num_elements; ++i) {
      g[i] = value(c.tensor_index, c.offset + i);
    }
    args.chunks.push_back(
        Contiguous(id, FLOAT32, c.num_elements,
                   absl::string_view(reinterpret_cast<const char*>(g.data()),
                                     c.num_elements * 4)));
  }
  return args;
}

PushArgs ValuePush(int64_t worker, const std::vector<int64_t>& ids, float v,
                   std::vector<std::vector<float>>* storage) {
  return ChunkPush(
      worker, ids, [v](int, int64_t) { return v; }, storage);
}

// The weights `table` hands out for `ids` (all: empty), in that order.
std::vector<float> TableWeights(DenseTable& table,
                                const std::vector<int64_t>& ids = {}) {
  std::vector<float> out;
  auto fn = [&](const Chunk&, absl::Span<const float> w, const WeightsRef&) {
    out.insert(out.end(), w.begin(), w.end());
  };
  const ChunkSink sink(fn);
  PullSinks sinks;
  sinks.chunks = &sink;
  PullArgs args;
  args.chunk_ids = ids;
  const int64_t bytes = table.Pull(args, sinks).value();
  EXPECT_EQ(bytes, static_cast<int64_t>(out.size() * sizeof(float)));
  return out;
}

void StageValue(DenseTable& table, int64_t worker, int64_t step,
                const std::vector<int64_t>& ids, float v, bool final = false,
                const std::vector<int64_t>& early = {},
                StageResult* result = nullptr) {
  std::vector<std::vector<float>> storage;
  const PushArgs args = ValuePush(worker, ids, v, &storage);
  auto gradient = table.Prepare(args, /*apply_now=*/false);
  ASSERT_TRUE(gradient.ok()) << gradient.status();
  EXPECT_FALSE((*gradient)->check_deferred);
  StageRequest request;
  request.worker_id = worker;
  request.step = step;
  request.final = final;
  request.early_workers = early;
  StageResult r = table.Stage(args, **gradient, request);
  if (result != nullptr) *result = std::move(r);
}

// The step close applies the average of the counted workers' gradients of
// the step; a gradient staged by a worker not counted is dropped with it.
TEST(DenseTable, ApplyStepAveragesTheCountedWorkers) {
  auto table = NewTable(MakeSpec(ConsistencySpec::BSP));
  ApplyPool pool(1);
  StageValue(*table, 1, 0, {0, 1, 2, 3, 4}, 1.0f);
  StageValue(*table, 2, 0, {0, 1, 2, 3, 4}, 2.0f);
  StageValue(*table, 2, 0, {0, 1, 2, 3, 4}, 1.0f);  // adds to its own
  StageValue(*table, 3, 0, {0, 1, 2, 3, 4}, 100.0f);
  ExpectAll(TableWeights(*table), 1.0f);  // nothing applied yet
  const std::vector<int64_t> counted = {1, 2};
  table->ApplyStep(0, counted, pool);
  ExpectAll(TableWeights(*table), 1.0f - 2.0f);  // (1 + 3) / 2
  // Worker 3's gradient of step 0 does not leak into step 1.
  StageValue(*table, 1, 1, {0, 1, 2, 3, 4}, 0.5f);
  const std::vector<int64_t> one = {1, 3};
  table->ApplyStep(1, one, pool);
  ExpectAll(TableWeights(*table), -1.0f - 0.25f);
}

// With early workers, the push that completes a chunk applies it at once;
// a later push to it in the step is dropped, a snapshot of the open step
// records it as it was, and the close leaves it alone.
TEST(DenseTable, StageAppliesAChunkOnceEveryEarlyWorkerIsFinal) {
  auto table = NewTable(MakeSpec(ConsistencySpec::BSP));
  ApplyPool pool(2);
  const std::vector<int64_t> workers = {1, 2};
  StageResult r;
  StageValue(*table, 1, 0, {0}, 1.0f, /*final=*/true, workers, &r);
  EXPECT_TRUE(r.applied_early.empty());
  StageValue(*table, 2, 0, {0, 1}, 3.0f, /*final=*/true, workers, &r);
  EXPECT_EQ(r.applied_early, std::vector<int>{0});
  EXPECT_EQ(r.dropped, 0);
  ExpectAll(TableWeights(*table, {0}), 1.0f - 2.0f);
  ExpectAll(TableWeights(*table, {1}), 1.0f);
  StageValue(*table, 1, 0, {0, 1}, 50.0f, /*final=*/true, workers, &r);
  EXPECT_EQ(r.dropped, 1);  // chunk 0; chunk 1 is now complete
  EXPECT_EQ(r.applied_early, std::vector<int>{1});
  CheckpointData open;
  table->Snapshot(0, &open);
  ASSERT_EQ(open.ranges.size(), 5u);
  ExpectAll(open.ranges[0].weights, 1.0f);
  ExpectAll(open.ranges[1].weights, 1.0f);
  table->ApplyStep(0, workers, pool);
  ExpectAll(TableWeights(*table, {0}), -1.0f);
  ExpectAll(TableWeights(*table, {1}), 1.0f - 26.5f);
  ExpectAll(TableWeights(*table, {2, 3, 4}), 1.0f);
}

// A snapshot restores onto another number of shards, optimizer state
// included; files of another model or that miss a range are refused.
TEST(DenseTable, SnapshotRestoresOntoAnotherLayout) {
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  spec.mutable_optimizer()->set_momentum(0.5f);
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};
  auto distinct = [](int t, int64_t i) { return 0.01f * i + t; };
  auto apply = [&](DenseTable& table, const std::vector<int64_t>& ids) {
    std::vector<std::vector<float>> storage;
    const PushArgs args = ChunkPush(1, ids, distinct, &storage);
    auto gradient = table.Prepare(args, /*apply_now=*/true);
    ASSERT_TRUE(gradient.ok()) << gradient.status();
    ASSERT_TRUE(table.ApplyNow(args, **gradient, UpdateRate{0, 1.0f}).ok());
  };
  auto one = NewTable(spec);
  apply(*one, all);
  CheckpointData data;
  data.spec = spec;
  one->Snapshot(1, &data);
  const std::vector<CheckpointData> files = {data};
  std::vector<std::unique_ptr<DenseTable>> two;
  for (int shard = 0; shard < 2; ++shard) {
    two.push_back(NewTable(spec, shard, 2));
    ASSERT_TRUE(two.back()->CheckRestore(files).ok());
    two.back()->Restore(files);
  }
  // The same second update on both: equal only if the momentum came back.
  apply(*one, all);
  const Placement p =
      *ComputePlacement(*ExpandModel(spec.model()), 2, spec.chunk_bytes());
  for (int shard = 0; shard < 2; ++shard) {
    apply(*two[shard], p.shard_chunks[shard]);
    EXPECT_EQ(TableWeights(*two[shard]),
              TableWeights(*one, p.shard_chunks[shard]));
  }

  JobSpec other = spec;
  other.mutable_model()->mutable_tensors(1)->set_shape(0, 25);
  absl::Status s = NewTable(other)->CheckRestore(files);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("tensor 1"));
  std::vector<CheckpointData> short_files = files;
  short_files[0].ranges.pop_back();
  s = NewTable(spec)->CheckRestore(short_files);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("does not cover"));
}

// Pulls name chunks by id; the parts a pull reads are their local indices.
TEST(DenseTable, PullsReadTheirChunksAsParts) {
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  const Placement p =
      *ComputePlacement(*ExpandModel(spec.model()), 2, spec.chunk_bytes());
  auto table = NewTable(spec, 0, 2);
  const std::vector<int64_t>& own = p.shard_chunks[0];
  ASSERT_GE(own.size(), 2u);
  EXPECT_EQ(table->num_parts(), static_cast<int>(own.size()));
  PullArgs args;
  args.chunk_ids = {p.shard_chunks[1].front()};
  EXPECT_EQ(table->CheckPull(args).code(), absl::StatusCode::kInvalidArgument);
  args.chunk_ids = {99};
  EXPECT_EQ(table->CheckPull(args).code(), absl::StatusCode::kInvalidArgument);
  args.chunk_ids = {own[1], own[0]};
  ASSERT_TRUE(table->CheckPull(args).ok());
  std::vector<int> parts;
  auto record = [&](int part) {
    parts.push_back(part);
    return true;
  };
  EXPECT_TRUE(table->ForEachPulledPart(args, record));
  EXPECT_EQ(parts, (std::vector<int>{1, 0}));
  parts.clear();
  args.chunk_ids.clear();
  EXPECT_TRUE(table->ForEachPulledPart(args, record));
  EXPECT_EQ(parts.size(), own.size());
  EXPECT_FALSE(table->ForEachPulledPart(args, [](int) { return false; }));
}

}  // namespace
}  // namespace ps::server
