#include "server/coordinator/data_assignment.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "common/platform/fake_clock.h"

namespace ps::coordinator {
namespace {

std::vector<int> Shards(const WorkerSlot& s) {
  return std::vector<int>(s.data_shards().begin(), s.data_shards().end());
}

class DataAssignmentTest : public ::testing::Test {
 protected:
  // A running job of `n` workers (member ids 1..n) as a fresh start lays
  // it out.
  Job& Start(int n) {
    auto job = std::make_unique<Job>();
    job->record.set_job_id("job-1");
    job->record.set_state(RUNNING);
    job->record.mutable_spec()->mutable_data()->set_max_steps(1000);
    std::vector<int64_t> workers;
    for (int i = 1; i <= n; ++i) {
      workers.push_back(i);
      job->runtime[i].clock = 3;
      job->examples_per_sec[i] = 100;
    }
    job->record.set_examples_per_sec(100.0 * n);
    AssignInitialSlots(job->record, workers);
    absl::MutexLock l(&table_.mu());
    return table_.Insert(std::move(job));
  }

  void Evict(Job& job, int64_t member, bool banned = false) {
    absl::MutexLock l(&table_.mu());
    ps::coordinator::Evict(table_, job, member, "gone", banned, &writes_);
  }

  void Fill(Job& job, std::set<int64_t>* idle) {
    absl::MutexLock l(&table_.mu());
    FillVacancies(table_, job, idle, &writes_);
  }

  std::vector<std::string> EventKinds(const Job& job) {
    std::vector<std::string> kinds;
    for (const JobEvent& e : job.events) kinds.push_back(e.kind());
    return kinds;
  }

  FakeClock clock_;
  JobTable table_{&clock_};
  WriteBatch writes_;
};

TEST_F(DataAssignmentTest, RankIOwnsDataShardIAndRankZeroEvaluates) {
  JobRecord r;
  r.mutable_spec()->mutable_data()->set_epochs(1);
  r.mutable_spec()->mutable_data()->set_batch_size(100);
  WorkerSlot* stale = r.add_slots();  // from an earlier attempt
  stale->set_member_id(99);
  AssignInitialSlots(r, {5, 3, 8});
  ASSERT_EQ(r.slots_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.slots(i).rank(), i);
    EXPECT_EQ(Shards(r.slots(i)), std::vector<int>{i});
    EXPECT_TRUE(r.slots(i).active());
    EXPECT_EQ(r.slots(i).evaluator(), i == 0);
  }
  EXPECT_EQ(r.slots(1).member_id(), 3);
  EXPECT_EQ(r.num_data_shards(), 3);
  EXPECT_EQ(r.membership_epoch(), 1);
  EXPECT_EQ(r.total_steps(), 200);  // 60000 / (3 x 100), rounded up
}

TEST_F(DataAssignmentTest, TheHeirIsAWorkerStillTrainingWithTheFewestShards) {
  JobRecord r;
  AssignInitialSlots(r, {1, 2, 3, 4});
  r.mutable_slots(0)->set_active(false);
  r.mutable_slots(1)->add_data_shards(0);  // rank 1: two shards
  r.mutable_slots(2)->set_done(true);      // rank 2: finished
  ASSERT_NE(ChooseHeir(r), nullptr);
  EXPECT_EQ(ChooseHeir(r)->rank(), 3);
  r.mutable_slots(3)->set_done(true);
  EXPECT_EQ(ChooseHeir(r)->rank(), 1) << "not done beats fewer shards";
  r.mutable_slots(1)->set_done(true);
  EXPECT_EQ(ChooseHeir(r)->rank(), 2) << "all done: the fewest shards";
  for (WorkerSlot& s : *r.mutable_slots()) s.set_active(false);
  EXPECT_EQ(ChooseHeir(r), nullptr);
}

TEST_F(DataAssignmentTest, AnEvictedWorkersShardsAndEvaluatorRoleMove) {
  Job& job = Start(3);
  Evict(job, 1, /*banned=*/true);
  const JobRecord& r = job.record;
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_FALSE(r.slots(0).active());
  EXPECT_TRUE(r.slots(0).banned());
  EXPECT_EQ(r.slots(0).left_reason(), "gone");
  EXPECT_TRUE(r.slots(0).data_shards().empty());
  EXPECT_FALSE(r.slots(0).evaluator());
  EXPECT_EQ(Shards(r.slots(1)), (std::vector<int>{1, 0}));
  EXPECT_TRUE(r.slots(1).evaluator()) << "the lowest rank left";
  EXPECT_EQ(r.membership_epoch(), 2);
  EXPECT_EQ(r.evictions(), 1);
  EXPECT_EQ(job.runtime.count(1), 0u);
  EXPECT_DOUBLE_EQ(r.examples_per_sec(), 200);
  EXPECT_EQ(EventKinds(job),
            (std::vector<std::string>{"evicted", "membership"}));
  EXPECT_EQ(job.events[1].message(),
            "epoch 2: data shards [0] moved to member 2 (rank 1)");
  EXPECT_EQ(std::vector<int64_t>(r.workers().begin(), r.workers().end()),
            (std::vector<int64_t>{2, 3}));
  Evict(job, 1);  // no longer active: nothing happens
  EXPECT_EQ(job.record.evictions(), 1);
}

TEST_F(DataAssignmentTest, TheLastWorkerGoneFailsTheJob) {
  Job& job = Start(1);
  Evict(job, 1);
  EXPECT_EQ(job.record.state(), FAILED);
  EXPECT_EQ(job.record.reason(),
            "no worker left: member 1 was the last (gone)");
}

TEST_F(DataAssignmentTest, EveryRemainingWorkerDoneSucceeds) {
  Job& job = Start(2);
  job.record.mutable_slots(1)->set_done(true);
  job.record.set_final_evaluation(true);  // rank 1 evaluated last
  Evict(job, 1);
  EXPECT_EQ(job.record.state(), SUCCEEDED);
  EXPECT_EQ(job.record.reason(), "every remaining worker finished");
  EXPECT_EQ(Shards(job.record.slots(1)), (std::vector<int>{1, 0}));
}

// The evaluator leaves after the others finished: the role moves to a
// worker that is done, which is asked to evaluate the final model before
// the job ends.
TEST_F(DataAssignmentTest, TheNewEvaluatorOfAFinishedJobEvaluatesItFirst) {
  Job& job = Start(2);
  job.record.mutable_slots(1)->set_done(true);
  job.runtime[2].clock = 40;
  Evict(job, 1);
  EXPECT_EQ(job.record.state(), RUNNING);
  const WorkerSlot& heir = job.record.slots(1);
  EXPECT_TRUE(heir.evaluator());
  EXPECT_FALSE(heir.done());
  EXPECT_EQ(heir.start_step(), 40);
  EXPECT_EQ(job.record.final_evaluation_epoch(), job.record.membership_epoch());
}

TEST_F(DataAssignmentTest, AVacantRankGoesBackToItsHolderWithItsShard) {
  Job& job = Start(3);
  job.record.set_global_step(57);
  Evict(job, 2);  // rank 1's shard goes to rank 0
  std::set<int64_t> idle = {2, 7};
  Fill(job, &idle);
  EXPECT_EQ(idle, std::set<int64_t>{7}) << "its old holder is preferred";
  const JobRecord& r = job.record;
  ASSERT_EQ(r.slots_size(), 4);
  const WorkerSlot& back = r.slots(3);
  EXPECT_EQ(back.member_id(), 2);
  EXPECT_EQ(back.rank(), 1);
  EXPECT_EQ(Shards(back), std::vector<int>{1});
  EXPECT_EQ(back.start_step(), 57);
  EXPECT_FALSE(back.evaluator()) << "rank 0 still evaluates";
  EXPECT_EQ(Shards(r.slots(0)), std::vector<int>{0}) << "shard 1 taken back";
  EXPECT_EQ(r.membership_epoch(), 3);
  EXPECT_EQ(job.runtime[2].clock, 57);
  EXPECT_EQ(job.runtime[2].last_heartbeat_ms, clock_.NowMs());
  EXPECT_EQ(job.events.back().kind(), "rejoined");
}

TEST_F(DataAssignmentTest, BannedWorkersNeverComeBack) {
  Job& job = Start(2);
  Evict(job, 1, /*banned=*/true);
  std::set<int64_t> idle = {1};
  Fill(job, &idle);
  EXPECT_EQ(idle, std::set<int64_t>{1});
  EXPECT_EQ(job.record.slots_size(), 2);
  idle = {1, 9};
  Fill(job, &idle);
  EXPECT_EQ(idle, std::set<int64_t>{1});
  ASSERT_EQ(job.record.slots_size(), 3);
  EXPECT_EQ(job.record.slots(2).member_id(), 9);
  EXPECT_EQ(job.record.slots(2).rank(), 0);
  EXPECT_FALSE(job.record.slots(2).evaluator())
      << "member 2 took the role when member 1 left";
  EXPECT_TRUE(job.record.slots(1).evaluator());
}

}  // namespace
}  // namespace ps::coordinator
