// BSP step aggregation through ShardStore: the average of a step's
// gradients applied once, backup workers, the end of step waiting for the
// worker's earlier pushes, chunks applied as they complete; and TakeStepIfReady
// on a job's state.
#include "server/shard/bsp_step.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/platform/fake_clock.h"
#include "server/shard/job.h"
#include "server/shard/job_setup.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

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
  EXPECT_TRUE(absl::StrContains(too_soon.status().message(),
                                "members 1, 2 have not ended step 0"))
      << too_soon.status();
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

// A chunk applied early sums its gradients in ascending worker id, whoever
// pushed last, so that replicas and repeated runs agree bit for bit:
// float addition is not associative, and (1 + 1e8) - 1e8 is 0 while
// (1e8 - 1e8) + 1 is 1.
TEST(ShardStore, BspEarlyApplySumsInWorkerOrderWhateverTheArrivalOrder) {
  const float value[] = {0.0f, 1.0f, 1e8f, -1e8f};  // by worker id
  std::vector<std::vector<float>> results;
  for (const std::vector<int64_t>& order :
       {std::vector<int64_t>{1, 2, 3}, std::vector<int64_t>{2, 3, 1},
        std::vector<int64_t>{3, 1, 2}}) {
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(
        store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2, 3}))
            .ok());
    for (int64_t w : order) {
      ASSERT_TRUE(PushChunks(*store, w, 1, 0, value[w], {0}, true).ok());
    }
    std::vector<float> got;
    ASSERT_TRUE(PullChunks(*store, {0}, 1, absl::Now(), &got).ok());
    results.push_back(got);
  }
  ExpectAll(results[0], 1.0f);  // 1 - ((1 + 1e8) - 1e8) / 3
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

// A worker that joins while the open step has every chunk applied early
// (by pushes of the others, admitted before it joined) is one of the
// workers that step waits for. Its first pull must say the open step, not
// the step after: a worker takes its clock from that version, and one told
// the step is over never ends it, so the step never closes and its next
// step's pushes are refused as "still closing" (fault_worker_test's
// rejoin run, once under load). Its gradient of the chunks already applied
// is dropped; its end of step closes the step. The same for a worker that
// had pushed in the step, left and came back (a new process, fresh
// sequence numbers).
TEST(ShardStore, BspWorkerJoiningAStepWithChunksAppliedEarlyEndsThatStep) {
  for (const int64_t joiner : {3, 2}) {
    SCOPED_TRACE(joiner == 3 ? "a new worker" : "a worker that came back");
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(
        store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2})).ok());
    const std::vector<int64_t> all = {0, 1, 2, 3, 4};
    ASSERT_TRUE(PushChunks(*store, 1, 1, 0, 1.0f, all, true).ok());
    ASSERT_TRUE(PushChunks(*store, 2, 1, 0, 3.0f, all, true).ok());
    EXPECT_EQ(Version(*store), 0);  // every chunk applied, the step open
    UpdateMembershipRequest m;
    m.set_job_id("job1");
    m.add_worker_ids(1);
    if (joiner == 2) {  // worker 2 leaves first
      m.set_membership_epoch(1);
      ASSERT_TRUE(store->UpdateMembership(m).ok());
    }
    m.set_membership_epoch(2);
    m.add_worker_ids(2);
    if (joiner == 3) m.add_worker_ids(3);
    ASSERT_TRUE(store->UpdateMembership(m).ok());
    // The joiner starts where its first pull says
    // (worker/loop/step_pipeline.cc, CatchUp).
    int64_t joined_at = -1;
    ExpectAll(Weights(*store, joiner, &joined_at), 1.0f - 2.0f);
    EXPECT_EQ(joined_at, 0);
    // The others end the step: it still waits for the joiner.
    ASSERT_TRUE(PushChunks(*store, 1, 2, 0, 0.0f, {}, true, true).ok());
    if (joiner == 3) {
      ASSERT_TRUE(PushChunks(*store, 2, 2, 0, 0.0f, {}, true, true).ok());
    }
    EXPECT_EQ(Version(*store), 0);
    // The answer to the others' end of step (a pull of the whole next
    // step), timed out, says whom the step waits for.
    PullArgs next;
    next.job_id = "job1";
    next.worker_id = 1;
    next.min_version = 1;
    next.whole_step = true;
    absl::Status waiting = store
                               ->Pull(next, Past(),
                                      [](const Chunk&, absl::Span<const float>,
                                         const WeightsRef&) {})
                               .status();
    EXPECT_EQ(waiting.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(absl::StrContains(
        waiting.message(),
        absl::StrCat("member ", joiner, " has not ended step 0 (",
                     joiner == 3 ? "2 of 3" : "1 of 2", " ends counted)")))
        << waiting;
    auto joined =
        PushValue(*store, joiner, 1, joined_at, 50.0f, true, joined_at);
    ASSERT_TRUE(joined.ok()) << joined.status();
    EXPECT_EQ(Version(*store), 1);
    ExpectAll(Weights(*store), 1.0f - 2.0f);  // the joiner's gradient dropped
    EXPECT_EQ(store->GetShardStatus("job1")->dropped_pushes(), 5);
    // The next step counts every member.
    const std::vector<int64_t> members = joiner == 3
                                             ? std::vector<int64_t>{1, 2, 3}
                                             : std::vector<int64_t>{1, 2};
    for (int64_t w : members) {
      const uint64_t seq = w == joiner ? 2 : 3;
      ASSERT_TRUE(PushValue(*store, w, seq, 1, 3.0f, true, 1).ok()) << w;
    }
    EXPECT_EQ(Version(*store), 2);
    ExpectAll(Weights(*store), 1.0f - 2.0f - 3.0f);
  }
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

// A step closes with the ends of step of every active worker but the
// backup workers, once; a worker that leaves no longer counts.
TEST(BspStep, TakesTheStepOnceEnoughActiveWorkersEndedIt) {
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  spec.mutable_consistency()->set_backup_workers(1);
  spec.set_num_workers(3);
  auto job = NewJob(JobSetup(spec, {1, 2, 3}), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  Job& j = **job;
  absl::MutexLock l(&j.mu);
  SetMembers(j, {1, 2, 3});
  std::vector<int64_t> take;
  j.completed.insert(1);
  EXPECT_FALSE(TakeStepIfReady(j, &take));
  j.completed.insert(3);
  ASSERT_TRUE(TakeStepIfReady(j, &take));
  EXPECT_EQ(take, (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(j.closing);
  EXPECT_TRUE(j.completed.empty());
  j.completed.insert(2);
  EXPECT_FALSE(TakeStepIfReady(j, &take)) << "the step is closing";
  // The next step (ApplyStep reopens it): worker 2's end so far.
  j.closing = false;
  EXPECT_FALSE(TakeStepIfReady(j, &take));
  // Worker 3 ended it too but leaves before the step is taken: its end no
  // longer counts, and two active workers less one backup need one end.
  j.completed.insert(3);
  SetMembers(j, {1, 2});
  EXPECT_EQ(j.NumActive(), 2);
  ASSERT_TRUE(TakeStepIfReady(j, &take));
  EXPECT_EQ(take, (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace ps::server
