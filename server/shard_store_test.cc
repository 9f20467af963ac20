#include "server/shard_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/config.h"
#include "common/fake_clock.h"
#include "common/payload_codec.h"
#include "common/placement.h"
#include "common/rpc.h"
#include "gmock/gmock.h"

namespace ps::server {
namespace {

// A far deadline for waits that the test releases itself, and a past one
// for waits that must time out at once.
absl::Time Far() { return absl::Now() + absl::Seconds(30); }
absl::Time Past() { return absl::InfinitePast(); }

// Two tensors of constant 1.0 weights, small chunks so that each spans
// several, SGD with lr 1: w = 1 - (average) gradient.
JobSpec MakeSpec(ConsistencySpec::Model model) {
  JobSpec spec;
  spec.set_name("t");
  spec.set_seed(7);
  spec.set_chunk_bytes(64);  // 16 floats per chunk
  for (auto [name, n] : {std::pair<const char*, int>{"a", 40}, {"b", 24}}) {
    TensorSpec* t = spec.mutable_model()->add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->mutable_init()->set_kind(InitializerSpec::CONSTANT);
    t->mutable_init()->set_value(1.0f);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_data()->set_max_steps(100);
  return spec;
}

struct Fixture {
  std::unique_ptr<ShardStore> store;
  FakeClock clock;
  std::string job = "job1";
};

std::unique_ptr<ShardStore> NewStore(FakeClock* clock,
                                     const std::string& data_dir = "",
                                     int apply_threads = 1) {
  ShardStoreOptions options;
  options.clock = clock;
  options.data_dir = data_dir;
  options.apply_threads = apply_threads;
  auto store = ShardStore::Create(options);
  EXPECT_TRUE(store.ok());
  return *std::move(store);
}

SetupJobRequest JobSetup(const JobSpec& spec, std::vector<int64_t> workers,
                         int shard = 0, int num_shards = 1) {
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

// A push of `value` to every chunk of the shard.
struct PushBuilder {
  std::vector<std::vector<float>> buffers;
  PushArgs args;
};

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
                                     bool end_of_step, int64_t base = -1,
                                     absl::Time deadline = Far()) {
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

// Every weight of the shard, in chunk order.
std::vector<float> Weights(ShardStore& store, int64_t worker = 1,
                           int64_t* version = nullptr) {
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

TEST(ShardStore, SetupInitialisesDeterministicallyWhateverTheSharding) {
  FakeClock clock;
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  // Random initialiser: values depend on (seed, name, index) only.
  for (auto& t : *spec.mutable_model()->mutable_tensors()) {
    t.mutable_init()->set_kind(InitializerSpec::UNIFORM);
    t.mutable_init()->set_scale(1.0f);
  }
  auto one = NewStore(&clock);
  ASSERT_TRUE(one->SetupJob(JobSetup(spec, {1})).ok());
  std::vector<float> single(64);
  {
    PullArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    auto placement = *one->GetPlacement("job1");
    ASSERT_TRUE(one->Pull(args, Far(),
                          [&](const Chunk& c, absl::Span<const float> w,
                              const WeightsRef&) {
                            const int64_t base = c.tensor_index == 0 ? 0 : 40;
                            std::copy(w.begin(), w.end(),
                                      single.begin() + base + c.offset);
                          })
                    .ok());
  }
  std::vector<float> sharded(64, 0.0f);
  for (int shard = 0; shard < 3; ++shard) {
    auto s = NewStore(&clock);
    auto r = s->SetupJob(JobSetup(spec, {1}, shard, 3));
    ASSERT_TRUE(r.ok()) << r.status();
    PullArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    ASSERT_TRUE(
        s->Pull(
             args, Far(),
             [&](const Chunk& c, absl::Span<const float> w, const WeightsRef&) {
               EXPECT_EQ(c.shard, shard);
               const int64_t base = c.tensor_index == 0 ? 0 : 40;
               std::copy(w.begin(), w.end(), sharded.begin() + base + c.offset);
             })
            .ok());
  }
  EXPECT_EQ(single, sharded);
}

TEST(ShardStore, SetupIsIdempotentAndRejectsAConflictingSpec) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  spec.set_seed(8);
  EXPECT_EQ(store->SetupJob(JobSetup(spec, {1})).status().code(),
            absl::StatusCode::kAlreadyExists);
  SetupJobRequest bad = JobSetup(spec, {1});
  bad.set_job_id("../etc");
  EXPECT_EQ(store->SetupJob(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardStore, BspAppliesOncePerStepWithTheAverage) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2, 3}))
          .ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 2.0f, true).ok());
  EXPECT_EQ(Version(*store), 0);
  ExpectAll(Weights(*store), 1.0f);
  auto last = PushValue(*store, 3, 1, 0, 6.0f, true);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->version, 1);
  ExpectAll(Weights(*store), 1.0f - 3.0f);  // average of 1, 2, 6
  // Step 1, gradients split over two pushes each.
  for (int64_t w : {1, 2, 3}) {
    ASSERT_TRUE(PushValue(*store, w, 2, 1, 0.5f, false).ok());
    ASSERT_TRUE(PushValue(*store, w, 3, 1, 0.5f, true).ok());
  }
  EXPECT_EQ(Version(*store), 2);
  ExpectAll(Weights(*store), -2.0f - 1.0f);
}

// The step close spread over several apply threads gives bit for bit the
// weights of one thread (chunks are independent), momentum state included,
// with a backup worker's late gradient dropped either way.
TEST(ShardStore, BspStepCloseOnSeveralApplyThreadsMatchesOneThread) {
  std::vector<std::vector<float>> results;
  for (int threads : {1, 4}) {
    FakeClock clock;
    auto store = NewStore(&clock, "", threads);
    JobSpec spec = MakeSpec(ConsistencySpec::BSP);
    spec.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
    spec.mutable_optimizer()->set_learning_rate(0.1f);
    spec.mutable_optimizer()->set_momentum(0.9f);
    spec.mutable_consistency()->set_backup_workers(1);
    spec.set_num_workers(3);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2, 3})).ok());
    for (int64_t step = 0; step < 6; ++step) {
      // Worker 3 is the late one: its gradient never counts.
      ASSERT_TRUE(
          PushValue(*store, 3, 2 * step + 1, step, 1000.0f, false).ok());
      ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.5f + step, true).ok());
      ASSERT_TRUE(
          PushValue(*store, 2, step + 1, step, -0.25f * step, true).ok());
      auto late = PushValue(*store, 3, 2 * step + 2, step, 1000.0f, true);
      ASSERT_TRUE(late.ok()) << late.status();
      EXPECT_TRUE(late->dropped);
    }
    EXPECT_EQ(Version(*store), 6);
    results.push_back(Weights(*store));
  }
  ASSERT_EQ(results[0].size(), 64u);
  EXPECT_EQ(results[0], results[1]);
  // And the update is the expected one: v = 0.9 v + g, w -= 0.1 v with
  // g = mean of workers 1 and 2.
  double v = 0, w = 1;
  for (int step = 0; step < 6; ++step) {
    v = 0.9 * v + (0.5 + step - 0.25 * step) / 2;
    w -= 0.1 * v;
  }
  for (float got : results[1]) ASSERT_NEAR(got, w, 1e-4);
}

TEST(ShardStore, RefusesAnApplyThreadCountOutOfRange) {
  for (int threads : {0, -1, 257}) {
    ShardStoreOptions options;
    options.apply_threads = threads;
    EXPECT_EQ(ShardStore::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(ShardStore, BspBackupWorkersDropLateGradients) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  spec.mutable_consistency()->set_backup_workers(1);
  spec.set_num_workers(3);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2, 3})).ok());
  // Worker 3 has pushed part of its gradient when the step closes.
  ASSERT_TRUE(PushValue(*store, 3, 1, 0, 100.0f, false).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 3.0f, true).ok());
  EXPECT_EQ(Version(*store), 1);
  ExpectAll(Weights(*store), 1.0f - 2.0f);
  auto late = PushValue(*store, 3, 2, 0, 100.0f, true);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->dropped);
  ExpectAll(Weights(*store), -1.0f);
  auto status = store->GetShardStatus("job1");
  EXPECT_EQ(status->dropped_pushes(), 1);
  // The late worker's staged gradient does not leak into the next step.
  ASSERT_TRUE(PushValue(*store, 1, 2, 1, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 2, 1, 1.0f, true).ok());
  ExpectAll(Weights(*store), -2.0f);
}

TEST(ShardStore, BspEndOfStepWaitsForEarlierPushesOfTheStep) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1})).ok());
  absl::Notification done;
  absl::StatusOr<PushResult> eos;
  std::thread t([&] {
    eos = PushValue(*store, 1, 2, 0, 1.0f, true);  // overtakes seq 1
    done.Notify();
  });
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 2.0f, false).ok());
  done.WaitForNotification();
  t.join();
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_EQ(Version(*store), 1);
  ExpectAll(Weights(*store), 1.0f - 3.0f);
  // With the earlier push missing the barrier times out.
  auto lost = PushValue(*store, 1, 4, 1, 1.0f, true, 1, absl::Now());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ShardStore, BspEndOfStepRetriedAfterItTimedOutIsCounted) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2})).ok());
  // Worker 1's end of step overtakes its earlier push and times out
  // waiting for it: its gradient is staged, its end of step not counted.
  auto first = PushValue(*store, 1, 2, 0, 1.0f, true, 0, absl::Now());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 2.0f, false).ok());
  // The client retries it with the same number: the gradient is not
  // staged again, and the end of step counts now.
  auto retry = PushValue(*store, 1, 2, 0, 1.0f, true);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->duplicate);
  EXPECT_FALSE(retry->dropped);
  EXPECT_EQ(Version(*store), 0);  // worker 2 has not ended the step
  auto last = PushValue(*store, 2, 1, 0, 3.0f, true);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(Version(*store), 1);
  // The average of worker 1's 1 + 2 (once) and worker 2's 3.
  ExpectAll(Weights(*store), 1.0f - 3.0f);
  // A second retry after the step closed changes nothing and is no drop.
  auto again = PushValue(*store, 1, 2, 0, 1.0f, true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->duplicate);
  EXPECT_FALSE(again->dropped);
  EXPECT_EQ(Version(*store), 1);
  ExpectAll(Weights(*store), 1.0f - 3.0f);
}

TEST(ShardStore, BspPullWaitsForTheVersion) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2})).ok());
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.min_version = 1;
  auto sink = [](const Chunk&, absl::Span<const float>, const WeightsRef&) {};
  EXPECT_EQ(store->Pull(args, Past(), sink).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] { pulled = store->Pull(args, Far(), sink); });
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());
  t.join();
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 1);
}

TEST(ShardStore, EvictionReleasesAWaitingBarrierAndRejoinStartsAtTheVersion) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2})).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 50.0f, false).ok());  // then dies
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 2.0f, true).ok());
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.min_version = 1;
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] {
    pulled = store->Pull(
        args, Far(),
        [](const Chunk&, absl::Span<const float>, const WeightsRef&) {});
  });
  UpdateMembershipRequest m;
  m.set_job_id("job1");
  m.add_worker_ids(1);
  m.set_membership_epoch(1);
  auto r = store->UpdateMembership(m);
  t.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version(), 1);
  ASSERT_TRUE(pulled.ok());
  ExpectAll(Weights(*store), -1.0f);  // worker 2's partial gradient dropped
  // The evicted worker is refused.
  EXPECT_EQ(PushValue(*store, 2, 2, 1, 1.0f, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A stale membership update is ignored.
  m.set_membership_epoch(0);
  m.add_worker_ids(2);
  ASSERT_TRUE(store->UpdateMembership(m).ok());
  EXPECT_EQ(PushValue(*store, 2, 2, 1, 1.0f, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Rejoin: starts at the current version with fresh sequence numbers.
  m.set_membership_epoch(2);
  ASSERT_TRUE(store->UpdateMembership(m).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 1, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 1, 2, 1, 3.0f, true).ok());
  EXPECT_EQ(Version(*store), 2);
  ExpectAll(Weights(*store), -3.0f);
}

TEST(ShardStore, AspAppliesAtOnceAndBoundsStaleness) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_consistency()->set_max_staleness(2);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
  for (int i = 0; i < 3; ++i) {
    auto r = PushValue(*store, 1, i + 1, i, 0.5f, true, i);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->version, i + 1);
  }
  ExpectAll(Weights(*store), 1.0f - 1.5f);
  auto stale = PushValue(*store, 2, 1, 0, 0.5f, true, 0);  // staleness 3
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Version(*store), 3);
  ExpectAll(Weights(*store), -0.5f);
  ASSERT_TRUE(PushValue(*store, 2, 2, 0, 0.5f, true, 1).ok());  // staleness 2
  ExpectAll(Weights(*store), -1.0f);
  EXPECT_EQ(store->GetShardStatus("job1")->rejected_pushes(), 1);
}

TEST(ShardStore, AspStalenessAwareLearningRate) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_consistency()->set_staleness_aware_lr(true);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(PushValue(*store, 1, i + 1, i, 0.25f, true, i).ok());
  }
  ExpectAll(Weights(*store), 0.0f);
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true, 0).ok());  // staleness 4
  ExpectAll(Weights(*store), -0.25f);
}

TEST(ShardStore, SspPullBlocksAndReleasesAtTheBound) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(1);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
  auto sink = [](const Chunk&, absl::Span<const float>, const WeightsRef&) {};
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  // Worker 2 is at clock 0: clock 1 may pull (1 - 1 <= 0), clock 2 may not.
  args.clock = 1;
  EXPECT_TRUE(store->Pull(args, Past(), sink).ok());
  args.clock = 2;
  EXPECT_EQ(store->Pull(args, Past(), sink).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] { pulled = store->Pull(args, Far(), sink); });
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());  // worker 2 -> 1
  t.join();
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->min_clock, 1);
  // Evicting the slow worker releases a pull at any clock.
  args.clock = 10;
  EXPECT_FALSE(store->Pull(args, Past(), sink).ok());
  UpdateMembershipRequest m;
  m.set_job_id("job1");
  m.add_worker_ids(1);
  m.set_membership_epoch(1);
  ASSERT_TRUE(store->UpdateMembership(m).ok());
  EXPECT_TRUE(store->Pull(args, Past(), sink).ok());
}

TEST(ShardStore, RetriedPushAppliesOnce) {
  for (auto model : {ConsistencySpec::BSP, ConsistencySpec::ASP}) {
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(store->SetupJob(JobSetup(MakeSpec(model), {1})).ok());
    ASSERT_TRUE(PushValue(*store, 1, 1, 0, 1.0f, false).ok());
    auto again = PushValue(*store, 1, 1, 0, 1.0f, false);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->duplicate);
    ASSERT_TRUE(PushValue(*store, 1, 2, 0, 0.0f, true).ok());
    ExpectAll(Weights(*store), 0.0f);
    EXPECT_EQ(store->GetShardStatus("job1")->duplicate_pushes(), 1);
  }
}

struct BadPushCase {
  const char* name;
  absl::StatusCode code;
  std::function<void(PushArgs*, std::vector<char>* storage)> mutate;
};

TEST(ShardStore, BadPushesGetPreciseStatusesAndChangeNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadPushCase> cases = {
      {"unknown_job", absl::StatusCode::kNotFound,
       [](PushArgs* a, std::vector<char>*) { a->job_id = "nope"; }},
      {"unknown_chunk", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].chunk_id = 999; }},
      {"negative_chunk", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].chunk_id = -1; }},
      {"duplicate_chunk", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[1] = a->chunks[0]; }},
      {"short_payload", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) {
         a->chunks[0].data.remove_suffix(4);
       }},
      {"wrong_num_elements", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].num_elements += 1; }},
      {"unknown_dtype", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) {
         a->chunks[0].dtype = static_cast<DType>(9);
       }},
      {"fp16_length_mismatch", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].dtype = FLOAT16; }},
      {"nan", absl::StatusCode::kInvalidArgument,
       [nan](PushArgs* a, std::vector<char>* s) {
         s->assign(a->chunks.back().data.begin(), a->chunks.back().data.end());
         std::memcpy(s->data() + 4, &nan, 4);
         a->chunks.back().data = absl::string_view(s->data(), s->size());
       }},
      {"inf", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>* s) {
         const float inf = std::numeric_limits<float>::infinity();
         s->assign(a->chunks[0].data.begin(), a->chunks[0].data.end());
         std::memcpy(s->data(), &inf, 4);
         a->chunks[0].data = absl::string_view(s->data(), s->size());
       }},
      {"clock_from_the_future", absl::StatusCode::kOutOfRange,
       [](PushArgs* a, std::vector<char>*) { a->clock = 5; }},
      {"base_version_from_the_future", absl::StatusCode::kOutOfRange,
       [](PushArgs* a, std::vector<char>*) { a->base_version = 5; }},
      {"worker_not_in_job", absl::StatusCode::kFailedPrecondition,
       [](PushArgs* a, std::vector<char>*) { a->worker_id = 42; }},
      {"seq_zero", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->seq = 0; }},
  };
  for (const BadPushCase& c : cases) {
    SCOPED_TRACE(c.name);
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(
        store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1})).ok());
    const std::vector<float> before = Weights(*store);
    auto placement = *store->GetPlacement("job1");
    std::vector<std::vector<float>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (const Chunk& chunk : placement->chunks) {
      buffers.emplace_back(chunk.num_elements, 1.0f);
    }
    for (const Chunk& chunk : placement->chunks) {
      args.chunks.push_back(Contiguous(
          chunk.chunk_id, FLOAT32, chunk.num_elements,
          absl::string_view(
              reinterpret_cast<const char*>(buffers[chunk.chunk_id].data()),
              chunk.num_elements * 4)));
    }
    std::vector<char> storage;
    c.mutate(&args, &storage);
    auto r = store->Push(args, Far());
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_FALSE(r.status().message().empty());
    EXPECT_EQ(Weights(*store), before);
    EXPECT_EQ(Version(*store), 0);
    // The shard still works and a fresh push applies. (Whether the bad push
    // used up seq 1 depends on how early it was refused.)
    ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.0f, false).ok());
    ASSERT_TRUE(PushValue(*store, 1, 2, 0, 1.0f, true).ok());
    ExpectAll(Weights(*store), 0.0f);
  }
}

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

// Threads pushing to disjoint and shared chunks concurrently lose nothing.
TEST(ShardStore, ConcurrentPushesLoseNoUpdate) {
  FakeClock clock;
  auto store = NewStore(&clock);
  const int kWorkers = 4, kSteps = 50;
  std::vector<int64_t> ids = {1, 2, 3, 4};
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::ASP), ids)).ok());
  std::vector<std::thread> threads;
  for (int w = 1; w <= kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int s = 0; s < kSteps; ++s) {
        auto r = PushValue(*store, w, s + 1, s, 0.001f * w, true, 0);
        ASSERT_TRUE(r.ok()) << r.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(Version(*store), kWorkers * kSteps);
  const float want = 1.0f - 0.001f * kSteps * (1 + 2 + 3 + 4);
  for (float x : Weights(*store)) ASSERT_NEAR(x, want, 1e-4);
}

TEST(ShardStore, StatusReportsWaitingWorkers) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2, 3}))
          .ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());
  auto s = store->GetShardStatus("job1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(
      std::vector<int64_t>(s->waiting_for().begin(), s->waiting_for().end()),
      (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s->pushes(), 1);
  EXPECT_EQ(s->bytes_in(), 64 * 4);
  EXPECT_EQ(store->GetShardStatus("nope").status().code(),
            absl::StatusCode::kNotFound);
}

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Every weight of a job spread over `stores`, by (tensor, offset).
std::vector<float> Gather(std::vector<std::unique_ptr<ShardStore>>& stores) {
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

// A push of `value` to the chunks `ids` only.
absl::StatusOr<PushResult> PushChunks(ShardStore& store, int64_t worker,
                                      uint64_t seq, int64_t clock, float value,
                                      const std::vector<int64_t>& ids,
                                      bool final, bool end_of_step = false) {
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

// Chunks `ids` at min_version, waiting until `deadline`; their weights in
// `out` (chunk order).
absl::StatusOr<PullResult> PullChunks(ShardStore& store,
                                      const std::vector<int64_t>& ids,
                                      int64_t min_version, absl::Time deadline,
                                      std::vector<float>* out = nullptr) {
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

// BSP chunks pushed with chunks_final by every worker are applied at once,
// and pulls of them for the next step are answered before the step closes;
// the step still closes once, with each chunk applied once.
TEST(ShardStore, BspAppliesAChunkAsSoonAsEveryWorkerHasPushedIt) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2})).ok());
  // Chunks: "a" (40 floats) is 0, 1, 2; "b" (24) is 3, 4.
  ASSERT_TRUE(PushChunks(*store, 1, 1, 0, 1.0f, {0, 3}, true).ok());
  EXPECT_EQ(PullChunks(*store, {0}, 1, absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(PushChunks(*store, 2, 1, 0, 3.0f, {0, 3}, true).ok());
  std::vector<float> got;
  auto early = PullChunks(*store, {0, 3}, 1, absl::Now(), &got);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->version, 1);
  ExpectAll(got, 1.0f - 2.0f);
  EXPECT_EQ(Version(*store), 0);  // the step is still open
  // The others wait for the step; so does a pull of all chunks.
  EXPECT_EQ(PullChunks(*store, {0, 1}, 1, absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(PullChunks(*store, {}, 1, absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Worker 1 already has chunk 0's next weights; its next step's pushes are
  // told to come back once the step has closed here.
  auto too_soon = PushChunks(*store, 1, 3, 1, 1.0f, {0}, true);
  EXPECT_EQ(too_soon.status().code(), absl::StatusCode::kUnavailable);
  // A chunk pushed again in the step after it was applied is dropped.
  ASSERT_TRUE(
      PushChunks(*store, 1, 2, 0, 100.0f, {0, 1, 2, 4}, true, true).ok());
  auto status = store->GetShardStatus("job1");
  EXPECT_EQ(status->dropped_pushes(), 1);
  ASSERT_TRUE(PushChunks(*store, 2, 2, 0, 3.0f, {1, 2, 4}, true, true).ok());
  EXPECT_EQ(Version(*store), 1);
  // Chunks 0 and 3 carry the first gradients (mean 2), the others the
  // mean of 100 and 3.
  for (int64_t id : {0, 1, 2, 3, 4}) {
    std::vector<float> w;
    ASSERT_TRUE(PullChunks(*store, {id}, 1, Far(), &w).ok());
    for (float v : w) {
      ASSERT_NEAR(v, id == 0 || id == 3 ? -1.0f : 1.0f - 51.5f, 1e-5) << id;
    }
  }
  // The retried next-step push applies now (its sequence number was not
  // used up).
  ASSERT_TRUE(PushChunks(*store, 1, 3, 1, 1.0f, {0}, true).ok());
}

// Without chunks_final (a chunk may still get more of the step's gradient),
// or with backup workers (which workers count is known at the close only),
// nothing is applied before the step closes.
TEST(ShardStore, BspAppliesEarlyOnlyWithFinalPushesAndNoBackupWorkers) {
  for (bool backup : {false, true}) {
    FakeClock clock;
    auto store = NewStore(&clock);
    JobSpec spec = MakeSpec(ConsistencySpec::BSP);
    spec.set_num_workers(2);
    if (backup) spec.mutable_consistency()->set_backup_workers(1);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
    for (int64_t w : {1, 2}) {
      ASSERT_TRUE(PushChunks(*store, w, 1, 0, 1.0f, {0}, backup).ok());
    }
    EXPECT_EQ(PullChunks(*store, {0}, 1, absl::Now()).status().code(),
              absl::StatusCode::kDeadlineExceeded)
        << backup;
  }
}

// A checkpoint taken while some chunks are applied ahead of the open step
// holds every chunk at the step's version, optimizer state included.
TEST(ShardStore, CheckpointOfAnOpenStepHoldsItsVersionThroughout) {
  FakeClock clock;
  const std::string dir = TempDir("open_step");
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  spec.mutable_optimizer()->set_momentum(0.5f);
  auto store = NewStore(&clock, dir);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};
  ASSERT_TRUE(PushChunks(*store, 1, 1, 0, 1.0f, all, true, true).ok());
  const std::vector<float> at_one = Weights(*store);
  // Step 1: chunks 0 and 3 applied early (one worker), then a checkpoint.
  ASSERT_TRUE(PushChunks(*store, 1, 2, 1, 1.0f, {0, 3}, true).ok());
  ASSERT_TRUE(PullChunks(*store, {0, 3}, 2, absl::Now()).ok());
  auto ck = store->Checkpoint("job1");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->version(), 1);
  auto restored = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = restored->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->version(), 1);
  EXPECT_EQ(Weights(*restored), at_one);
  // Both finish step 1 the same way: the momentum restored is step 1's.
  ASSERT_TRUE(PushChunks(*store, 1, 3, 1, 1.0f, {1, 2, 4}, true, true).ok());
  ASSERT_TRUE(PushChunks(*restored, 1, 1, 1, 1.0f, all, true, true).ok());
  EXPECT_EQ(Weights(*restored), Weights(*store));
  EXPECT_EQ(Version(*restored), 2);
}

TEST(ShardStore, CheckpointOnTwoShardsRestoresOntoThree) {
  FakeClock clock;
  const std::string dir = TempDir("two_to_three");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  std::vector<std::unique_ptr<ShardStore>> two;
  for (int shard = 0; shard < 2; ++shard) {
    two.push_back(NewStore(&clock, dir));
    ASSERT_TRUE(two.back()->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
    // Different gradients per element so that a misplaced range shows.
    auto placement = *two.back()->GetPlacement("job1");
    std::vector<std::vector<float>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (int64_t id : placement->shard_chunks[shard]) {
      const Chunk& c = placement->chunks[id];
      buffers.emplace_back(c.num_elements);
      for (int64_t i = 0; i < c.num_elements; ++i) {
        buffers.back()[i] = 0.01f * (c.offset + i) + c.tensor_index;
      }
      args.chunks.push_back(
          Contiguous(id, FLOAT32, c.num_elements,
                     absl::string_view(
                         reinterpret_cast<const char*>(buffers.back().data()),
                         c.num_elements * 4)));
    }
    ASSERT_TRUE(two.back()->Push(args, Far()).ok());
    auto ck = two.back()->Checkpoint("job1");
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ(ck->version(), 1);
  }
  const std::vector<float> want = Gather(two);
  std::vector<std::unique_ptr<ShardStore>> three;
  for (int shard = 0; shard < 3; ++shard) {
    three.push_back(NewStore(&clock, dir));
    SetupJobRequest r = JobSetup(spec, {1}, shard, 3);
    r.set_restore(true);
    auto resp = three.back()->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored());
    EXPECT_EQ(resp->version(), 1);
  }
  EXPECT_EQ(Gather(three), want);
}

// ASP shards count their own versions, so their checkpoints differ in
// version; they still restore (onto another layout too).
TEST(ShardStore, AspShardsAtDifferentVersionsRestore) {
  FakeClock clock;
  const std::string dir = TempDir("asp_mixed");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  std::vector<std::unique_ptr<ShardStore>> two;
  for (int shard = 0; shard < 2; ++shard) {
    two.push_back(NewStore(&clock, dir));
    ASSERT_TRUE(two.back()->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
    auto placement = *two.back()->GetPlacement("job1");
    std::vector<float> g(64, 0.125f);
    for (int step = 0; step <= shard; ++step) {  // shard 1 one step ahead
      PushArgs args;
      args.job_id = "job1";
      args.worker_id = 1;
      args.seq = step + 1;
      args.end_of_step = true;
      for (int64_t id : placement->shard_chunks[shard]) {
        const Chunk& c = placement->chunks[id];
        args.chunks.push_back(Contiguous(
            id, FLOAT32, c.num_elements,
            absl::string_view(reinterpret_cast<const char*>(g.data()),
                              c.num_elements * 4)));
      }
      ASSERT_TRUE(two.back()->Push(args, Far()).ok());
    }
    ASSERT_TRUE(two.back()->Checkpoint("job1").ok());
  }
  const std::vector<float> want = Gather(two);
  std::vector<std::unique_ptr<ShardStore>> three;
  for (int shard = 0; shard < 3; ++shard) {
    three.push_back(NewStore(&clock, dir));
    SetupJobRequest r = JobSetup(spec, {1}, shard, 3);
    r.set_restore(true);
    auto resp = three.back()->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored());
    EXPECT_EQ(resp->version(), 1);  // the lower of the two
  }
  EXPECT_EQ(Gather(three), want);
}

TEST(ShardStore, CorruptCheckpointFallsBackToThePreviousOne) {
  FakeClock clock;
  const std::string dir = TempDir("fallback");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_checkpoint()->set_every_versions(1);
  auto store = NewStore(&clock, dir);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.5f, true).ok());
  ASSERT_TRUE(store->CheckpointDue().ok());
  ASSERT_TRUE(PushValue(*store, 1, 2, 1, 0.5f, true).ok());
  auto ck = store->Checkpoint("job1");
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(ck->version(), 2);
  {
    std::fstream f(ck->path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c;
    f.read(&c, 1);
    c ^= 0x20;
    f.seekp(200);
    f.write(&c, 1);
  }
  auto restored = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = restored->SetupJob(r);
  ASSERT_TRUE(resp.ok());
  EXPECT_TRUE(resp->restored());
  EXPECT_EQ(resp->version(), 1);
  ExpectAll(Weights(*restored), 0.5f);
}

TEST(ShardStore, CheckpointOfAnotherModelIsNotRestored) {
  FakeClock clock;
  const std::string dir = TempDir("other_model");
  auto store = NewStore(&clock, dir);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.5f, true).ok());
  ASSERT_TRUE(store->Checkpoint("job1").ok());
  spec.mutable_model()->mutable_tensors(1)->set_shape(0, 25);
  auto other = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = other->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->restored());
  EXPECT_EQ(resp->version(), 0);
}

TEST(ShardStore, PeriodicCheckpointsByTime) {
  FakeClock clock;
  const std::string dir = TempDir("by_time");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_checkpoint()->set_every_seconds(60);
  auto store = NewStore(&clock, dir);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.5f, true).ok());
  ASSERT_TRUE(store->CheckpointDue().ok());
  EXPECT_EQ(store->GetShardStatus("job1")->last_checkpoint_version(), 0);
  clock.Advance(absl::Seconds(61));
  ASSERT_TRUE(store->CheckpointDue().ok());
  EXPECT_EQ(store->GetShardStatus("job1")->last_checkpoint_version(), 1);
}

TEST(ShardStore, TeardownReleasesWaitersAndForgetsTheJob) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2})).ok());
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.min_version = 5;
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] {
    pulled = store->Pull(
        args, Far(),
        [](const Chunk&, absl::Span<const float>, const WeightsRef&) {});
  });
  TeardownJobRequest td;
  td.set_job_id("job1");
  ASSERT_TRUE(store->TeardownJob(td).ok());
  t.join();
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->GetShardStatus("job1").status().code(),
            absl::StatusCode::kNotFound);
}

// Job-wide rollback: SetupJob with replace drops the running state (waiting
// pulls get UNAVAILABLE) and restores the newest checkpoint at or below
// restore_max_version; the new incarnation refuses pushes of the old one.
TEST(ShardStore, ReplaceRollsBackToACheckpointAndRefusesOldIncarnations) {
  FakeClock clock;
  const std::string dir = TempDir("rollback");
  auto store = NewStore(&clock, dir);
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  // Steps 0..5 with gradient 0.1 each: w = 1 - 0.1 * steps. Checkpoints at
  // versions 2 and 4.
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.1f, true, step).ok());
    if (step == 1 || step == 3) {
      ASSERT_TRUE(store->Checkpoint("job1").ok());
    }
  }
  EXPECT_EQ(Version(*store), 6);
  // A pull waiting for step 7 while the rollback happens.
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.min_version = 7;
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] {
    pulled = store->Pull(
        args, Far(),
        [](const Chunk&, absl::Span<const float>, const WeightsRef&) {});
  });
  for (int i = 0; i < 3000; ++i) {
    auto st = store->GetShardStatus("job1");
    if (st.ok() && st->blocked_pulls() == 1) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_replace(true);
  r.set_restore(true);
  r.set_restore_max_version(3);  // the newest at or below 3: version 2
  r.set_incarnation(1);
  auto resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  t.join();
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kUnavailable)
      << pulled.status();
  EXPECT_TRUE(resp->restored());
  EXPECT_EQ(resp->version(), 2);
  int64_t version = 0;
  std::vector<float> w = Weights(*store, 1, &version);
  EXPECT_EQ(version, 2);
  ExpectAll(w, 0.8f);
  // A push of incarnation 0 (a worker that has not restarted yet) is not
  // applied and says why; incarnation 1 numbers start at SeqBase(1) + 1.
  auto old = PushValue(*store, 1, 7, 2, 0.1f, true, 2);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(old.status().message().find("rolled back"), std::string::npos)
      << old.status();
  EXPECT_EQ(PushValue(*store, 1, SeqBase(1), 2, 0.1f, true, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto fresh = PushValue(*store, 1, SeqBase(1) + 1, 2, 0.1f, true, 2);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->version, 3);
  ExpectAll(Weights(*store), 0.7f);
  // A retried push of the new incarnation still applies once.
  auto again = PushValue(*store, 1, SeqBase(1) + 1, 2, 0.1f, true, 2);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  ExpectAll(Weights(*store), 0.7f);
  // start_version: the restored weights continue under another step number
  // (a rollback that found no version on every shard).
  r.set_restore_max_version(5);
  r.set_start_version(5);
  r.set_incarnation(2);
  resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->version(), 5);
  ExpectAll(Weights(*store), 0.6f);  // the checkpoint of version 4
  r.set_start_version(0);
  // Without a checkpoint at or below the bound, replace starts from the
  // initial weights.
  r.set_restore_max_version(1);
  r.set_incarnation(3);
  resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->restored());
  EXPECT_EQ(resp->version(), 0);
  ExpectAll(Weights(*store), 1.0f);
}

// Servers with a data directory each: a restarted shard of a 2-shard job
// restores from its own files alone.
TEST(ShardStore, ShardRestoresFromItsOwnDataDirectory) {
  FakeClock clock;
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  std::vector<std::vector<float>> want;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string dir = TempDir(absl::StrCat("own_", shard));
    auto store = NewStore(&clock, dir);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
    auto placement = *store->GetPlacement("job1");
    std::vector<std::vector<float>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (int64_t id : placement->shard_chunks[shard]) {
      const Chunk& c = placement->chunks[id];
      buffers.emplace_back(c.num_elements, 0.25f * (shard + 1));
      args.chunks.push_back(
          Contiguous(id, FLOAT32, c.num_elements,
                     absl::string_view(
                         reinterpret_cast<const char*>(buffers.back().data()),
                         c.num_elements * 4)));
    }
    ASSERT_TRUE(store->Push(args, Far()).ok());
    ASSERT_TRUE(store->Checkpoint("job1").ok());
    want.push_back(Weights(*store));
    // The server restarts on the same directory: the job's pushes get
    // UNAVAILABLE (retry: the coordinator restores it) until it is set up.
    auto restarted = NewStore(&clock, dir);
    PushArgs bare;
    bare.job_id = "job1";
    bare.worker_id = 1;
    bare.seq = 2;
    auto early = restarted->Push(bare, Far());
    EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable)
        << early.status();
    SetupJobRequest r = JobSetup(spec, {1}, shard, 2);
    r.set_restore(true);
    auto resp = restarted->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored()) << "shard " << shard;
    EXPECT_EQ(resp->version(), 1);
    EXPECT_EQ(Weights(*restarted), want.back());
  }
  // A store without the job's directory still says NOT_FOUND.
  auto other = NewStore(&clock, TempDir("own_none"));
  PushArgs bare;
  bare.job_id = "job1";
  bare.worker_id = 1;
  bare.seq = 1;
  EXPECT_EQ(other->Push(bare, Far()).status().code(),
            absl::StatusCode::kNotFound);
}

// ASP/SSP: workers restart at version / workers, and the restored clocks
// say so (an SSP pull at that clock does not wait).
TEST(ShardStore, RestoredSspJobStartsTheClocksAtVersionPerWorker) {
  FakeClock clock;
  const std::string dir = TempDir("ssp_restore");
  JobSpec spec = MakeSpec(ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(1);
  {
    auto store = NewStore(&clock, dir);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
    uint64_t seq[3] = {0, 0, 0};
    for (int step = 0; step < 3; ++step) {
      for (int w = 1; w <= 2; ++w) {
        ASSERT_TRUE(
            PushValue(*store, w, ++seq[w], step, 0.01f, true, 2 * step).ok());
      }
    }
    ASSERT_TRUE(store->Checkpoint("job1").ok());
  }
  auto store = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1, 2});
  r.set_restore(true);
  auto resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->version(), 6);
  auto status = store->GetShardStatus("job1");
  ASSERT_TRUE(status.ok());
  for (const WorkerClock& c : status->clocks()) EXPECT_EQ(c.clock(), 3);
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.clock = 4;  // within the bound of clock 3
  auto pulled = store->Pull(
      args, Past(),
      [](const Chunk&, absl::Span<const float>, const WeightsRef&) {});
  EXPECT_TRUE(pulled.ok()) << pulled.status();
}

// BSP shards checkpoint at the multiples of every_versions exactly (the
// state is taken when that step is applied), whenever the writer runs, so
// that every shard of a job holds the same versions.
TEST(ShardStore, BspCheckpointsAtMultiplesOfEveryVersions) {
  FakeClock clock;
  const std::string dir = TempDir("aligned");
  auto store = NewStore(&clock, dir);
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  spec.mutable_checkpoint()->set_every_versions(4);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  auto versions = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/job1")) {
      names.push_back(e.path().filename().string().substr(0, 26));
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.1f, true, step).ok());
  }
  ASSERT_TRUE(store->CheckpointDue().ok());
  EXPECT_EQ(versions(),
            (std::vector<std::string>{"ckpt-v00000000000000000004"}));
  for (int step = 6; step < 9; ++step) {
    ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.1f, true, step).ok());
  }
  ASSERT_TRUE(store->CheckpointDue().ok());
  ASSERT_TRUE(store->CheckpointDue().ok());  // nothing new: no file
  EXPECT_EQ(versions(),
            (std::vector<std::string>{"ckpt-v00000000000000000004",
                                      "ckpt-v00000000000000000008"}));
  // The file at 8 holds the weights of version 8, not 9.
  auto restored = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = restored->SetupJob(r);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->version(), 8);
  ExpectAll(Weights(*restored), 1.0f - 0.8f);
}

// The pull that answers an end of step waits for the worker's earlier
// pushes of the step (after_seq), which may arrive after the end itself.
TEST(ShardStore, PullAfterSeqWaitsForTheWorkersEarlierPushes) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::ASP), {1})).ok());
  // seq 2 (the end of step) lands before seq 1.
  ASSERT_TRUE(PushValue(*store, 1, 2, 0, 0.25f, true).ok());
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.after_seq = 2;
  auto sink = [](const Chunk&, absl::Span<const float>, const WeightsRef&) {};
  EXPECT_EQ(store->Pull(args, Past(), sink).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::vector<float> seen;
  absl::StatusOr<PullResult> waited;
  std::thread t([&] {
    waited = store->Pull(
        args, Far(),
        [&](const Chunk&, absl::Span<const float> w, const WeightsRef&) {
          seen.insert(seen.end(), w.begin(), w.end());
        });
  });
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.25f, false).ok());
  t.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  ExpectAll(seen, 0.5f);  // 1 - 0.25 - 0.25: both pushes are in
}

}  // namespace
}  // namespace ps::server
