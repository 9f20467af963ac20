#include "server/coordinator/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "server/coordinator/data_assignment.h"
#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
namespace {

constexpr int64_t kInterval = 1000;

TEST(Scheduler, PendingSaysWhatItWaitsFor) {
  EXPECT_EQ(WhyPending(0, 5, 2), "waiting for a parameter server to register");
  EXPECT_EQ(WhyPending(1, 1, 2), "waiting for 2 idle worker(s), 1 available");
  EXPECT_EQ(WhyPending(1, 2, 2), "");
  EXPECT_EQ(WhyPending(3, 4, 2), "");
}

TEST(Scheduler, FreshMeansHeardWithinThreeIntervals) {
  Member m;
  m.set_last_heartbeat_ms(10000);
  EXPECT_TRUE(Fresh(m, 13000, kInterval));
  EXPECT_FALSE(Fresh(m, 13001, kInterval));
}

class SchedulerTest : public ::testing::Test {
 protected:
  int64_t AddMember(MemberRole role, const std::string& address = "",
                    const std::string& device = "") {
    RegisterRequest r;
    r.set_role(role);
    r.set_address(address);
    r.set_device(device);
    absl::StatusOr<Member> m = members_.Register(r);
    EXPECT_TRUE(m.ok()) << m.status();
    return m->member_id();
  }

  Job& Queue(const std::string& id, int num_workers, int64_t order) {
    auto job = std::make_unique<Job>();
    job->record.set_job_id(id);
    job->record.set_state(PENDING);
    job->record.mutable_spec()->set_num_workers(num_workers);
    job->record.mutable_spec()->mutable_data()->set_max_steps(100);
    job->order = order;
    absl::MutexLock l(&table_.mu());
    return table_.Insert(std::move(job));
  }

  std::vector<int64_t> Idle() {
    absl::MutexLock l(&table_.mu());
    return IdleWorkers(table_, members_, clock_.NowMs(), kInterval);
  }

  void StartNext() {
    WriteBatch writes;
    scheduler_.StartNextJob(&writes);
    EXPECT_TRUE(writes.empty()) << "flushed";
  }

  FakeClock clock_;
  Membership members_{&clock_, {.heartbeat_timeout_ms = 10000}};
  JobTable table_{&clock_};
  FakeShardClient shards_;
  RecordingJobStore store_;
  Scheduler scheduler_{kInterval, &table_, &members_, &shards_, &store_};
};

TEST_F(SchedulerTest, IdleWorkersAreAliveFreshAndFree) {
  const int64_t busy = AddMember(WORKER);
  const int64_t starting = AddMember(WORKER);
  Job& running = Queue("job-1", 1, 0);
  running.record.set_state(RUNNING);
  AssignInitialSlots(running.record, {busy});
  Job& setting_up = Queue("job-2", 1, 1);
  setting_up.starting = true;
  AssignInitialSlots(setting_up.record, {starting});
  Job& ended = Queue("job-3", 1, 2);
  const int64_t free = AddMember(WORKER);
  ended.record.set_state(SUCCEEDED);
  AssignInitialSlots(ended.record, {free});
  clock_.AdvanceMs(2000);
  const int64_t late = AddMember(WORKER);
  for (int64_t id : {busy, starting, free}) {
    ASSERT_TRUE(members_.Heartbeat(id).ok());
  }
  clock_.AdvanceMs(1500);  // every worker heard from 1.5 s ago
  AddMember(SERVER, "127.0.0.1:7001");
  EXPECT_EQ(Idle(), (std::vector<int64_t>{free, late}));
  clock_.AdvanceMs(2000);
  EXPECT_EQ(Idle(), std::vector<int64_t>{}) << "silent for > 3 intervals";
}

TEST_F(SchedulerTest, PythonJobsTakePythonWorkersAndOthersTheRest) {
  const int64_t cpu = AddMember(WORKER, "", "cpu");
  const int64_t python = AddMember(WORKER, "", "python");
  const int64_t gpu = AddMember(WORKER, "", "cuda:0");
  JobSpec plain;
  JobSpec py;
  py.mutable_python();
  const std::vector<int64_t> all = {cpu, python, gpu, 99};  // 99: unknown
  EXPECT_EQ(WorkersFor(all, members_, plain), (std::vector<int64_t>{cpu, gpu}));
  EXPECT_EQ(WorkersFor(all, members_, py), std::vector<int64_t>{python});
  py.mutable_python()->set_script("train.py");  // ps_worker starts it
  EXPECT_EQ(WorkersFor(all, members_, py), (std::vector<int64_t>{cpu, gpu}));
}

TEST_F(SchedulerTest, TheOldestQueuedJobStartsOnEveryServer) {
  AddMember(SERVER, "127.0.0.1:7001");
  AddMember(SERVER, "127.0.0.1:7002");
  const int64_t w1 = AddMember(WORKER);
  const int64_t w2 = AddMember(WORKER);
  Job& later = Queue("job-1", 2, /*order=*/5);
  Job& first = Queue("job-2", 2, /*order=*/3);
  StartNext();
  EXPECT_EQ(later.record.state(), PENDING);
  ASSERT_EQ(first.record.state(), RUNNING) << first.record.reason();
  EXPECT_EQ(first.record.reason(), "running on 2 worker(s) and 2 shard(s)");
  ASSERT_EQ(shards_.setups.size(), 2u);
  EXPECT_EQ(shards_.setups[1].first, "127.0.0.1:7002");
  const SetupJobRequest& setup = shards_.setups[1].second;
  EXPECT_EQ(setup.job_id(), "job-2");
  EXPECT_EQ(setup.shard_index(), 1);
  EXPECT_EQ(setup.num_shards(), 2);
  EXPECT_EQ(std::vector<int64_t>(setup.worker_ids().begin(),
                                 setup.worker_ids().end()),
            (std::vector<int64_t>{w1, w2}));
  EXPECT_EQ(std::vector<int64_t>(setup.worker_joins().begin(),
                                 setup.worker_joins().end()),
            (std::vector<int64_t>{1, 1}));
  EXPECT_FALSE(setup.replace());
  EXPECT_FALSE(first.starting);
  ASSERT_EQ(first.record.slots_size(), 2);
  EXPECT_EQ(first.record.slots(1).member_id(), w2);
  EXPECT_EQ(first.record.servers_size(), 2);
  for (const ShardSync& s : first.shards) {
    EXPECT_EQ(s.synced_epoch, 1);
    EXPECT_TRUE(s.have_counters);
  }
  EXPECT_EQ(first.runtime[w1].last_heartbeat_ms, clock_.NowMs());
  ASSERT_FALSE(store_.records.empty());
  EXPECT_EQ(store_.records.back().first.state(), RUNNING);
  // Its workers are busy now: the next job waits.
  StartNext();
  EXPECT_EQ(later.record.state(), PENDING);
  EXPECT_EQ(later.record.reason(), "waiting for 2 idle worker(s), 0 available");
}

TEST_F(SchedulerTest, AWaitingJobSavesItsReasonOnce) {
  Job& job = Queue("job-1", 0, 0);
  StartNext();
  EXPECT_EQ(job.record.reason(), "waiting for a parameter server to register");
  EXPECT_EQ(store_.records.size(), 1u);
  StartNext();
  EXPECT_EQ(store_.records.size(), 1u) << "the same reason is not saved again";
  AddMember(SERVER, "127.0.0.1:7001");
  StartNext();
  EXPECT_EQ(job.record.reason(), "waiting for 1 idle worker(s), 0 available");
  for (int i = 0; i < 3; ++i) AddMember(WORKER);
  StartNext();
  EXPECT_EQ(job.record.state(), RUNNING);
  EXPECT_EQ(job.record.slots_size(), 3) << "0 workers: every idle one";
  EXPECT_EQ(shards_.setups.size(), 1u);
}

TEST_F(SchedulerTest, AFailedSetupIsUndoneAndTriedAgain) {
  AddMember(SERVER, "127.0.0.1:7001");
  AddMember(SERVER, "127.0.0.1:7002");
  AddMember(WORKER);
  Job& job = Queue("job-1", 1, 0);
  shards_.setup_errors["127.0.0.1:7002"] =
      absl::UnavailableError("connection refused");
  StartNext();
  EXPECT_EQ(job.record.state(), PENDING);
  EXPECT_EQ(job.record.reason(),
            "setup failed on shard 1 (127.0.0.1:7002): connection refused; "
            "will retry");
  EXPECT_EQ(job.record.slots_size(), 0);
  EXPECT_EQ(job.record.servers_size(), 0);
  ASSERT_FALSE(job.events.empty());
  EXPECT_EQ(job.events.back().kind(), "setup_failed");
  ASSERT_EQ(shards_.teardowns.size(), 1u);
  EXPECT_EQ(shards_.teardowns[0].first, "127.0.0.1:7001");
  EXPECT_FALSE(job.starting);
  shards_.setup_errors.clear();
  StartNext();
  EXPECT_EQ(job.record.state(), RUNNING);
}

// A shard that refuses the job's spec refuses it on every retry: the job
// fails once with the shard's reason (a stale ps_server that did not know
// a DataSpec field had a job retried 586 times in 10 minutes).
TEST_F(SchedulerTest, ASetupRefusedForGoodFailsTheJobOnce) {
  AddMember(SERVER, "127.0.0.1:7001");
  AddMember(SERVER, "127.0.0.1:7002");
  AddMember(WORKER);
  Job& job = Queue("job-1", 1, 0);
  shards_.setup_errors["127.0.0.1:7001"] =
      absl::UnavailableError("connection refused");
  shards_.setup_errors["127.0.0.1:7002"] =
      absl::InvalidArgumentError("data.path: no such directory");
  StartNext();
  EXPECT_EQ(job.record.state(), FAILED);
  EXPECT_EQ(job.record.reason(),
            "setup failed on shard 1 (127.0.0.1:7002): data.path: no such "
            "directory");
  EXPECT_GT(job.record.end_time_ms(), 0);
  EXPECT_EQ(job.record.slots_size(), 0);
  EXPECT_EQ(std::count_if(
                job.events.begin(), job.events.end(),
                [](const JobEvent& e) { return e.kind() == "setup_failed"; }),
            1);
  ASSERT_FALSE(job.events.empty());
  EXPECT_EQ(job.events.back().kind(), "state");
  EXPECT_EQ(store_.records.back().first.state(), FAILED) << "saved";
  EXPECT_TRUE(shards_.teardowns.empty()) << "no shard took the job";
  const size_t setups = shards_.setups.size();
  shards_.setup_errors.clear();
  StartNext();
  EXPECT_EQ(job.record.state(), FAILED) << "not tried again";
  EXPECT_EQ(shards_.setups.size(), setups);
}

TEST(Scheduler, OnlyRefusalsNoRetryCanChangeAreFinal) {
  EXPECT_TRUE(RefusedForGood(absl::InvalidArgumentError("bad spec")));
  EXPECT_TRUE(RefusedForGood(absl::UnimplementedError("no SetupJob")));
  EXPECT_FALSE(RefusedForGood(absl::UnavailableError("connection refused")));
  EXPECT_FALSE(RefusedForGood(absl::DeadlineExceededError("slow")));
  EXPECT_FALSE(RefusedForGood(absl::ResourceExhaustedError("memory")));
  EXPECT_FALSE(RefusedForGood(absl::AlreadyExistsError("job-1")));
  EXPECT_FALSE(RefusedForGood(absl::OkStatus()));
}

TEST_F(SchedulerTest, AJobCancelledDuringItsSetupIsTornDown) {
  AddMember(SERVER, "127.0.0.1:7001");
  AddMember(WORKER);
  Job& job = Queue("job-1", 1, 0);
  // The shard's setup is where the job gets cancelled (the lock is not
  // held during it).
  class CancellingShards : public FakeShardClient {
   public:
    CancellingShards(JobTable* table, Job* job) : table_(table), job_(job) {}
    absl::StatusOr<SetupJobResponse> SetupJob(
        const std::string& address, const SetupJobRequest& request) override {
      {
        absl::MutexLock l(&table_->mu());
        job_->record.set_state(CANCELLED);
      }
      return FakeShardClient::SetupJob(address, request);
    }

   private:
    JobTable* table_;
    Job* job_;
  } shards(&table_, &job);
  Scheduler scheduler(kInterval, &table_, &members_, &shards, &store_);
  WriteBatch writes;
  scheduler.StartNextJob(&writes);
  EXPECT_EQ(job.record.state(), CANCELLED);
  ASSERT_EQ(shards.teardowns.size(), 1u);
  EXPECT_EQ(shards.teardowns[0].first, "127.0.0.1:7001");
  ASSERT_EQ(job.shards.size(), 1u);
  EXPECT_TRUE(job.shards[0].torn_down);
}

}  // namespace
}  // namespace ps::coordinator
