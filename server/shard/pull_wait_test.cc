// When pulls may read, through ShardStore: BSP versions, SSP clocks,
// after_seq.
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
  absl::Status early = store->Pull(args, Past(), sink).status();
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded);
  // The message names the members the step waits for.
  EXPECT_TRUE(
      absl::StrContains(early.message(), "members 1, 2 have not ended step 0"))
      << early;
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] { pulled = store->Pull(args, Far(), sink); });
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 1.0f, true).ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());
  t.join();
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 1);
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
