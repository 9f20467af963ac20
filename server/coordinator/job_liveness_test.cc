#include "server/coordinator/job_liveness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"

namespace ps::coordinator {
namespace {

class LivenessTest : public ::testing::Test {
 protected:
  // A running job on servers 127.0.0.1:7001.. (registered and ALIVE) with
  // workers 1..n, every one heard from now.
  Job& Running(const std::string& id, int workers, int servers,
               ConsistencySpec::Model model = ConsistencySpec::BSP) {
    auto job = std::make_unique<Job>();
    job->record.set_job_id(id);
    job->record.set_state(RUNNING);
    JobSpec& spec = *job->record.mutable_spec();
    spec.mutable_data()->set_max_steps(1000);
    spec.mutable_consistency()->set_model(model);
    spec.mutable_consistency()->set_heartbeat_timeout_ms(10000);
    spec.mutable_consistency()->set_barrier_timeout_ms(5000);
    job->record.set_num_data_shards(workers);
    job->record.set_membership_epoch(1);
    for (int i = 1; i <= workers; ++i) {
      WorkerSlot* s = job->record.add_slots();
      s->set_member_id(i);
      s->set_rank(i - 1);
      s->set_active(true);
      s->add_data_shards(i - 1);
      s->set_evaluator(i == 1);
      job->runtime[i].last_heartbeat_ms = clock_.NowMs();
      job->runtime[i].clock_changed_ms = clock_.NowMs();
    }
    for (int i = 0; i < servers; ++i) {
      const std::string address = absl::StrCat("127.0.0.1:", 7001 + i);
      job->record.add_servers(address);
      if (!members_.AliveServerAt(address).has_value()) {
        RegisterRequest r;
        r.set_role(SERVER);
        r.set_address(address);
        server_ids_.push_back(members_.Register(r)->member_id());
      }
    }
    job->shards.assign(servers, ShardSync{});
    absl::MutexLock l(&table_.mu());
    return table_.Insert(std::move(job));
  }

  // Time passes; the servers in `beating` heartbeat; the job is checked.
  void Check(Job& job, int64_t ms, std::vector<int64_t> beating = {}) {
    clock_.AdvanceMs(ms);
    for (int64_t id : beating) ASSERT_TRUE(members_.Heartbeat(id).ok());
    members_.DetectDead();
    absl::MutexLock l(&table_.mu());
    CheckRunningJob(table_, job, members_, clock_.NowMs(), options_, &writes_);
  }

  // Worker `member` heartbeats with its clock in job `job_id`.
  WorkerAssignment Beat(int64_t member, const std::string& job_id,
                        int64_t clock, int64_t incarnation = 0) {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(job_id);
    r.set_clock(clock);
    r.set_incarnation(incarnation);
    WorkerAssignment a;
    absl::MutexLock l(&table_.mu());
    AnswerHeartbeat(table_, r, clock_.NowMs(), options_.rate_window_ms, &a);
    return a;
  }

  bool HasEvent(const Job& job, const std::string& kind) {
    return std::any_of(job.events.begin(), job.events.end(),
                       [&](const JobEvent& e) { return e.kind() == kind; });
  }

  FakeClock clock_;
  Membership members_{&clock_, {.heartbeat_timeout_ms = 3000}};
  std::vector<int64_t> server_ids_;
  JobTable table_{&clock_};
  LivenessOptions options_{.server_wait_timeout_ms = 20000};
  WriteBatch writes_;
};

TEST_F(LivenessTest, HeartbeatsGetTrainStopOrIdle) {
  Job& job = Running("job-1", 2, 1);
  WorkerAssignment a = Beat(2, "job-1", 7);
  EXPECT_EQ(a.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(a.job_id(), "job-1");
  EXPECT_EQ(a.rank(), 1);
  EXPECT_EQ(job.runtime[2].clock, 7);
  EXPECT_EQ(job.record.global_step(), 7);
  // A clock of another incarnation (from before a rollback) is not taken.
  Beat(2, "job-1", 9, /*incarnation=*/1);
  EXPECT_EQ(job.runtime[2].clock, 7);
  // Nor one no worker can reach.
  Beat(2, "job-1", 1001);
  EXPECT_EQ(job.record.global_step(), 7);
  a = Beat(5, "job-1", 3);
  EXPECT_EQ(a.command(), WorkerAssignment::STOP);
  EXPECT_EQ(a.job_id(), "job-1");
  EXPECT_EQ(Beat(5, "", 0).command(), WorkerAssignment::IDLE);
  job.record.set_state(CANCELLED);
  EXPECT_EQ(Beat(1, "job-1", 7).command(), WorkerAssignment::STOP);
}

// A text job's shape comes from its workers' counting pass, through the
// heartbeats: the first report is the job's (and its progress total, which
// had no estimate); another job's or incarnation's, or a later one, is not.
TEST_F(LivenessTest, HeartbeatsCarryTheDataShape) {
  Job& job = Running("job-1", 2, 1);
  job.record.mutable_spec()->mutable_data()->set_format(DataSpec::CRITEO);
  job.record.mutable_spec()->mutable_data()->set_max_steps(0);
  job.record.set_total_steps(0);
  const auto beat = [&](const std::string& id, int64_t incarnation,
                        int64_t shard_steps) {
    HeartbeatRequest r;
    r.set_member_id(1);
    r.set_job_id(id);
    r.set_incarnation(incarnation);
    r.set_shard_steps(shard_steps);
    r.set_steps_per_epoch(shard_steps / 3);
    WorkerAssignment a;
    absl::MutexLock l(&table_.mu());
    AnswerHeartbeat(table_, r, clock_.NowMs(), options_.rate_window_ms, &a);
    return a;
  };
  EXPECT_EQ(beat("job-1", 0, 0).shard_steps(), 0) << "not counted yet";
  EXPECT_EQ(JobShardSteps(job.record), 0);
  beat("job-0", 0, 999);
  beat("job-1", 1, 999);
  EXPECT_EQ(JobShardSteps(job.record), 0) << "not this job's shape";
  WorkerAssignment a = beat("job-1", 0, 240);
  EXPECT_EQ(JobShardSteps(job.record), 240);
  EXPECT_EQ(job.record.steps_per_epoch(), 80);
  EXPECT_EQ(job.record.total_steps(), 240);
  EXPECT_EQ(a.shard_steps(), 240) << "handed to the workers";
  EXPECT_EQ(a.steps_per_epoch(), 80);
  beat("job-1", 0, 300);
  EXPECT_EQ(JobShardSteps(job.record), 240) << "the first report stays";
}

TEST_F(LivenessTest, ClocksMoveTheStepAndFeedTheRate) {
  Job& job = Running("job-1", 1, 1);
  const int64_t change = job.change;
  Beat(1, "job-1", 4);
  EXPECT_GT(job.change, change);
  const int64_t after = job.change;
  Beat(1, "job-1", 4);
  EXPECT_EQ(job.change, after) << "the same clock is no change";
  EXPECT_EQ(job.runtime[1].samples.size(), 2u);
  Beat(1, "job-1", 2);
  EXPECT_EQ(job.record.global_step(), 4) << "the job's step never goes back";
}

TEST_F(LivenessTest, ARegisteringServerHasItsShardsChecked) {
  Job& a = Running("job-1", 1, 2);
  Job& b = Running("job-2", 1, 2);
  b.record.set_state(SUCCEEDED);
  Member server;
  server.set_role(SERVER);
  server.set_address("127.0.0.1:7002");
  {
    absl::MutexLock l(&table_.mu());
    CheckShardsServedBy(table_, server, members_, &writes_);
  }
  EXPECT_FALSE(a.shards[0].needs_check);
  EXPECT_TRUE(a.shards[1].needs_check);
  EXPECT_FALSE(b.shards[1].needs_check) << "only running jobs";
}

TEST_F(LivenessTest, AShardBackAtAnotherAddressIsServedFromThere) {
  Job& job = Running("job-1", 1, 2);
  for (int64_t id : server_ids_) job.record.add_server_members(id);
  const int64_t moved_id = server_ids_[1];
  Check(job, 4000, {server_ids_[0]});  // shard 1's server died
  EXPECT_TRUE(HasEvent(job, "server_failure"));
  RegisterRequest r;
  r.set_role(SERVER);
  r.set_member_id(moved_id);
  r.set_address("127.0.0.1:9002");
  absl::StatusOr<Member> m = members_.Register(r);
  ASSERT_TRUE(m.ok()) << m.status();
  {
    absl::MutexLock l(&table_.mu());
    CheckShardsServedBy(table_, *m, members_, &writes_);
  }
  EXPECT_TRUE(job.shards[1].needs_check);
  EXPECT_FALSE(job.shards[0].needs_check);
  EXPECT_EQ(job.record.servers(1), "127.0.0.1:9002");
  EXPECT_EQ(job.record.server_members(1), moved_id);
  EXPECT_EQ(job.record.servers(0), "127.0.0.1:7001");
  EXPECT_TRUE(HasEvent(job, "server_moved"));
  Check(job, 100, {server_ids_[0], moved_id});
  EXPECT_TRUE(HasEvent(job, "server_recovered"));
  EXPECT_EQ(job.record.state(), RUNNING);
  WorkerAssignment a = Beat(1, "job-1", 3);
  ASSERT_EQ(a.server_addresses_size(), 2);
  EXPECT_EQ(a.server_addresses(1), "127.0.0.1:9002");
}

TEST_F(LivenessTest, SilentWorkersAreEvictedButNotBanned) {
  Job& job = Running("job-1", 2, 1);
  job.runtime[2].last_heartbeat_ms = clock_.NowMs() + 5000;
  Check(job, 10001, server_ids_);
  EXPECT_FALSE(job.record.slots(0).active());
  EXPECT_FALSE(job.record.slots(0).banned());
  EXPECT_NE(job.record.slots(0).left_reason().find(
                "no heartbeat for 10.0s (timeout 10.0s)"),
            std::string::npos)
      << job.record.slots(0).left_reason();
  EXPECT_TRUE(job.record.slots(1).active());
  EXPECT_EQ(job.record.state(), RUNNING);
}

TEST_F(LivenessTest, NobodyIsEvictedWithinARestartGracePeriod) {
  Job& job = Running("job-1", 2, 1);
  // A restarted coordinator: 30 s of grace, three times the heartbeat
  // timeout, and neither worker heard from.
  options_.grace_until_ms = clock_.NowMs() + 30000;
  Beat(1, "job-1", 5);
  Beat(2, "job-1", 5);
  for (int i = 0; i < 5; ++i) Check(job, 5000, server_ids_);
  Check(job, 4999, server_ids_);
  EXPECT_TRUE(job.record.slots(0).active());
  EXPECT_TRUE(job.record.slots(1).active());
  // After it, the heartbeat timeout counts from its end.
  Check(job, 9000, server_ids_);
  EXPECT_TRUE(job.record.slots(1).active());
  Check(job, 2000, server_ids_);
  EXPECT_FALSE(job.record.slots(1).active());
  EXPECT_NE(job.record.slots(1).left_reason().find("no heartbeat"),
            std::string::npos);
}

TEST_F(LivenessTest, ADownShardIsWaitedForThenFailsTheJob) {
  Job& job = Running("job-1", 1, 2);
  const int64_t alive = server_ids_[0];  // 7002 goes silent
  Check(job, 4000, {alive});
  EXPECT_TRUE(HasEvent(job, "server_failure"));
  EXPECT_EQ(job.record.reason(), "waiting for shard 1 at 127.0.0.1:7002");
  const int64_t down_since = job.shards[1].down_since_ms;
  EXPECT_EQ(down_since, clock_.NowMs());
  for (int i = 0; i < 10; ++i) {
    job.runtime[1].last_heartbeat_ms = clock_.NowMs();
    Check(job, 2000, {alive});
  }
  EXPECT_EQ(job.record.state(), RUNNING) << "exactly the wait: still waiting";
  job.runtime[1].last_heartbeat_ms = clock_.NowMs();
  Check(job, 1, {alive});
  EXPECT_EQ(job.record.state(), FAILED);
  EXPECT_EQ(job.record.reason(),
            "shard 1 at 127.0.0.1:7002 was down for 20.0s");
}

TEST_F(LivenessTest, AShardThatComesBackIsChecked) {
  Job& job = Running("job-1", 1, 1);
  Check(job, 4000);  // the server missed its heartbeats
  ASSERT_NE(job.shards[0].down_since_ms, 0);
  RegisterRequest r;
  r.set_role(SERVER);
  r.set_address("127.0.0.1:7001");
  ASSERT_TRUE(members_.Register(r).ok());
  Check(job, 100);
  EXPECT_EQ(job.shards[0].down_since_ms, 0);
  EXPECT_TRUE(job.shards[0].needs_check);
  EXPECT_TRUE(HasEvent(job, "server_recovered"));
  EXPECT_EQ(job.record.reason(), "running");
}

TEST_F(LivenessTest, TheWorkerHoldingABspStepIsEvictedAndBanned) {
  struct Case {
    const char* name;
    ConsistencySpec::Model model;
    int backup_workers;
    bool evicted;
  };
  for (const Case& c : std::vector<Case>{
           {"BSP", ConsistencySpec::BSP, 0, true},
           {"unspecified is BSP", ConsistencySpec::MODEL_UNSPECIFIED, 0, true},
           {"BSP with a backup worker", ConsistencySpec::BSP, 1, false},
           {"SSP", ConsistencySpec::SSP, 0, false},
       }) {
    Job& job = Running(absl::StrCat("job-", c.name), 2, 1, c.model);
    job.record.mutable_spec()->mutable_consistency()->set_backup_workers(
        c.backup_workers);
    // Step 7 is held from the first beat: 6 s later, past the 5 s timeout.
    for (int i = 0; i < 4; ++i) {
      clock_.AdvanceMs(2000);
      ASSERT_TRUE(members_.Heartbeat(server_ids_[0]).ok());
      Beat(1, job.record.job_id(), 8);
      Beat(2, job.record.job_id(), 7);  // alive, but stuck on step 7
      absl::MutexLock l(&table_.mu());
      CheckRunningJob(table_, job, members_, clock_.NowMs(), options_,
                      &writes_);
    }
    EXPECT_EQ(!job.record.slots(1).active(), c.evicted) << c.name;
    if (c.evicted) {
      EXPECT_TRUE(job.record.slots(1).banned()) << c.name;
      EXPECT_NE(job.record.slots(1).left_reason().find(
                    "barrier timeout: held step 7"),
                std::string::npos)
          << job.record.slots(1).left_reason();
    }
    job.record.set_state(SUCCEEDED);  // out of the next case's way
  }
}

TEST_F(LivenessTest, ADownShardRestartsTheBarrierTimer) {
  Job& job = Running("job-1", 2, 1);
  job.runtime[1].clock = 8;
  job.runtime[2].clock = 7;
  for (int i = 0; i < 5; ++i) {  // 10 s with the shard down
    for (int64_t w : {1, 2}) job.runtime[w].last_heartbeat_ms = clock_.NowMs();
    Check(job, 2000);
  }
  EXPECT_TRUE(job.record.slots(1).active());
  EXPECT_EQ(job.runtime[2].clock_changed_ms, clock_.NowMs());
}

TEST_F(LivenessTest, StragglersAreReportedAndEvictedWhenThePolicySaysSo) {
  for (bool evict : {false, true}) {
    Job& job =
        Running(evict ? "job-evict" : "job-flag", 3, 1, ConsistencySpec::ASP);
    StragglerPolicy& p = *job.record.mutable_spec()->mutable_straggler_policy();
    p.set_slow_ratio(0.5f);
    p.set_window_steps(30);
    p.set_evict(evict);
    for (int t = 1; t <= 20; ++t) {
      clock_.AdvanceMs(1000);
      ASSERT_TRUE(members_.Heartbeat(server_ids_[0]).ok());
      Beat(1, job.record.job_id(), 10 * t);
      Beat(2, job.record.job_id(), 10 * t);
      Beat(3, job.record.job_id(), 2 * t);  // 5x slower
      absl::MutexLock l(&table_.mu());
      CheckRunningJob(table_, job, members_, clock_.NowMs(), options_,
                      &writes_);
    }
    EXPECT_TRUE(HasEvent(job, "straggler")) << evict;
    EXPECT_EQ(job.record.slots(2).active(), !evict);
    if (evict) {
      EXPECT_TRUE(job.record.slots(2).banned());
      EXPECT_EQ(job.record.slots(2).left_reason().rfind("straggler: ", 0), 0u);
    }
    job.record.set_state(SUCCEEDED);
  }
}

}  // namespace
}  // namespace ps::coordinator
