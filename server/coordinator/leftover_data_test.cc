#include "server/coordinator/leftover_data.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/platform/fake_clock.h"
#include "common/spec/data_plan.h"
#include "server/coordinator/data_assignment.h"
#include "server/coordinator/job_store.h"

namespace ps::coordinator {
namespace {

constexpr int64_t kSteps = 1000;  // per data shard (max_steps)
constexpr int kBatch = 10;

// "shard:first-end" per segment, for readable comparisons.
std::vector<std::string> Plan(const WorkerSlot& s) {
  std::vector<std::string> out;
  for (const DataSegment& d : s.plan()) {
    out.push_back(std::to_string(d.data_shard()) + ":" +
                  std::to_string(d.first_batch()) + "-" +
                  std::to_string(d.end_batch()));
  }
  return out;
}

int64_t End(const WorkerSlot& s) {
  return PlanEnd(s.plan_start(), s.plan(), kSteps);
}

class LeftoverDataTest : public ::testing::Test {
 protected:
  // A running job of `n` workers (member ids 1..n, each at `clock`).
  Job& Start(int n, ConsistencySpec::Model model,
             DataSpec::LeftoverData leftover = DataSpec::TRAIN,
             int64_t clock = 0) {
    auto job = std::make_unique<Job>();
    job->record.set_job_id("job-1");
    job->record.set_state(RUNNING);
    DataSpec* d = job->record.mutable_spec()->mutable_data();
    d->set_max_steps(kSteps);
    d->set_batch_size(kBatch);
    d->set_leftover_data(leftover);
    job->record.mutable_spec()->mutable_consistency()->set_model(model);
    std::vector<int64_t> workers;
    for (int i = 1; i <= n; ++i) {
      workers.push_back(i);
      job->runtime[i].clock = clock;
    }
    AssignInitialSlots(job->record, workers);
    AssignInitialPlans(job->record);
    absl::MutexLock l(&table_.mu());
    return table_.Insert(std::move(job));
  }

  void Evict(Job& job, int64_t member) {
    absl::MutexLock l(&table_.mu());
    ps::coordinator::Evict(table_, job, member, "gone", /*banned=*/false,
                           &writes_);
  }

  // Member `member` (idle) takes the vacant rank.
  void Fill(Job& job, int64_t member) {
    std::set<int64_t> idle = {member};
    absl::MutexLock l(&table_.mu());
    FillVacancies(table_, job, &idle, &writes_);
  }

  const JobEvent* FindEvent(const Job& job, const std::string& kind) {
    for (const JobEvent& e : job.events) {
      if (e.kind() == kind) return &e;
    }
    return nullptr;
  }

  FakeClock clock_;
  JobTable table_{&clock_};
  WriteBatch writes_;
};

TEST_F(LeftoverDataTest, EachRankStartsWithAllOfItsDataShard) {
  Job& job = Start(3, ConsistencySpec::ASP);
  for (int i = 0; i < 3; ++i) {
    const WorkerSlot& s = job.record.slots(i);
    EXPECT_EQ(Plan(s), std::vector<std::string>{std::to_string(i) + ":0-0"});
    EXPECT_EQ(s.plan_start(), 0);
    EXPECT_EQ(End(s), kSteps);
  }
  EXPECT_TRUE(UsesPlans(job.record));
  WorkerAssignment a;
  FillAssignment(job, job.record.slots(2), &a);
  ASSERT_EQ(a.plan_size(), 1);
  EXPECT_EQ(a.plan(0).data_shard(), 2);
  EXPECT_FALSE(a.done());
}

TEST_F(LeftoverDataTest, AspTrainSpreadsTheRestOverTheSurvivors) {
  Job& job = Start(3, ConsistencySpec::ASP);
  job.runtime[1].clock = 401;  // 599 batches of shard 0 left
  job.runtime[2].clock = 380;
  job.runtime[3].clock = 390;
  Evict(job, 1);
  const JobRecord& r = job.record;
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_EQ(Plan(r.slots(0)), std::vector<std::string>{"0:0-401"})
      << "what it trained stays its own";
  EXPECT_EQ(Plan(r.slots(1)), (std::vector<std::string>{"1:0-0", "0:401-701"}));
  EXPECT_EQ(Plan(r.slots(2)),
            (std::vector<std::string>{"2:0-0", "0:701-1000"}));
  EXPECT_EQ(std::vector<int>(r.slots(1).data_shards().begin(),
                             r.slots(1).data_shards().end()),
            (std::vector<int>{1, 0}));
  EXPECT_EQ(r.examples_skipped(), 0);
  EXPECT_EQ(r.total_steps(), 1300);
  const JobEvent* moved = FindEvent(job, "data_moved");
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(moved->message(),
            "member 1 (rank 0) stopped at step 401 with 599 batches (5990 "
            "examples) untrained: 300 moved to member 2 (rank 1) from step "
            "1000 (shard 0 batches 401-700); 299 moved to member 3 (rank 2) "
            "from step 1000 (shard 0 batches 701-999)");
  EXPECT_EQ(FindEvent(job, "data_skipped"), nullptr);
  EXPECT_EQ(FindEvent(job, "membership"), nullptr)
      << "the legacy whole-shard event is for records without plans";
}

TEST_F(LeftoverDataTest, ASecondDepartureMovesWhatTheFirstHadInherited) {
  Job& job = Start(3, ConsistencySpec::ASP);
  // Rank 1 already carries 10 more batches.
  *job.record.mutable_slots(1)->add_plan() = PlanSegment(7, 0, 10);
  Evict(job, 1);  // 1000 batches: 500 each
  EXPECT_EQ(End(job.record.slots(1)), 1510);
  EXPECT_EQ(End(job.record.slots(2)), 1500);
  Evict(job, 2);  // at clock 0: all 1510 of its batches to rank 2
  EXPECT_EQ(End(job.record.slots(2)), 3010);
  EXPECT_EQ(Plan(job.record.slots(1)), std::vector<std::string>{});
}

TEST_F(LeftoverDataTest, AspUnevenPartsPreferTheShorterPlan) {
  Job& job = Start(3, ConsistencySpec::ASP);
  *job.record.mutable_slots(1)->add_plan() =
      PlanSegment(7, 0, 10);  // ends at 1010
  job.runtime[1].clock = 1;   // 999 batches left: 500 and 499
  Evict(job, 1);
  EXPECT_EQ(End(job.record.slots(2)), 1500) << "rank 2 ended first: 500";
  EXPECT_EQ(End(job.record.slots(1)), 1509);
}

TEST_F(LeftoverDataTest, BspPartsAreEqualAndTheRemainderIsCounted) {
  Job& job = Start(4, ConsistencySpec::BSP, DataSpec::TRAIN, 401);
  Evict(job, 1);  // 599 batches over 3: 199 each, 2 skipped
  const JobRecord& r = job.record;
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(End(r.slots(i)), kSteps + 199) << "rank " << i;
  }
  EXPECT_EQ(Plan(r.slots(1)), (std::vector<std::string>{"1:0-0", "0:401-600"}));
  EXPECT_EQ(Plan(r.slots(3)), (std::vector<std::string>{"3:0-0", "0:799-998"}));
  EXPECT_EQ(r.examples_skipped(), 2 * kBatch);
  const JobEvent* skipped = FindEvent(job, "data_skipped");
  ASSERT_NE(skipped, nullptr);
  EXPECT_EQ(skipped->message(),
            "20 examples (2 batches: shard 0 batches 998-999) of member 1 "
            "(rank 0) skipped: BSP needs equal parts for the 3 workers left");
  ASSERT_NE(FindEvent(job, "data_moved"), nullptr);
  EXPECT_EQ(r.total_steps(), kSteps + 199);
}

TEST_F(LeftoverDataTest, BspWithFewerBatchesThanSurvivorsSkipsThemAll) {
  Job& job = Start(3, ConsistencySpec::BSP, DataSpec::TRAIN, kSteps - 1);
  Evict(job, 1);  // 1 batch over 2
  EXPECT_EQ(End(job.record.slots(1)), kSteps);
  EXPECT_EQ(End(job.record.slots(2)), kSteps);
  EXPECT_EQ(job.record.examples_skipped(), kBatch);
  EXPECT_EQ(FindEvent(job, "data_moved"), nullptr);
}

TEST_F(LeftoverDataTest, SspPartsAreEqualAndGoToFinishedWorkersToo) {
  Job& job = Start(3, ConsistencySpec::SSP, DataSpec::TRAIN, 401);
  job.record.mutable_slots(2)->set_done(true);  // its clock stays at its end
  job.runtime[3].clock = kSteps;
  Evict(job, 1);  // 599 batches: 299 each, 1 skipped
  const JobRecord& r = job.record;
  EXPECT_EQ(End(r.slots(1)), kSteps + 299);
  EXPECT_EQ(End(r.slots(2)), kSteps + 299) << "one length for the bound";
  EXPECT_FALSE(r.slots(2).done());
  EXPECT_EQ(r.slots(2).start_step(), kSteps);
  EXPECT_EQ(r.examples_skipped(), kBatch);
  const JobEvent* skipped = FindEvent(job, "data_skipped");
  ASSERT_NE(skipped, nullptr);
  EXPECT_NE(skipped->message().find("SSP needs equal parts for the 2"),
            std::string::npos)
      << skipped->message();
}

TEST_F(LeftoverDataTest, SkipCountsTheRestAndMovesNothing) {
  for (ConsistencySpec::Model model :
       {ConsistencySpec::ASP, ConsistencySpec::BSP}) {
    Job& job = Start(3, model, DataSpec::SKIP, 400);
    Evict(job, 1);
    const JobRecord& r = job.record;
    EXPECT_EQ(r.examples_skipped(), 600 * kBatch) << model;
    EXPECT_EQ(Plan(r.slots(1)), std::vector<std::string>{"1:0-0"});
    EXPECT_EQ(Plan(r.slots(2)), std::vector<std::string>{"2:0-0"});
    const JobEvent* skipped = FindEvent(job, "data_skipped");
    ASSERT_NE(skipped, nullptr);
    EXPECT_EQ(skipped->message(),
              "6000 examples (600 batches: shard 0 batches 400-999) of member "
              "1 (rank 0) skipped: data.leftover_data is SKIP");
    EXPECT_EQ(FindEvent(job, "data_moved"), nullptr);
    absl::MutexLock l(&table_.mu());
    table_.jobs().erase("job-1");
  }
}

TEST_F(LeftoverDataTest, FinishedSurvivorsTrainOnAndTheJobDoesNotEnd) {
  Job& job = Start(3, ConsistencySpec::ASP);
  job.runtime[1].clock = 600;
  for (int i : {1, 2}) {
    job.record.mutable_slots(i)->set_done(true);
    job.runtime[i + 1].clock = kSteps;
  }
  Evict(job, 1);
  const JobRecord& r = job.record;
  EXPECT_EQ(r.state(), RUNNING) << r.reason();
  for (int i : {1, 2}) {
    EXPECT_FALSE(r.slots(i).done());
    EXPECT_EQ(r.slots(i).start_step(), kSteps) << "on from its plan's end";
    EXPECT_EQ(End(r.slots(i)), kSteps + 200);
  }
  WorkerAssignment a;
  FillAssignment(job, r.slots(1), &a);
  EXPECT_FALSE(a.done());
  EXPECT_EQ(a.start_step(), kSteps);
}

TEST_F(LeftoverDataTest, OnlyWorkersStillTrainingTakeTheRest) {
  Job& job = Start(3, ConsistencySpec::ASP);
  job.runtime[1].clock = 500;
  job.record.mutable_slots(2)->set_done(true);
  Evict(job, 1);
  EXPECT_EQ(End(job.record.slots(1)), kSteps + 500);
  EXPECT_EQ(End(job.record.slots(2)), kSteps);
  EXPECT_TRUE(job.record.slots(2).done());
}

TEST_F(LeftoverDataTest, ARejoiningWorkerTakesItsShardsUntrainedTailsBack) {
  Job& job = Start(3, ConsistencySpec::ASP);
  job.runtime[1].clock = 400;
  Evict(job, 1);                // shard 0 400-699 to rank 1, 700-999 to rank 2
  job.runtime[2].clock = 1100;  // 100 batches into its part
  job.runtime[3].clock = 900;   // not into its part yet
  job.record.set_global_step(1100);
  Fill(job, 1);
  const JobRecord& r = job.record;
  ASSERT_EQ(r.slots_size(), 4);
  EXPECT_EQ(Plan(r.slots(1)),
            (std::vector<std::string>{"1:0-1000", "0:400-500"}));
  EXPECT_EQ(Plan(r.slots(2)), std::vector<std::string>{"2:0-1000"});
  EXPECT_EQ(Plan(r.slots(3)),
            (std::vector<std::string>{"0:500-700", "0:700-1000"}));
  EXPECT_EQ(r.slots(3).plan_start(), 1100);
  EXPECT_EQ(r.slots(3).start_step(), 1100);
}

TEST_F(LeftoverDataTest, ARejoiningWorkerWithNothingLeftHasAnEmptyPlan) {
  Job& job = Start(2, ConsistencySpec::ASP, DataSpec::TRAIN, 400);
  Evict(job, 1);  // 600 batches to member 2, trained by now
  job.runtime[2].clock = kSteps + 600;
  Fill(job, 1);
  const WorkerSlot& back = job.record.slots(2);
  EXPECT_GT(back.plan_size(), 0) << "a plan, not a record from before plans";
  EXPECT_EQ(PlanBatches(back.plan(), kSteps), 0);
  EXPECT_EQ(Plan(job.record.slots(1)),
            (std::vector<std::string>{"1:0-0", "0:400-1000"}));
}

TEST_F(LeftoverDataTest, ARejoiningWorkerTakesBackWhatWasSkipped) {
  Job& job = Start(2, ConsistencySpec::ASP, DataSpec::SKIP, 400);
  Evict(job, 1);
  EXPECT_EQ(job.record.examples_skipped(), 600 * kBatch);
  job.runtime[2].clock = 450;
  Fill(job, 1);
  EXPECT_EQ(Plan(job.record.slots(2)), std::vector<std::string>{"0:400-1000"});
  EXPECT_EQ(job.record.examples_skipped(), 0);
}

TEST_F(LeftoverDataTest, BspRejoinEndsWithTheOthersAndCountsWhatDoesNotFit) {
  Job& job = Start(3, ConsistencySpec::BSP, DataSpec::TRAIN, 200);
  Evict(job, 2);  // rank 1: 800 batches, 400 to each survivor
  for (int64_t m : {1, 3}) job.runtime[m].clock = 250;
  job.record.set_global_step(250);
  Fill(job, 2);
  const JobRecord& r = job.record;
  ASSERT_EQ(r.slots_size(), 4);
  for (int i : {0, 2}) EXPECT_EQ(End(r.slots(i)), kSteps) << "parts taken back";
  EXPECT_EQ(Plan(r.slots(3)),
            (std::vector<std::string>{"1:200-600", "1:600-950"}));
  EXPECT_EQ(End(r.slots(3)), kSteps) << "from step 250, as the others";
  EXPECT_EQ(r.examples_skipped(), 50 * kBatch);
}

TEST_F(LeftoverDataTest, BspRejoinRetakesTheRemainderThatWasSkipped) {
  Job& job = Start(4, ConsistencySpec::BSP, DataSpec::TRAIN, 401);
  Evict(job, 1);  // 199 to each of 3, batches 998-999 skipped
  job.record.set_global_step(401);
  Fill(job, 1);
  const JobRecord& r = job.record;
  ASSERT_EQ(r.slots_size(), 5);
  EXPECT_EQ(Plan(r.slots(4)),
            (std::vector<std::string>{"0:401-600", "0:600-799", "0:799-998",
                                      "0:998-1000"}));
  for (int i = 1; i < 5; ++i) EXPECT_EQ(End(r.slots(i)), kSteps) << i;
  EXPECT_EQ(r.examples_skipped(), 0);
}

TEST_F(LeftoverDataTest, ExamplesTrainedAndTotalFollowPlansAndClocks) {
  Job& job = Start(3, ConsistencySpec::ASP);
  job.runtime[1].clock = 400;
  job.runtime[2].clock = 1100;
  job.runtime[3].clock = 900;
  Evict(job, 1);
  const JobRecord r = Snapshot(job);
  EXPECT_EQ(r.examples_total(), 3 * kSteps * kBatch);
  EXPECT_EQ(r.examples_trained(), (400 + 1100 + 900) * kBatch);
  job.runtime[2].clock = End(job.record.slots(1));
  job.runtime[3].clock = End(job.record.slots(2));
  EXPECT_EQ(Snapshot(job).examples_trained(), 3 * kSteps * kBatch)
      << "every example once";
}

TEST_F(LeftoverDataTest, ReportedShardStepsDecideTheCut) {
  Job& job = Start(2, ConsistencySpec::ASP);
  job.record.set_shard_steps(50);
  job.runtime[1].clock = 20;
  Evict(job, 1);
  EXPECT_EQ(Plan(job.record.slots(1)),
            (std::vector<std::string>{"1:0-0", "0:20-50"}));
  EXPECT_EQ(JobShardSteps(job.record), 50);
}

// Text data sized by epochs: its steps per data shard are the workers'
// count, reported through their heartbeats. Once known, a leaver's batches
// move under TRAIN and are counted under SKIP as on IDX data.
TEST_F(LeftoverDataTest, TextDataMovesOrSkipsByTheReportedShape) {
  for (const DataSpec::LeftoverData leftover :
       {DataSpec::TRAIN, DataSpec::SKIP}) {
    Job& job = Start(3, ConsistencySpec::ASP, leftover);
    DataSpec* d = job.record.mutable_spec()->mutable_data();
    d->set_format(DataSpec::MOVIELENS);
    d->set_max_steps(0);
    d->set_epochs(2);
    job.record.set_shard_steps(60);  // 2 epochs of 30 batches, counted
    job.record.set_steps_per_epoch(30);
    job.runtime[1].clock = 42;
    job.runtime[2].clock = 45;
    job.runtime[3].clock = 44;
    Evict(job, 1);
    const JobRecord r = Snapshot(job);
    EXPECT_EQ(r.examples_total(), 3 * 60 * kBatch);
    if (leftover == DataSpec::TRAIN) {
      EXPECT_EQ(Plan(job.record.slots(1)),
                (std::vector<std::string>{"1:0-0", "0:42-51"}));
      EXPECT_EQ(Plan(job.record.slots(2)),
                (std::vector<std::string>{"2:0-0", "0:51-60"}));
      EXPECT_NE(FindEvent(job, "data_moved"), nullptr);
      EXPECT_EQ(r.examples_skipped(), 0);
    } else {
      EXPECT_EQ(r.examples_skipped(), 18 * kBatch);
      EXPECT_NE(FindEvent(job, "data_skipped"), nullptr);
    }
    EXPECT_EQ(r.examples_trained() + r.examples_skipped(),
              (42 + 45 + 44) * kBatch +
                  (leftover == DataSpec::TRAIN ? 0 : 18 * kBatch))
        << "the leaver's 42 batches trained, the rest moved or skipped";
    absl::MutexLock l(&table_.mu());
    table_.jobs().clear();
  }
}

// A worker that dies while the text data is still being counted leaves a
// plan of unknown length: it waits (event data_pending) and moves once a
// worker reports the count; a worker that rejoined at its rank keeps it.
TEST_F(LeftoverDataTest, ALeftoverOfUnknownLengthMovesOnceCounted) {
  for (const bool rejoined : {false, true}) {
    Job& job = Start(3, ConsistencySpec::ASP);
    DataSpec* d = job.record.mutable_spec()->mutable_data();
    d->set_format(DataSpec::CRITEO);
    d->set_max_steps(0);
    d->set_epochs(1);
    Evict(job, 1);
    EXPECT_NE(FindEvent(job, "data_pending"), nullptr);
    EXPECT_EQ(FindEvent(job, "data_moved"), nullptr);
    EXPECT_TRUE(job.record.slots(0).leftover_pending());
    EXPECT_EQ(Snapshot(job).examples_trained(), 0) << "nothing counted yet";
    if (rejoined) Fill(job, 4);
    {
      absl::MutexLock l(&table_.mu());
      MovePendingLeftovers(table_, job, &writes_);
    }
    EXPECT_TRUE(job.record.slots(0).leftover_pending()) << "still not known";
    job.record.set_shard_steps(40);
    {
      absl::MutexLock l(&table_.mu());
      MovePendingLeftovers(table_, job, &writes_);
    }
    EXPECT_FALSE(job.record.slots(0).leftover_pending());
    if (rejoined) {
      EXPECT_EQ(FindEvent(job, "data_moved"), nullptr) << "taken back";
      EXPECT_EQ(PlanBatches(job.record.slots(0).plan(), 40), 0)
          << "the leaver's plan ends where it stopped";
    } else {
      ASSERT_NE(FindEvent(job, "data_moved"), nullptr);
      EXPECT_EQ(Plan(job.record.slots(1)),
                (std::vector<std::string>{"1:0-0", "0:0-20"}));
      EXPECT_EQ(Plan(job.record.slots(2)),
                (std::vector<std::string>{"2:0-0", "0:20-40"}));
    }
    absl::MutexLock l(&table_.mu());
    table_.jobs().clear();
  }
}

TEST_F(LeftoverDataTest, PlansSurviveACoordinatorRestart) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/plans";
  std::filesystem::remove_all(dir);
  Job& job = Start(3, ConsistencySpec::ASP);
  job.runtime[1].clock = 401;
  Evict(job, 1);
  const JobRecord want = job.record;
  {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(writes_.Flush(store->get()).ok());
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<StoredJob>> jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  const JobRecord& got = (*jobs)[0].record;
  ASSERT_EQ(got.slots_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Plan(got.slots(i)), Plan(want.slots(i))) << "rank " << i;
  }
  bool moved = false;
  for (const JobEvent& e : (*jobs)[0].events) moved |= e.kind() == "data_moved";
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace ps::coordinator
