#include "server/coordinator/job_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "common/platform/fake_clock.h"
#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
namespace {

class JobTableTest : public ::testing::Test {
 protected:
  Job& AddJob(const std::string& id) {
    auto job = std::make_unique<Job>();
    job->record.set_job_id(id);
    absl::MutexLock l(&table_.mu());
    return table_.Insert(std::move(job));
  }

  FakeClock clock_;
  JobTable table_{&clock_};
  WriteBatch writes_;
  RecordingJobStore store_;
};

TEST_F(JobTableTest, FindsJobsById) {
  Job& job = AddJob("job-1");
  absl::MutexLock l(&table_.mu());
  absl::StatusOr<Job*> found = table_.Find("job-1");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, &job);
  absl::StatusOr<Job*> missing = table_.Find("job-2");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no job 'job-2'");
}

TEST_F(JobTableTest, NewIdsNeverRepeatALoadedOne) {
  absl::MutexLock l(&table_.mu());
  EXPECT_EQ(table_.NewJobId(), "job-1");
  table_.NoteJobId("job-10");
  table_.NoteJobId("job-4");     // lower: no effect
  table_.NoteJobId("imported");  // not ours: ignored
  table_.NoteJobId("job-x");
  EXPECT_EQ(table_.NewJobId(), "job-11");
  EXPECT_EQ(table_.NewJobId(), "job-12");
  EXPECT_EQ(table_.NextOrder(), 0);
  EXPECT_EQ(table_.NextOrder(), 1);
}

TEST_F(JobTableTest, EventsAreStampedCountedAndQueued) {
  Job& job = AddJob("job-1");
  const int64_t change = job.change;
  {
    absl::MutexLock l(&table_.mu());
    table_.AddEvent(job, "evicted", "member 3 evicted", 3, &writes_);
  }
  ASSERT_EQ(job.events.size(), 1u);
  EXPECT_EQ(job.events[0].time_ms(), clock_.NowMs());
  EXPECT_EQ(job.events[0].kind(), "evicted");
  EXPECT_EQ(job.events[0].member_id(), 3);
  EXPECT_EQ(job.record.num_events(), 1);
  EXPECT_GT(job.change, change);
  ASSERT_TRUE(writes_.Flush(&store_).ok());
  ASSERT_EQ(store_.appends.size(), 1u);
  EXPECT_EQ(store_.appends[0].job_id, "job-1");
  ASSERT_EQ(store_.appends[0].events.size(), 1u);
  EXPECT_EQ(store_.appends[0].events[0].message(), "member 3 evicted");
  EXPECT_TRUE(store_.records.empty());
}

TEST_F(JobTableTest, SavedRecordsListActiveWorkersInRankOrder) {
  Job& job = AddJob("job-1");
  for (auto [member, rank, active] :
       {std::tuple{9, 1, true}, {4, 0, false}, {5, 2, true}, {6, 0, true}}) {
    WorkerSlot* s = job.record.add_slots();
    s->set_member_id(member);
    s->set_rank(rank);
    s->set_active(active);
  }
  {
    absl::MutexLock l(&table_.mu());
    table_.SaveRecord(job, &writes_);
    table_.SaveRecord(job, &writes_);
  }
  EXPECT_EQ(std::vector<int64_t>(job.record.workers().begin(),
                                 job.record.workers().end()),
            (std::vector<int64_t>{6, 9, 5}));
  ASSERT_TRUE(writes_.Flush(&store_).ok());
  ASSERT_EQ(store_.records.size(), 2u);
  EXPECT_EQ(store_.records[0].second, 1);
  EXPECT_EQ(store_.records[1].second, 2) << "each save is ordered after";
  EXPECT_EQ(store_.records[0].first.workers_size(), 3);
}

TEST_F(JobTableTest, StateChangesStampTimesAndSayWhy) {
  Job& job = AddJob("job-1");
  const int64_t start = clock_.NowMs();
  {
    absl::MutexLock l(&table_.mu());
    table_.SetState(job, RUNNING, "running on 2 worker(s)", &writes_);
  }
  EXPECT_EQ(job.record.state(), RUNNING);
  EXPECT_EQ(job.record.reason(), "running on 2 worker(s)");
  EXPECT_EQ(job.record.start_time_ms(), start);
  EXPECT_EQ(job.record.end_time_ms(), 0);
  clock_.AdvanceMs(5000);
  {
    absl::MutexLock l(&table_.mu());
    table_.SetState(job, FAILED, "no worker left", &writes_);
  }
  EXPECT_EQ(job.record.start_time_ms(), start);
  EXPECT_EQ(job.record.end_time_ms(), start + 5000);
  ASSERT_EQ(job.events.size(), 2u);
  EXPECT_EQ(job.events[1].kind(), "state");
  EXPECT_EQ(job.events[1].message(), "FAILED: no worker left");
  ASSERT_TRUE(writes_.Flush(&store_).ok());
  ASSERT_EQ(store_.records.size(), 2u);
  EXPECT_EQ(store_.records[1].first.state(), FAILED);
}

TEST_F(JobTableTest, WaitReturnsAtOnceThenOnAChange) {
  Job& job = AddJob("job-1");
  int64_t seen = 0;
  absl::StatusOr<JobRecord> r =
      table_.WaitForChange("job-1", &seen, absl::ZeroDuration());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seen, job.change);
  const int64_t first = seen;
  ASSERT_TRUE(table_.WaitForChange("job-1", &seen, absl::ZeroDuration()).ok());
  EXPECT_EQ(seen, first) << "nothing changed: the timeout passed";
  // A waiter with a long timeout is woken by the change (whether it was
  // already waiting or not).
  int64_t woken_seen = first;
  std::thread waiter([&] {
    ASSERT_TRUE(
        table_.WaitForChange("job-1", &woken_seen, absl::Minutes(5)).ok());
  });
  {
    absl::MutexLock l(&table_.mu());
    table_.Touch(job);
  }
  waiter.join();
  EXPECT_GT(woken_seen, first);
  EXPECT_EQ(table_.WaitForChange("job-2", &seen, absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobTableTest, ShutdownWakesWaitersWithUnavailable) {
  AddJob("job-1");
  int64_t seen = 0;
  ASSERT_TRUE(table_.WaitForChange("job-1", &seen, absl::ZeroDuration()).ok());
  absl::Status waited;
  std::thread waiter([&] {
    int64_t s = seen;
    waited = table_.WaitForChange("job-1", &s, absl::Minutes(5)).status();
  });
  table_.Shutdown();
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table_.WaitForChange("job-1", &seen, absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps::coordinator
