// ShardStore as a whole: job setup and teardown, membership, concurrency.
// The consistency and table units have tests of their own beside them, also
// through ShardStore (shard_test_util.h).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/platform/fake_clock.h"
#include "common/wire/placement.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

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

TEST(ShardStore, RefusesAnApplyThreadCountOutOfRange) {
  for (int threads : {0, -1, 257}) {
    ShardStoreOptions options;
    options.apply_threads = threads;
    EXPECT_EQ(ShardStore::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
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

// A worker that left and came back between two membership updates (a
// crashed Python script rejoining at once) is seen only as a grown join
// count: it starts over with fresh sequence numbers, so the pushes of its
// new process are applied, not answered as duplicates of its old ones.
TEST(ShardStore, RejoinSeenOnlyAsAGrownJoinCountStartsOver) {
  FakeClock clock;
  auto store = NewStore(&clock);
  SetupJobRequest setup = JobSetup(MakeSpec(ConsistencySpec::ASP), {1, 2});
  setup.add_worker_joins(1);
  setup.add_worker_joins(1);
  ASSERT_TRUE(store->SetupJob(setup).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 2, 1, 1.0f, true).ok());
  EXPECT_EQ(Version(*store), 2);
  UpdateMembershipRequest m;
  m.set_job_id("job1");
  m.set_membership_epoch(1);
  m.add_worker_ids(1);
  m.add_worker_ids(2);
  m.add_worker_joins(1);
  m.add_worker_joins(1);
  ASSERT_TRUE(store->UpdateMembership(m).ok());
  // The same count: number 1 again is a retry of the first push (answered,
  // not applied: an applied end of step raises the version).
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());
  EXPECT_EQ(Version(*store), 2);
  // Joined again: its numbers start over and are applied.
  m.set_membership_epoch(2);
  m.set_worker_joins(1, 2);
  ASSERT_TRUE(store->UpdateMembership(m).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 2, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 2, 3, 1.0f, true).ok());
  EXPECT_EQ(Version(*store), 4);
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

// A restarted server answers a push or pull of a job it does not hold
// with UNAVAILABLE: the workers retry while the coordinator sets the job up
// again or fails its shard over (they must not give up on NOT_FOUND).
TEST(ShardStore, ARestartedServerTellsWorkersToRetryAJobItDoesNotHold) {
  FakeClock clock;
  ShardStoreOptions options;
  options.clock = &clock;
  options.restarted = true;
  auto store = ShardStore::Create(options);
  ASSERT_TRUE(store.ok());
  auto pushed = PushValue(**store, 1, 1, 0, 1.0f, true);
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kNotFound)
      << "no job: not even its placement";
  PushArgs args = PushHeader(1, 1, 0, 0, true);
  auto r = (*store)->Push(args, Far());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "restarted"))
      << r.status();
  // Not restarted: NOT_FOUND as before.
  EXPECT_EQ(NewStore(&clock)->Push(args, Far()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ShardStore, TeardownHandsTheJobsMemoryBackAfterDroppingIt) {
  FakeClock clock;
  ShardStoreOptions options;
  options.clock = &clock;
  std::unique_ptr<ShardStore> store;
  int calls = 0;
  absl::StatusCode status_then = absl::StatusCode::kOk;
  options.after_teardown = [&] {
    ++calls;
    status_then = store->GetShardStatus("job1").status().code();
  };
  absl::StatusOr<std::unique_ptr<ShardStore>> created =
      ShardStore::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  store = *std::move(created);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::ASP), {1})).ok());
  EXPECT_EQ(calls, 0);
  TeardownJobRequest td;
  td.set_job_id("job1");
  ASSERT_TRUE(store->TeardownJob(td).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(status_then, absl::StatusCode::kNotFound) << "the job was gone";
  EXPECT_FALSE(store->TeardownJob(td).ok());
  EXPECT_EQ(calls, 1) << "no job, nothing dropped";
}

}  // namespace
}  // namespace ps::server
