#include "server/coordinator/reconciler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "common/spec/data_plan.h"
#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
namespace {

constexpr int64_t kPoll = 5000;

std::vector<std::pair<ShardAction::Kind, int>> Kinds(
    const std::vector<ShardAction>& actions) {
  std::vector<std::pair<ShardAction::Kind, int>> out;
  for (const ShardAction& a : actions) out.emplace_back(a.kind, a.shard);
  return out;
}

Job JobOnShards(int n, JobState state) {
  Job job;
  job.record.set_job_id("job-1");
  job.record.set_state(state);
  job.record.set_membership_epoch(2);
  for (int i = 0; i < n; ++i) {
    job.record.add_servers(absl::StrCat("127.0.0.1:", 7001 + i));
  }
  job.shards.assign(n, ShardSync{});
  for (ShardSync& s : job.shards) s.synced_epoch = 2;
  return job;
}

TEST(Reconciler, ARunningJobsShardsAreCheckedSyncedOrPolled) {
  using K = ShardAction;
  Job job = JobOnShards(4, RUNNING);
  job.shards[0].needs_check = true;
  job.shards[0].synced_epoch = 1;  // the check comes first
  job.shards[1].synced_epoch = 1;
  job.shards[2].last_poll_ms = 10000;
  job.shards[3].needs_check = true;
  const auto actions = PlanShardActions(job, {true, true, true, false},
                                        /*now=*/12000, kPoll);
  EXPECT_EQ(Kinds(actions), (std::vector<std::pair<K::Kind, int>>{
                                {K::kCheck, 0}, {K::kMembership, 1}}))
      << "shard 2 was polled 2 s ago; shard 3 is down";
  EXPECT_EQ(actions[1].address, "127.0.0.1:7002");
  const auto later =
      PlanShardActions(job, {true, true, true, true}, 15000, kPoll);
  EXPECT_EQ(
      Kinds(later),
      (std::vector<std::pair<K::Kind, int>>{
          {K::kCheck, 0}, {K::kMembership, 1}, {K::kPoll, 2}, {K::kCheck, 3}}));
  EXPECT_EQ(job.shards[2].last_poll_ms, 15000) << "stamped when planned";
}

TEST(Reconciler, AnEndedJobsShardsAreTornDownWhereTheyAreUp) {
  Job job = JobOnShards(3, CANCELLED);
  job.shards[2].torn_down = true;
  const auto actions = PlanShardActions(job, {true, false, true}, 0, kPoll);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].kind, ShardAction::kTeardown);
  EXPECT_EQ(actions[0].shard, 0);
  EXPECT_TRUE(job.shards[1].torn_down) << "down: nothing left to tear down";
  Job pending = JobOnShards(1, PENDING);
  EXPECT_TRUE(PlanShardActions(pending, {true}, 0, kPoll).empty());
}

class ReconcilerTest : public ::testing::Test {
 protected:
  Job& Add(Job job) {
    absl::MutexLock l(&table_.mu());
    return table_.Insert(std::make_unique<Job>(std::move(job)));
  }

  void Up(int n) {
    for (int i = 0; i < n; ++i) {
      RegisterRequest r;
      r.set_role(SERVER);
      r.set_address(absl::StrCat("127.0.0.1:", 7001 + i));
      ASSERT_TRUE(members_.Register(r).ok());
    }
  }

  // Job job-1 RUNNING on n shards that hold it, workers 1 and 2.
  Job& Running(int n) {
    Job job = JobOnShards(n, RUNNING);
    job.record.mutable_spec()->mutable_consistency()->set_model(
        ConsistencySpec::BSP);
    for (int64_t w : {1, 2}) {
      WorkerSlot* s = job.record.add_slots();
      s->set_member_id(w);
      s->set_rank(static_cast<int>(w) - 1);
      s->set_active(true);
    }
    for (const std::string& address : job.record.servers()) {
      shards_.jobs[address].insert("job-1");
    }
    Up(n);
    return Add(std::move(job));
  }

  std::vector<std::string> EventKinds(const Job& job) {
    std::vector<std::string> kinds;
    for (const JobEvent& e : job.events) kinds.push_back(e.kind());
    return kinds;
  }

  bool HasEvent(const Job& job, const std::string& kind) {
    const auto kinds = EventKinds(job);
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  }

  FakeClock clock_;
  Membership members_{&clock_, {.heartbeat_timeout_ms = 10000}};
  JobTable table_{&clock_};
  FakeShardClient shards_;
  RecordingJobStore store_;
  WriteBatch writes_;
  Reconciler reconciler_{
      kPoll, /*backup_timeout_ms=*/3000, &table_, &members_, &shards_, &store_};
};

TEST_F(ReconcilerTest, CountersBecomeEventsAfterTheBaseline) {
  Job& job = Running(2);
  ShardStatus st;
  st.set_dropped_pushes(4);
  absl::MutexLock l(&table_.mu());
  EXPECT_TRUE(UpdateCounters(table_, job, 0, st, &writes_));
  EXPECT_TRUE(job.events.empty()) << "the first poll sets the baseline";
  st.set_dropped_pushes(6);
  st.set_rejected_pushes(1);
  EXPECT_TRUE(UpdateCounters(table_, job, 1, st, &writes_));
  EXPECT_EQ(EventKinds(job), (std::vector<std::string>{}))
      << "shard 1's first poll too";
  st.set_dropped_pushes(9);
  EXPECT_TRUE(UpdateCounters(table_, job, 1, st, &writes_));
  EXPECT_EQ(EventKinds(job), (std::vector<std::string>{"dropped_gradient"}));
  EXPECT_EQ(job.events[0].message(),
            "shard 1 dropped 3 late gradient(s) (9 in all)");
  EXPECT_EQ(job.record.dropped_pushes(), 13);
  EXPECT_EQ(job.record.rejected_pushes(), 1);
  EXPECT_FALSE(UpdateCounters(table_, job, 1, st, &writes_));
}

TEST_F(ReconcilerTest, ARollbackRestartsEveryWorkerAtTheRestoredStep) {
  Job& job = Running(2);
  job.record.set_global_step(60);
  job.record.set_epoch(3);
  job.runtime[1].clock = 60;
  job.runtime[1].samples.emplace_back(0, 60);
  job.shards[1].needs_check = true;
  job.shards[0].have_counters = true;
  RollbackResult rollback;
  rollback.version = 20;
  rollback.start_step = 20;
  rollback.note = "shard(s) 1 restarted";
  absl::MutexLock l(&table_.mu());
  ApplyRollback(table_, job, /*incarnation=*/3, rollback, &writes_);
  const JobRecord& r = job.record;
  EXPECT_EQ(r.incarnation(), 3);
  EXPECT_FALSE(r.rollback_pending());
  // Incarnations 0 and 1 had no recorded restart step.
  EXPECT_EQ(std::vector<int64_t>(r.rollback_steps().begin(),
                                 r.rollback_steps().end()),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::max(), 20}));
  EXPECT_EQ(r.global_step(), 20);
  EXPECT_DOUBLE_EQ(r.epoch(), 1) << "3 epochs x 20 / 60";
  EXPECT_EQ(r.slots(0).start_step(), 20);
  EXPECT_EQ(job.runtime[1].clock, 20);
  EXPECT_TRUE(job.runtime[1].samples.empty());
  EXPECT_EQ(job.runtime[2].clock_changed_ms, clock_.NowMs());
  for (const ShardSync& s : job.shards) {
    EXPECT_FALSE(s.needs_check);
    EXPECT_EQ(s.synced_epoch, -1);
    EXPECT_FALSE(s.have_counters);
  }
  EXPECT_EQ(EventKinds(job), (std::vector<std::string>{"rollback"}));
  EXPECT_EQ(job.events[0].message(), "shard(s) 1 restarted");
}

// Under ASP, with data plans: a finished worker trains the undone steps
// again, a worker that joined after the restored step starts at its plan's
// start (not at its first batch again and again), and the batches a
// departed worker trained after it go to the others.
TEST_F(ReconcilerTest, ARollbackUndoesEveryWorkersStepsAfterIt) {
  Job& job = Running(2);
  JobRecord& r = job.record;
  r.mutable_spec()->mutable_consistency()->set_model(ConsistencySpec::ASP);
  r.set_shard_steps(100);
  r.set_steps_per_epoch(50);
  r.set_num_data_shards(3);
  r.set_final_evaluation(true);
  WorkerSlot& done = *r.mutable_slots(0);  // trained all of shard 0
  done.set_done(true);
  *done.add_plan() = PlanSegment(0, 0, 100);
  WorkerSlot& joined = *r.mutable_slots(1);  // rejoined at step 80
  joined.set_plan_start(80);
  *joined.add_plan() = PlanSegment(1, 60, 100);
  WorkerSlot& gone = *r.add_slots();  // left at step 70
  gone.set_member_id(3);
  gone.set_rank(2);
  *gone.add_plan() = PlanSegment(2, 0, 70);
  job.runtime[1].clock = 100;
  job.runtime[2].clock = 90;
  RollbackResult rollback;
  rollback.version = 120;
  rollback.start_step = 40;
  absl::MutexLock l(&table_.mu());
  ApplyRollback(table_, job, /*incarnation=*/1, rollback, &writes_);
  EXPECT_FALSE(r.final_evaluation());
  EXPECT_FALSE(r.slots(0).done());
  EXPECT_EQ(r.slots(0).start_step(), 40);
  EXPECT_EQ(r.slots(1).start_step(), 80);
  EXPECT_EQ(job.runtime[2].clock, 80);
  // Shard 2's batches 40..70 were undone: cut from the departed plan and
  // given to the two others.
  EXPECT_EQ(PlanEnd(r.slots(2).plan_start(), r.slots(2).plan(), 100), 40);
  int64_t moved = 0;
  for (int i = 0; i < 2; ++i) {
    for (const DataSegment& d : r.slots(i).plan()) {
      if (d.data_shard() == 2) moved += d.end_batch() - d.first_batch();
    }
  }
  EXPECT_EQ(moved, 30);
  EXPECT_TRUE(HasEvent(job, "data_moved"));
}

TEST_F(ReconcilerTest, AFailedRollbackStaysPending) {
  Job& job = Running(1);
  RollbackResult failed;
  failed.status = absl::UnavailableError("refused");
  const int64_t change = job.change;
  absl::MutexLock l(&table_.mu());
  ApplyRollback(table_, job, 1, failed, &writes_);
  EXPECT_TRUE(job.record.rollback_pending());
  EXPECT_EQ(job.record.incarnation(), 0);
  EXPECT_EQ(EventKinds(job), (std::vector<std::string>{"rollback_failed"}));
  EXPECT_GT(job.change, change);
}

TEST_F(ReconcilerTest, ShardsBehindTheEpochGetTheActiveWorkers) {
  Job& job = Running(2);
  job.shards[1].synced_epoch = 1;
  job.record.mutable_slots(0)->set_active(false);
  reconciler_.Reconcile("job-1");
  ASSERT_EQ(shards_.memberships.size(), 1u);
  EXPECT_EQ(shards_.memberships[0].first, "127.0.0.1:7002");
  const UpdateMembershipRequest& u = shards_.memberships[0].second;
  EXPECT_EQ(u.membership_epoch(), 2);
  EXPECT_EQ(std::vector<int64_t>(u.worker_ids().begin(), u.worker_ids().end()),
            std::vector<int64_t>{2});
  EXPECT_EQ(job.shards[1].synced_epoch, 2);
  EXPECT_FALSE(job.reconciling);
  reconciler_.Reconcile("job-404");  // unknown: nothing
}

TEST_F(ReconcilerTest, ARestartedShardWaitsForTheOthersThenRollsBack) {
  Job& job = Running(2);
  shards_.jobs["127.0.0.1:7002"].clear();  // 7002 restarted
  shards_.checkpoints["127.0.0.1:7001"] = {30};
  shards_.checkpoints["127.0.0.1:7002"] = {30};
  job.shards[1].needs_check = true;
  clock_.AdvanceMs(20000);
  ASSERT_TRUE(members_.Heartbeat(2).ok());  // 7002 is member 2
  members_.DetectDead();                    // 7001 is down
  reconciler_.Reconcile("job-1");
  EXPECT_TRUE(shards_.setups.empty()) << "not with a shard down";
  EXPECT_TRUE(job.shards[1].needs_check);
  Up(1);  // 7001 comes back
  job.shards[0].needs_check = true;
  reconciler_.Reconcile("job-1");
  EXPECT_EQ(job.record.incarnation(), 1);
  EXPECT_EQ(job.record.global_step(), 30);
  EXPECT_TRUE(HasEvent(job, "rollback"));
  EXPECT_TRUE(HasEvent(job, "server_restored"));
  EXPECT_FALSE(job.shards[1].needs_check);
  ASSERT_FALSE(store_.records.empty());
  EXPECT_EQ(store_.records.back().first.incarnation(), 1);
}

TEST_F(ReconcilerTest, AnEndedJobIsTornDownAfterALastPoll) {
  Job& job = Running(2);
  job.record.set_state(SUCCEEDED);
  shards_.status.set_version(80);
  shards_.status.set_pushes(160);
  reconciler_.Reconcile("job-1");
  ASSERT_EQ(shards_.teardowns.size(), 2u);
  EXPECT_TRUE(shards_.teardowns[0].second.final_checkpoint());
  EXPECT_TRUE(job.shards[0].torn_down);
  EXPECT_TRUE(job.shards[1].torn_down);
  EXPECT_EQ(EventKinds(job),
            (std::vector<std::string>{"shard_summary", "shard_summary"}));
  EXPECT_EQ(job.events[0].message(),
            "shard 0: version 80, 160 pushes, 0 dropped, 0 rejected");
  reconciler_.Reconcile("job-1");
  EXPECT_EQ(shards_.teardowns.size(), 2u) << "torn down once";
}

// A replicated job's backups on a server that holds no primary of it (a
// spare) are torn down too, after the primaries and without a checkpoint.
TEST_F(ReconcilerTest, AnEndedJobsBackupsOnlyServerIsTornDownToo) {
  Job& job = Running(2);
  ShardReplicas* r0 = job.record.add_replicas();
  r0->add_backup_members(2);
  r0->add_backup_addresses(job.record.servers(1));  // a primary's server
  ShardReplicas* r1 = job.record.add_replicas();
  r1->add_backup_members(9);
  r1->add_backup_addresses("127.0.0.1:7009");  // backups only
  job.record.set_state(SUCCEEDED);
  reconciler_.Reconcile("job-1");
  ASSERT_EQ(shards_.teardowns.size(), 3u);
  EXPECT_EQ(shards_.teardowns[0].first, job.record.servers(0));
  EXPECT_EQ(shards_.teardowns[1].first, job.record.servers(1));
  EXPECT_TRUE(shards_.teardowns[1].second.final_checkpoint());
  EXPECT_EQ(shards_.teardowns[2].first, "127.0.0.1:7009");
  EXPECT_FALSE(shards_.teardowns[2].second.final_checkpoint());
}

TEST_F(ReconcilerTest, ATeardownIsTriedThreeTimes) {
  Job& job = Running(1);
  job.record.set_state(CANCELLED);
  shards_.teardown_error = absl::UnavailableError("refused");
  for (int i = 0; i < 5; ++i) reconciler_.Reconcile("job-1");
  EXPECT_EQ(shards_.teardowns.size(), 3u);
  EXPECT_FALSE(shards_.teardowns[0].second.final_checkpoint());
  EXPECT_TRUE(job.shards[0].torn_down);
  ASSERT_TRUE(HasEvent(job, "teardown_failed"));
  EXPECT_EQ(job.events.back().message(), "shard 0 at 127.0.0.1:7001: refused");
}

TEST_F(ReconcilerTest, AJobBeingStartedOrReconciledIsLeftAlone) {
  Job& job = Running(1);
  job.shards[0].synced_epoch = 1;
  job.starting = true;
  reconciler_.Reconcile("job-1");
  job.starting = false;
  job.reconciling = true;
  reconciler_.Reconcile("job-1");
  EXPECT_TRUE(shards_.memberships.empty());
  job.reconciling = false;
  reconciler_.Reconcile("job-1");
  EXPECT_EQ(shards_.memberships.size(), 1u);
}

}  // namespace
}  // namespace ps::coordinator
