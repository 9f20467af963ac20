#include "server/coordinator/job_state.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "common/platform/fake_clock.h"
#include "server/coordinator/membership.h"

namespace ps::coordinator {
namespace {

WorkerSlot* AddSlot(Job& job, int64_t member, int rank, bool active = true,
                    bool done = false) {
  WorkerSlot* s = job.record.add_slots();
  s->set_member_id(member);
  s->set_rank(rank);
  s->set_active(active);
  s->set_done(done);
  s->add_data_shards(rank);
  return s;
}

TEST(JobState, TotalStepsFromMaxStepsElseEpochs) {
  struct Case {
    int64_t max_steps;
    int epochs;
    int batch;
    int workers;
    int64_t want;
  };
  const std::vector<Case> cases = {
      {500, 3, 128, 2, 500},    // max_steps wins
      {0, 1, 100, 1, 600},      // 60000 / 100
      {0, 2, 128, 2, 2 * 235},  // ceil(60000 / 256) = 235
      {0, 1, 0, 0, 60000},      // batch and workers at least 1
      {0, 0, 128, 1, 0},        // no epochs: nothing to estimate
  };
  for (const Case& c : cases) {
    JobSpec spec;
    spec.mutable_data()->set_max_steps(c.max_steps);
    spec.mutable_data()->set_epochs(c.epochs);
    spec.mutable_data()->set_batch_size(c.batch);
    EXPECT_EQ(EstimateTotalSteps(spec, c.workers), c.want)
        << c.max_steps << " " << c.epochs << " " << c.batch << " " << c.workers;
  }
}

TEST(JobState, TextDataWithoutMaxStepsHasNoKnownTotal) {
  JobSpec spec;
  spec.mutable_data()->set_format(DataSpec::CRITEO);
  spec.mutable_data()->set_batch_size(100);
  spec.mutable_data()->set_epochs(3);
  EXPECT_EQ(EstimateTotalSteps(spec, 2), 0);
  EXPECT_EQ(MaxStep(spec), std::numeric_limits<int64_t>::max());
  spec.mutable_data()->set_max_steps(40);
  EXPECT_EQ(EstimateTotalSteps(spec, 2), 40);
  EXPECT_EQ(MaxStep(spec), 40);
}

// A data plan without max_steps runs to no known end until a worker
// reports the shape it derived from its data, IDX and text data alike (a
// Fashion-MNIST estimate kept text workers "not done" past their data).
TEST(JobState, NoShardStepsUntilReported) {
  for (const DataSpec::Format format : {DataSpec::CRITEO, DataSpec::IDX}) {
    JobRecord record;
    DataSpec* d = record.mutable_spec()->mutable_data();
    d->set_format(format);
    d->set_batch_size(128);
    d->set_epochs(1);
    record.set_num_data_shards(2);
    EXPECT_EQ(JobShardSteps(record), 0) << format;
    d->set_max_steps(40);
    EXPECT_EQ(JobShardSteps(record), 40) << format;
    d->set_max_steps(0);
    record.set_shard_steps(78);  // as the workers reported it
    EXPECT_EQ(JobShardSteps(record), 78) << format;
    d->set_max_steps(40);
    EXPECT_EQ(JobShardSteps(record), 78) << format << ": the report wins";
  }
}

TEST(JobState, MaxStepIsOneWorkerDoingEveryEpoch) {
  JobSpec spec;
  spec.mutable_data()->set_epochs(2);
  spec.mutable_data()->set_batch_size(100);
  EXPECT_EQ(MaxStep(spec), 1200);
  spec.mutable_data()->set_epochs(0);  // unbounded
  EXPECT_EQ(MaxStep(spec), std::numeric_limits<int64_t>::max());
}

TEST(JobState, ActiveSlotsAndDone) {
  Job job;
  EXPECT_FALSE(AllActiveDone(job)) << "no active worker is not done";
  AddSlot(job, 7, 0, /*active=*/false, /*done=*/false);  // left
  AddSlot(job, 8, 1, true, true);
  EXPECT_EQ(ActiveSlot(job, 7), nullptr);
  ASSERT_NE(ActiveSlot(job, 8), nullptr);
  EXPECT_EQ(ActiveSlot(job, 8)->rank(), 1);
  EXPECT_EQ(CountActive(job), 1);
  EXPECT_TRUE(AllActiveDone(job)) << "the inactive slot does not count";
  AddSlot(job, 9, 2);
  EXPECT_FALSE(AllActiveDone(job));
  EXPECT_EQ(CountActive(job), 2);
}

TEST(JobState, SnapshotShowsTheClocksOfActiveWorkers) {
  Job job;
  AddSlot(job, 7, 0, /*active=*/false);
  AddSlot(job, 8, 1);
  AddSlot(job, 9, 2);
  job.runtime[7].clock = 5;
  job.runtime[8].clock = 12;
  const JobRecord r = Snapshot(job);
  EXPECT_EQ(r.slots(0).clock(), 0) << "an inactive slot keeps its own";
  EXPECT_EQ(r.slots(1).clock(), 12);
  EXPECT_EQ(r.slots(2).clock(), 0) << "no runtime yet";
  EXPECT_EQ(job.record.slots(1).clock(), 0) << "the job is not changed";
}

TEST(JobState, AssignmentCarriesTheSlotAndTheJob) {
  Job job;
  job.record.set_job_id("job-3");
  job.record.set_num_data_shards(2);
  job.record.add_servers("127.0.0.1:7001");
  job.record.set_membership_epoch(4);
  job.record.set_incarnation(2);
  WorkerSlot* s = AddSlot(job, 8, 1);
  s->add_data_shards(0);
  s->set_evaluator(true);
  s->set_start_step(57);
  WorkerAssignment a;
  FillAssignment(job, *s, &a);
  EXPECT_EQ(a.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(a.job_id(), "job-3");
  EXPECT_EQ(a.rank(), 1);
  EXPECT_EQ(a.num_workers(), 2);
  EXPECT_EQ(a.num_data_shards(), 2);
  EXPECT_EQ(std::vector<int>(a.data_shards().begin(), a.data_shards().end()),
            (std::vector<int>{1, 0}));
  ASSERT_EQ(a.server_addresses_size(), 1);
  EXPECT_EQ(a.server_addresses(0), "127.0.0.1:7001");
  EXPECT_TRUE(a.evaluator());
  EXPECT_EQ(a.membership_epoch(), 4);
  EXPECT_EQ(a.start_step(), 57);
  EXPECT_EQ(a.incarnation(), 2);
  EXPECT_EQ(a.shard_steps(), 0) << "no shape reported yet";
  job.record.set_shard_steps(312);
  job.record.set_steps_per_epoch(104);
  FillAssignment(job, *s, &a);
  EXPECT_EQ(a.shard_steps(), 312);
  EXPECT_EQ(a.steps_per_epoch(), 104);
}

TEST(JobState, ShardsAreKnownByAddress) {
  FakeClock clock;
  Membership members(&clock, {.heartbeat_timeout_ms = 1000});
  Job job;
  job.record.add_servers("127.0.0.1:7001");
  job.record.add_servers("127.0.0.1:7002");
  RegisterRequest r;
  r.set_role(SERVER);
  r.set_address("127.0.0.1:7002");
  absl::StatusOr<Member> m = members.Register(r);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(ShardUp(job, 0, members));
  EXPECT_TRUE(ShardUp(job, 1, members));
  EXPECT_EQ(ShardsServedBy(job, *m, members), std::vector<int>{1});
  clock.AdvanceMs(2000);
  members.DetectDead();
  EXPECT_FALSE(ShardUp(job, 1, members));
  Member elsewhere = *m;
  elsewhere.set_address("127.0.0.1:9999");
  EXPECT_TRUE(ShardsServedBy(job, elsewhere, members).empty());
}

TEST(JobState, ShardsAreKnownByMemberIdWhateverTheirAddress) {
  FakeClock clock;
  Membership members(&clock, {.heartbeat_timeout_ms = 1000});
  Job job;
  job.record.add_servers("127.0.0.1:7001");
  job.record.add_servers("127.0.0.1:7002");
  job.record.add_server_members(11);
  job.record.add_server_members(12);
  RegisterRequest r;
  r.set_role(SERVER);
  r.set_member_id(12);
  r.set_address("127.0.0.1:9002");  // shard 1's server, back elsewhere
  absl::StatusOr<Member> moved = members.Register(r);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_TRUE(ShardUp(job, 1, members));
  EXPECT_EQ(ShardsServedBy(job, *moved, members), std::vector<int>{1});
  // A stranger at shard 0's old address serves it while member 11 is not
  // ALIVE (a server restarted there without its identity), not after.
  r.set_member_id(0);
  r.set_address("127.0.0.1:7001");
  absl::StatusOr<Member> stranger = members.Register(r);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_FALSE(ShardUp(job, 0, members)) << "known by id, not address";
  EXPECT_EQ(ShardsServedBy(job, *stranger, members), std::vector<int>{0});
  r.set_member_id(11);
  r.set_address("127.0.0.1:9001");
  ASSERT_TRUE(members.Register(r).ok());
  EXPECT_TRUE(ShardUp(job, 0, members));
  EXPECT_TRUE(ShardsServedBy(job, *stranger, members).empty());
}

}  // namespace
}  // namespace ps::coordinator
