#include "server/shard/shard_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "common/spec/test_job_spec.h"
#include "common/wire/placement.h"

namespace ps::server {

JobSpec MakeSpec(ConsistencySpec::Model model) {
  JobSpec spec = testing::ConstantSgdJob(model, {{"a", 40}, {"b", 24}});
  spec.set_name("t");
  spec.set_seed(7);
  spec.set_chunk_bytes(64);  // 16 floats per chunk
  return spec;
}

std::unique_ptr<ShardStore> NewStore(FakeClock* clock,
                                     const std::string& data_dir,
                                     int apply_threads) {
  ShardStoreOptions options;
  options.clock = clock;
  options.data_dir = data_dir;
  options.apply_threads = apply_threads;
  auto store = ShardStore::Create(options);
  EXPECT_TRUE(store.ok());
  return *std::move(store);
}

SetupJobRequest JobSetup(const JobSpec& spec, std::vector<int64_t> workers,
                         int shard, int num_shards) {
  SetupJobRequest r;
  r.set_job_id("job1");
  *r.mutable_spec() = spec;
  r.set_shard_index(shard);
  r.set_num_shards(num_shards);
  for (int64_t w : workers) r.add_worker_ids(w);
  return r;
}

PushChunk Contiguous(int64_t id, DType dtype, int64_t n,
                     absl::string_view data) {
  PushChunk c;
  c.chunk_id = id;
  c.dtype = dtype;
  c.num_elements = n;
  c.data = data;
  return c;
}

PushArgs PushHeader(int64_t worker, uint64_t seq, int64_t clock,
                    int64_t base_version, bool end_of_step) {
  PushArgs args;
  args.job_id = "job1";
  args.worker_id = worker;
  args.seq = seq;
  args.clock = clock;
  args.base_version = base_version;
  args.end_of_step = end_of_step;
  return args;
}

absl::StatusOr<PushResult> PushValue(ShardStore& store, int64_t worker,
                                     uint64_t seq, int64_t clock, float value,
                                     bool end_of_step, int64_t base,
                                     absl::Time deadline) {
  auto placement = store.GetPlacement("job1");
  if (!placement.ok()) return placement.status();
  std::vector<std::vector<float>> buffers;
  PushArgs args =
      PushHeader(worker, seq, clock, base < 0 ? 0 : base, end_of_step);
  for (const Chunk& c : (*placement)->chunks) {
    buffers.emplace_back(c.num_elements, value);
  }
  for (const Chunk& c : (*placement)->chunks) {
    if (c.shard != 0 && (*placement)->num_shards == 1) continue;
    PushChunk pc;
    pc.chunk_id = c.chunk_id;
    pc.dtype = FLOAT32;
    pc.num_elements = c.num_elements;
    pc.data = absl::string_view(
        reinterpret_cast<const char*>(buffers[c.chunk_id].data()),
        c.num_elements * sizeof(float));
    args.chunks.push_back(pc);
  }
  return store.Push(args, deadline);
}

absl::StatusOr<PushResult> PushChunks(ShardStore& store, int64_t worker,
                                      uint64_t seq, int64_t clock, float value,
                                      const std::vector<int64_t>& ids,
                                      bool final, bool end_of_step) {
  auto placement = store.GetPlacement("job1");
  if (!placement.ok()) return placement.status();
  std::vector<std::vector<float>> buffers;
  PushArgs args = PushHeader(worker, seq, clock, clock, end_of_step);
  args.chunks_final = final;
  buffers.reserve(ids.size());
  for (int64_t id : ids) {
    const Chunk& c = (*placement)->chunks[id];
    buffers.emplace_back(c.num_elements, value);
    args.chunks.push_back(Contiguous(
        id, FLOAT32, c.num_elements,
        absl::string_view(reinterpret_cast<const char*>(buffers.back().data()),
                          c.num_elements * sizeof(float))));
  }
  return store.Push(args, Far());
}

std::vector<float> Weights(ShardStore& store, int64_t worker,
                           int64_t* version) {
  std::vector<float> out;
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = worker;
  auto r = store.Pull(
      args, Far(),
      [&](const Chunk&, absl::Span<const float> w, const WeightsRef&) {
        out.insert(out.end(), w.begin(), w.end());
      });
  EXPECT_TRUE(r.ok()) << r.status();
  if (version != nullptr && r.ok()) *version = r->version;
  return out;
}

absl::StatusOr<PullResult> PullChunks(ShardStore& store,
                                      const std::vector<int64_t>& ids,
                                      int64_t min_version, absl::Time deadline,
                                      std::vector<float>* out) {
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.clock = min_version;
  args.min_version = min_version;
  args.chunk_ids = ids;
  return store.Pull(
      args, deadline,
      [&](const Chunk&, absl::Span<const float> w, const WeightsRef&) {
        if (out != nullptr) out->insert(out->end(), w.begin(), w.end());
      });
}

std::vector<float> GatherWeights(
    std::vector<std::unique_ptr<ShardStore>>& stores) {
  std::vector<float> all(64, 0.0f);
  for (auto& s : stores) {
    PullArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    EXPECT_TRUE(
        s->Pull(
             args, Far(),
             [&](const Chunk& c, absl::Span<const float> w, const WeightsRef&) {
               std::copy(
                   w.begin(), w.end(),
                   all.begin() + (c.tensor_index == 0 ? 0 : 40) + c.offset);
             })
            .ok());
  }
  return all;
}

void ExpectAll(const std::vector<float>& w, float value) {
  ASSERT_FALSE(w.empty());
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_NEAR(w[i], value, 1e-6) << "element " << i;
  }
}

int64_t Version(ShardStore& store) {
  auto s = store.GetShardStatus("job1");
  EXPECT_TRUE(s.ok());
  return s.ok() ? s->version() : -1;
}

std::string TempDir(const std::string& name) {
  std::string dir = ::testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  dir += name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ps::server
