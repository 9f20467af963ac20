#include "server/coordinator/replicas.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/platform/fake_clock.h"

namespace ps::coordinator {
namespace {

TEST(Replicas, BackupsGoToTheNextServersNeverTwoOnOne) {
  EXPECT_EQ(BackupServers(0, 3, 2), (std::vector<int>{1}));
  EXPECT_EQ(BackupServers(2, 3, 2), (std::vector<int>{0}));
  EXPECT_EQ(BackupServers(1, 3, 3), (std::vector<int>{2, 0}));
  EXPECT_TRUE(BackupServers(0, 3, 1).empty());
  JobSpec spec;
  spec.mutable_replication()->set_factor(3);
  EXPECT_EQ(ReplicationShortfall(spec, 3), "");
  EXPECT_NE(ReplicationShortfall(spec, 2).find("needs 3 parameter servers"),
            std::string::npos);
  EXPECT_EQ(ReplicationShortfall(JobSpec(), 1), "");
}

// Three servers (members 1-3), a job of factor 2 on them, one worker.
class ReplicasTest : public ::testing::Test {
 protected:
  ReplicasTest() : members_(&clock_, {}), table_(&clock_) {
    for (int i = 1; i <= 3; ++i) {
      RegisterRequest r;
      r.set_role(SERVER);
      r.set_address("s" + std::to_string(i));
      r.set_member_id(i);
      EXPECT_TRUE(members_.Register(r).ok());
    }
    auto job = std::make_unique<Job>();
    JobRecord& rec = job->record;
    rec.set_job_id("job-1");
    rec.set_state(RUNNING);
    rec.mutable_spec()->mutable_replication()->set_factor(2);
    for (int i = 1; i <= 3; ++i) {
      rec.add_servers("s" + std::to_string(i));
      rec.add_server_members(i);
    }
    WorkerSlot* slot = rec.add_slots();
    slot->set_member_id(9);
    slot->set_active(true);
    AssignReplicas(rec);
    job->shards.resize(3);
    absl::MutexLock l(&table_.mu());
    job_ = &table_.Insert(std::move(job));
  }

  FakeClock clock_;
  Membership members_;
  JobTable table_;
  Job* job_ = nullptr;
};

TEST_F(ReplicasTest, SetupsNameTheBackups) {
  const JobRecord& rec = job_->record;
  ASSERT_EQ(rec.replicas_size(), 3);
  EXPECT_EQ(rec.replicas(2).backup_addresses(0), "s1");
  EXPECT_EQ(rec.replicas(2).backup_members(0), 1);
  SetupJobRequest primary = ReplicaSetup(rec, 0, SetupJobRequest::PRIMARY, {9});
  EXPECT_EQ(primary.replica_role(), SetupJobRequest::PRIMARY);
  EXPECT_EQ(primary.replica_epoch(), 1);
  ASSERT_EQ(primary.backup_addresses_size(), 1);
  EXPECT_EQ(primary.backup_addresses(0), "s2");
  SetupJobRequest backup = ReplicaSetup(rec, 0, SetupJobRequest::BACKUP, {9});
  EXPECT_EQ(backup.backup_addresses_size(), 0);
  EXPECT_EQ(backup.num_shards(), 3);
}

TEST_F(ReplicasTest, ALostPrimarysBackupIsPromoted) {
  absl::MutexLock l(&table_.mu());
  Promotion p = PlanPromotion(*job_, 1, members_);
  ASSERT_EQ(p.backup, 0);
  EXPECT_EQ(p.member, 3);
  EXPECT_EQ(p.address, "s3");
  EXPECT_EQ(p.request.replica_role(), SetupJobRequest::PRIMARY);
  EXPECT_EQ(p.request.replica_epoch(), 2);
  EXPECT_EQ(p.request.shard_index(), 1);
  ASSERT_EQ(p.request.worker_ids_size(), 1);
  WriteBatch writes;
  EXPECT_TRUE(p.rebuilt.members.empty());  // factor 2: no other backup
  ApplyPromotion(table_, *job_, 1, p.member, p.address, p.request, 17,
                 p.rebuilt, &writes);
  const JobRecord& rec = job_->record;
  EXPECT_EQ(rec.servers(1), "s3");
  EXPECT_EQ(rec.server_members(1), 3);
  EXPECT_EQ(rec.replicas(1).epoch(), 2);
  EXPECT_EQ(rec.replicas(1).backup_members_size(), 0);
  ASSERT_FALSE(job_->events.empty());
  EXPECT_EQ(job_->events.back().kind(), "failover");
  EXPECT_NE(job_->events.back().message().find("version 17"),
            std::string::npos);
  // No backup left: nothing to promote the next time.
  EXPECT_EQ(PlanPromotion(*job_, 1, members_).backup, -1);
}

TEST_F(ReplicasTest, ADeadBackupIsDroppedFromItsPrimary) {
  absl::MutexLock l(&table_.mu());
  EXPECT_TRUE(PlanBackupDrop(*job_, 0, members_).job_id().empty());
  clock_.Advance(absl::Seconds(11));
  for (int64_t m : {1, 3}) ASSERT_TRUE(members_.Heartbeat(m).ok());
  members_.DetectDead();  // member 2 (s2), shard 0's backup
  SetupJobRequest drop = PlanBackupDrop(*job_, 0, members_);
  ASSERT_EQ(drop.job_id(), "job-1");
  EXPECT_EQ(drop.replica_role(), SetupJobRequest::PRIMARY);
  EXPECT_EQ(drop.backup_addresses_size(), 0);
  WriteBatch writes;
  ApplyBackupDrop(table_, *job_, 0, drop, &writes);
  EXPECT_EQ(job_->record.replicas(0).backup_members_size(), 0);
  EXPECT_EQ(job_->events.back().kind(), "backup_lost");
  EXPECT_TRUE(PlanBackupDrop(*job_, 0, members_).job_id().empty());
}

TEST_F(ReplicasTest, APrimaryThatRefusesCallsTwiceIsLost) {
  const absl::Status refused = absl::UnavailableError("connection refused");
  NoteShardAnswer(*job_, 1, refused, 1000);
  EXPECT_FALSE(job_->shards[1].primary_lost);
  NoteShardAnswer(*job_, 1, absl::OkStatus(), 1200);  // it answers again
  NoteShardAnswer(*job_, 1, refused, 1400);
  NoteShardAnswer(*job_, 1, refused, 1400 + kUnreachableMs - 1);
  EXPECT_FALSE(job_->shards[1].primary_lost);
  // A slow answer is not a lost server.
  NoteShardAnswer(*job_, 1, absl::DeadlineExceededError("slow"), 3000);
  EXPECT_FALSE(job_->shards[1].primary_lost);
  NoteShardAnswer(*job_, 1, refused, 1400 + kUnreachableMs);
  EXPECT_TRUE(job_->shards[1].primary_lost);
  // Its server (member 2) is no backup of shard 0 any more either.
  {
    absl::MutexLock l(&table_.mu());
    SetupJobRequest drop = PlanBackupDrop(*job_, 0, members_);
    EXPECT_EQ(drop.job_id(), "job-1");
    EXPECT_EQ(drop.backup_addresses_size(), 0);
  }
  // Without a backup to take over, the member timeout decides.
  job_->record.mutable_replicas(2)->clear_backup_members();
  job_->record.mutable_replicas(2)->clear_backup_addresses();
  NoteShardAnswer(*job_, 2, refused, 1000);
  NoteShardAnswer(*job_, 2, refused, 5000);
  EXPECT_FALSE(job_->shards[2].primary_lost);
}

// A shard that lost its backup gets a new one on a live server holding no
// replica of it (the fewest replicas of the job: a spare server first); it
// is building, so not promoted, until its primary reports it in sync.
TEST_F(ReplicasTest, ALostBackupIsReplacedAndPromotableOnceInSync) {
  absl::MutexLock l(&table_.mu());
  WriteBatch writes;
  SetupJobRequest primary;
  EXPECT_TRUE(PlanBackupAdd(*job_, 0, members_, &primary).members.empty());
  clock_.Advance(absl::Seconds(11));
  for (int64_t m : {1, 3}) ASSERT_TRUE(members_.Heartbeat(m).ok());
  members_.DetectDead();  // member 2 (s2), shard 0's backup
  // The lost one is dropped first.
  EXPECT_TRUE(PlanBackupAdd(*job_, 0, members_, &primary).members.empty());
  ApplyBackupDrop(table_, *job_, 0, PlanBackupDrop(*job_, 0, members_),
                  &writes);
  NewBackups add = PlanBackupAdd(*job_, 0, members_, &primary);
  ASSERT_EQ(add.members, (std::vector<int64_t>{3}));
  EXPECT_EQ(add.addresses, (std::vector<std::string>{"s3"}));
  EXPECT_EQ(add.setup.replica_role(), SetupJobRequest::BACKUP);
  EXPECT_EQ(add.setup.shard_index(), 0);
  EXPECT_EQ(primary.replica_role(), SetupJobRequest::PRIMARY);
  EXPECT_EQ(primary.backup_addresses_size(), 1);
  // A spare server (member 4, holding nothing) is the better place.
  RegisterRequest spare;
  spare.set_role(SERVER);
  spare.set_address("s4");
  spare.set_member_id(4);
  ASSERT_TRUE(members_.Register(spare).ok());
  add = PlanBackupAdd(*job_, 0, members_, &primary);
  ASSERT_EQ(add.members, (std::vector<int64_t>{4}));
  EXPECT_EQ(primary.backup_addresses(0), "s4");
  ApplyBackupAdd(table_, *job_, 0, add, &writes);
  EXPECT_EQ(job_->events.back().kind(), "backup_added");
  EXPECT_EQ(job_->record.replicas(0).backup_members(0), 4);
  EXPECT_TRUE(PlanBackupAdd(*job_, 0, members_, &primary).members.empty());
  // Building: the primary's loss now would have no backup to promote.
  EXPECT_EQ(PlanPromotion(*job_, 0, members_).backup, -1);
  ShardStatus status;
  ShardStatus::Backup* b = status.add_backups();
  b->set_address("s4");
  b->set_building(true);
  EXPECT_FALSE(NoteBackupsInSync(table_, *job_, 0, status, &writes));
  b->set_building(false);
  EXPECT_TRUE(NoteBackupsInSync(table_, *job_, 0, status, &writes));
  EXPECT_EQ(job_->events.back().kind(), "backup_ready");
  EXPECT_EQ(PlanPromotion(*job_, 0, members_).member, 4);
}

// A backup its primary reports unanswered for the backup timeout (a link
// cut between the two while the coordinator reaches both) is dropped,
// never promoted, and not chosen as the shard's new backup until
// kCutRetryMs have passed.
TEST_F(ReplicasTest, ABackupItsPrimaryCannotReachIsDroppedNotChosenAgain) {
  absl::MutexLock l(&table_.mu());
  WriteBatch writes;
  ShardStatus status;  // shard 0's primary s1, its backup s2
  ShardStatus::Backup* b = status.add_backups();
  b->set_address("s2");
  b->set_unanswered_ms(2999);
  b->set_last_error("DEADLINE_EXCEEDED: Deadline Exceeded");
  NoteBackupsUnanswered(*job_, 0, status, 10000, 3000);
  EXPECT_TRUE(PlanBackupDrop(*job_, 0, members_).job_id().empty());
  b->set_unanswered_ms(3000);
  NoteBackupsUnanswered(*job_, 0, status, 10000, 3000);
  EXPECT_EQ(PlanPromotion(*job_, 0, members_).backup, -1);
  SetupJobRequest drop = PlanBackupDrop(*job_, 0, members_);
  ASSERT_EQ(drop.job_id(), "job-1");
  EXPECT_EQ(drop.backup_addresses_size(), 0);
  ApplyBackupDrop(table_, *job_, 0, drop, &writes);
  EXPECT_EQ(job_->events.back().kind(), "backup_lost");
  EXPECT_NE(job_->events.back().message().find(
                "no answer from it for 3s: DEADLINE_EXCEEDED"),
            std::string::npos)
      << job_->events.back().message();
  // Member 2 now holds the fewest replicas but is cut off: member 3.
  SetupJobRequest primary;
  EXPECT_EQ(PlanBackupAdd(*job_, 0, members_, &primary).members,
            (std::vector<int64_t>{3}));
  NoteBackupsUnanswered(*job_, 0, ShardStatus(), 10000 + kCutRetryMs - 1, 3000);
  EXPECT_EQ(PlanBackupAdd(*job_, 0, members_, &primary).members,
            (std::vector<int64_t>{3}));
  NoteBackupsUnanswered(*job_, 0, ShardStatus(), 10000 + kCutRetryMs, 3000);
  EXPECT_EQ(PlanBackupAdd(*job_, 0, members_, &primary).members,
            (std::vector<int64_t>{2}));
}

// Factor 3: a promotion gives the new primary the other live backup, set
// up again at the new epoch and rebuilt (building until in sync).
TEST_F(ReplicasTest, APromotionRebuildsTheOtherBackups) {
  absl::MutexLock l(&table_.mu());
  job_->record.mutable_spec()->mutable_replication()->set_factor(3);
  AssignReplicas(job_->record);
  Promotion p = PlanPromotion(*job_, 0, members_);
  ASSERT_EQ(p.member, 2);
  EXPECT_EQ(p.rebuilt.members, (std::vector<int64_t>{3}));
  EXPECT_EQ(p.rebuilt.setup.replica_role(), SetupJobRequest::BACKUP);
  EXPECT_EQ(p.rebuilt.setup.replica_epoch(), 2);
  ASSERT_EQ(p.request.backup_addresses_size(), 1);
  EXPECT_EQ(p.request.backup_addresses(0), "s3");
  WriteBatch writes;
  ApplyPromotion(table_, *job_, 0, p.member, p.address, p.request, 5, p.rebuilt,
                 &writes);
  const ShardReplicas& r = job_->record.replicas(0);
  EXPECT_EQ(r.backup_members_size(), 1);
  EXPECT_EQ(r.building_members_size(), 1);
  EXPECT_NE(job_->events.back().message().find("rebuilt by a state transfer"),
            std::string::npos);
  // Factor 3 wants two backups: member 1 (the old primary's server) is
  // alive, so it is the place for the second.
  SetupJobRequest primary;
  EXPECT_EQ(PlanBackupAdd(*job_, 0, members_, &primary).members,
            (std::vector<int64_t>{1}));
}

TEST_F(ReplicasTest, ARestartedServerLosesItsReplicas) {
  absl::MutexLock l(&table_.mu());
  WriteBatch writes;
  job_->shards[1].needs_check = true;
  NoteServerRestarted(table_, 2, &writes);  // primary of 1, backup of 0
  EXPECT_EQ(job_->record.replicas(0).backup_members_size(), 0);
  EXPECT_TRUE(job_->shards[0].backups_changed);
  EXPECT_TRUE(job_->shards[1].primary_lost);
  EXPECT_FALSE(job_->shards[1].needs_check);  // a failover, not a rollback
  SetupJobRequest drop = PlanBackupDrop(*job_, 0, members_);
  EXPECT_EQ(drop.job_id(), "job-1");
  EXPECT_EQ(drop.backup_addresses_size(), 0);
  EXPECT_EQ(PlanPromotion(*job_, 1, members_).member, 3);
}

// A primary whose only backup is still building is not failed over: the
// shard is checked (and the job rolled back) as an unreplicated one is.
TEST_F(ReplicasTest, APrimaryWithOnlyABuildingBackupIsCheckedNotFailedOver) {
  absl::MutexLock l(&table_.mu());
  job_->record.mutable_replicas(1)->add_building_members(3);
  job_->shards[1].needs_check = true;
  WriteBatch writes;
  NoteServerRestarted(table_, 2, &writes);
  EXPECT_FALSE(job_->shards[1].primary_lost);
  EXPECT_TRUE(job_->shards[1].needs_check);
  EXPECT_EQ(PlanPromotion(*job_, 1, members_).backup, -1);
  const absl::Status refused = absl::UnavailableError("connection refused");
  NoteShardAnswer(*job_, 1, refused, 1000);
  NoteShardAnswer(*job_, 1, refused, 1000 + kUnreachableMs);
  EXPECT_FALSE(job_->shards[1].primary_lost);
}

}  // namespace
}  // namespace ps::coordinator
