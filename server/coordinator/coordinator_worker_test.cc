// The coordinator with workers that go silent, fail, crash, restart or
// straggle: eviction, leftover data, rejoining at the current step.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "common/spec/data_plan.h"
#include "server/coordinator/coordinator_test_fixture.h"
#include "server/coordinator/job_state.h"

namespace ps::coordinator {
namespace {

TEST_F(CoordinatorTest, SilentWorkerIsEvictedAndItsDataShardReassigned) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(3, Spec(3), &w);
  const std::vector<int64_t> alive = {w[0], w[1]};
  for (int i = 0; i < 6; ++i) Advance(2000, alive, id, i);
  JobRecord r = Job(id);
  ASSERT_EQ(r.state(), RUNNING);
  EXPECT_EQ(r.workers_size(), 2);
  EXPECT_EQ(r.membership_epoch(), 2);
  EXPECT_EQ(r.evictions(), 1);
  EXPECT_TRUE(HasEvent(id, "evicted"));
  // Every data shard is still trained by someone: the evicted worker's
  // untrained batches are spread over both survivors' plans, each batch
  // once.
  const int64_t steps = JobShardSteps(r);
  ASSERT_GT(steps, 0);
  std::set<int> covered;
  int64_t shard2 = 0;
  for (int64_t m : alive) {
    const HeartbeatResponse hb = Beat(m, id);
    for (int s : hb.assignment().data_shards()) covered.insert(s);
    for (const DataSegment& d : hb.assignment().plan()) {
      if (d.data_shard() == 2) shard2 += SegmentBatches(d, steps);
    }
  }
  EXPECT_EQ(covered, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(shard2, steps) << "the evicted worker had reported no clock";
  // The shards were told the new membership.
  ASSERT_FALSE(shards_.memberships.empty());
  const UpdateMembershipRequest& u = shards_.memberships.back().second;
  EXPECT_EQ(u.membership_epoch(), 2);
  EXPECT_EQ(std::set<int64_t>(u.worker_ids().begin(), u.worker_ids().end()),
            std::set<int64_t>(alive.begin(), alive.end()));
}

TEST_F(CoordinatorTest, EvictedEvaluatorRoleMovesToASurvivor) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  for (int i = 0; i < 6; ++i) Advance(2000, {w[1]}, id, i);
  const WorkerAssignment a = Beat(w[1], id).assignment();
  EXPECT_TRUE(a.evaluator());
  EXPECT_EQ(a.data_shards_size(), 2);
}

TEST_F(CoordinatorTest, NoWorkerLeftFailsTheJob) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  for (int i = 0; i < 6; ++i) Advance(2000, {});
  const JobRecord r = Job(id);
  EXPECT_EQ(r.state(), FAILED);
  EXPECT_NE(r.reason().find("no worker left"), std::string::npos);
}

TEST_F(CoordinatorTest, WorkersThatReportFailureLeaveAndTheLastFailsTheJob) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  ASSERT_TRUE(Fail(w[0], id, "gradient holds NaN").ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_EQ(r.workers_size(), 1);
  EXPECT_TRUE(HasEvent(id, "worker_failure"));
  EXPECT_TRUE(HasEvent(id, "evicted"));
  ASSERT_TRUE(Fail(w[1], id, "gradient holds NaN").ok());
  r = Job(id);
  EXPECT_EQ(r.state(), FAILED);
  EXPECT_NE(r.reason().find("gradient holds NaN"), std::string::npos)
      << r.reason();
}

TEST_F(CoordinatorTest, RestartedWorkerRejoinsAtTheCurrentStep) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  ASSERT_TRUE(Report(w[0], id, "train_loss", 1.0, 57).ok());
  for (int i = 0; i < 6; ++i) Advance(2000, {w[0]}, id, 57);
  ASSERT_EQ(Job(id).workers_size(), 1);
  // The dead worker comes back under its old id (a new process).
  EXPECT_TRUE(Beat(w[1]).reregister());
  AddWorker(w[1], /*pid=*/200);
  Advance(100, {w[0]}, id, 57);
  const JobRecord r = Job(id);
  EXPECT_EQ(r.workers_size(), 2);
  EXPECT_EQ(r.membership_epoch(), 3);
  EXPECT_TRUE(HasEvent(id, "rejoined"));
  const WorkerAssignment a = Beat(w[1]).assignment();
  ASSERT_EQ(a.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(a.rank(), 1);
  EXPECT_EQ(a.start_step(), 57);
  EXPECT_EQ(std::vector<int>(a.data_shards().begin(), a.data_shards().end()),
            std::vector<int>{1});
  EXPECT_EQ(Beat(w[0], id, 57).assignment().data_shards_size(), 1);
}

TEST_F(CoordinatorTest, SilentWorkerIsNotTakenBackBeforeItSpeaks) {
  JobSpec spec = Spec(2);
  spec.mutable_consistency()->set_heartbeat_timeout_ms(3000);
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, spec, &w);
  for (int i = 0; i < 2; ++i) Advance(2000, {w[0]}, id, i);
  ASSERT_EQ(Job(id).workers_size(), 1);  // evicted, yet still ALIVE
  Advance(1000, {w[0]}, id, 2);
  EXPECT_EQ(Job(id).workers_size(), 1);
  Beat(w[1]);  // it speaks again
  coordinator_->Tick();
  EXPECT_EQ(Job(id).workers_size(), 2);
}

TEST_F(CoordinatorTest, WorkerRestartedWithinTheTimeoutRejoinsToo) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  AddWorker(w[1], /*pid=*/999);  // same id, new process
  EXPECT_EQ(Job(id).workers_size(), 1);
  coordinator_->Tick();
  EXPECT_EQ(Job(id).workers_size(), 2);
  EXPECT_TRUE(HasEvent(id, "rejoined"));
}

TEST_F(CoordinatorTest, BarrierTimeoutEvictsTheWorkerHoldingTheStep) {
  JobSpec spec = Spec(2);
  spec.mutable_consistency()->set_barrier_timeout_ms(5000);
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, spec, &w);
  for (int i = 0; i < 4; ++i) {
    Tock(2000);
    Beat(w[0], id, 8);
    Beat(w[1], id, 7);  // alive, but stuck on step 7
    coordinator_->Tick();
  }
  const JobRecord r = Job(id);
  ASSERT_EQ(r.workers_size(), 1);
  EXPECT_EQ(r.workers(0), w[0]);
  EXPECT_EQ(Beat(w[1], id, 7).assignment().command(), WorkerAssignment::STOP);
  // Evicted by policy: not taken back although idle and alive.
  coordinator_->Tick();
  EXPECT_EQ(Job(id).workers_size(), 1);
}

TEST_F(CoordinatorTest, StragglerIsFlaggedThenEvicted) {
  JobSpec spec = Spec(3);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  spec.mutable_straggler_policy()->set_slow_ratio(0.5f);
  spec.mutable_straggler_policy()->set_window_steps(30);
  spec.mutable_straggler_policy()->set_evict(true);
  std::vector<int64_t> w;
  const std::string id = RunningJob(3, spec, &w);
  for (int t = 1; t <= 20 && Job(id).workers_size() == 3; ++t) {
    Tock(1000);
    Beat(w[0], id, 10 * t);
    Beat(w[1], id, 10 * t);
    Beat(w[2], id, 2 * t);  // 5x slower
    coordinator_->Tick();
  }
  EXPECT_TRUE(HasEvent(id, "straggler"));
  const JobRecord r = Job(id);
  ASSERT_EQ(r.workers_size(), 2);
  EXPECT_EQ(std::count(r.workers().begin(), r.workers().end(), w[2]), 0);
}

TEST_F(CoordinatorTest, StragglerByComputeTimeInBsp) {
  JobSpec spec = Spec(3);
  spec.mutable_consistency()->set_backup_workers(1);
  spec.mutable_straggler_policy()->set_slow_ratio(0.5f);
  spec.mutable_straggler_policy()->set_window_steps(5);
  std::vector<int64_t> w;
  const std::string id = RunningJob(3, spec, &w);
  for (int t = 1; t <= 10; ++t) {
    Tock(1000);
    for (int i = 0; i < 3; ++i) {
      Beat(w[i], id, 2 * t);  // BSP: everyone moves at the same pace
      ASSERT_TRUE(Report(w[i], id, "compute_ms", i == 2 ? 30 : 10, 2 * t).ok());
    }
    coordinator_->Tick();
  }
  EXPECT_TRUE(HasEvent(id, "straggler"));
  EXPECT_EQ(Job(id).workers_size(), 3);  // flagged, not evicted
}

TEST_F(CoordinatorTest, CrashedWorkerLeavesUnbannedAndRejoinsItsRank) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  ASSERT_TRUE(Report(w[1], id, "train_loss", 1.0, 30).ok());
  Advance(100, w, id, 30);
  // Its Python process was killed; the daemon lives on and says so.
  ASSERT_TRUE(Fail(w[1], id, "python entrypoint x.py killed by signal 9",
                   /*crashed=*/true)
                  .ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_EQ(r.workers_size(), 1);
  EXPECT_TRUE(HasEvent(id, "worker_crash"));
  EXPECT_FALSE(HasEvent(id, "worker_failure"));
  // Idle again (an empty job in its heartbeat), it takes its rank back at
  // the current step.
  Advance(100, {w[1]});
  Advance(100, {w[0]}, id, 31);
  r = Job(id);
  EXPECT_EQ(r.workers_size(), 2);
  EXPECT_TRUE(HasEvent(id, "rejoined"));
  const WorkerAssignment a = Beat(w[1]).assignment();
  ASSERT_EQ(a.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(a.rank(), 1);
  EXPECT_GE(a.start_step(), 30);
  // The shards may never see it gone: they learn that it joined twice.
  ASSERT_FALSE(shards_.memberships.empty());
  const UpdateMembershipRequest& u = shards_.memberships.back().second;
  ASSERT_EQ(u.worker_ids_size(), 2);
  ASSERT_EQ(u.worker_joins_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(u.worker_joins(i), u.worker_ids(i) == w[1] ? 2 : 1);
  }
}

TEST_F(CoordinatorTest, FailedWorkerIsNotTakenBack) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  ASSERT_TRUE(
      Fail(w[1], id, "python entrypoint x.py exited with status 1").ok());
  Advance(100, {w[1]});
  Advance(100, {w[0]}, id, 31);
  EXPECT_EQ(Job(id).workers_size(), 1);
  EXPECT_FALSE(HasEvent(id, "rejoined"));
}

}  // namespace
}  // namespace ps::coordinator
