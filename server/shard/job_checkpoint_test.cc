// Checkpoints and restores through ShardStore: open BSP steps, other shard
// layouts, corrupt and foreign files, periodic and aligned checkpoints,
// rollbacks (SetupJob with replace), per-server data directories.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/platform/fake_clock.h"
#include "common/platform/rpc.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

// A checkpoint taken while some chunks are applied ahead of the open step
// holds every chunk at the step's version, optimizer state included.
TEST(ShardStore, CheckpointOfAnOpenStepHoldsItsVersionThroughout) {
  FakeClock clock;
  const std::string dir = TempDir("open_step");
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  spec.mutable_optimizer()->set_momentum(0.5f);
  auto store = NewStore(&clock, dir);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};
  ASSERT_TRUE(PushChunks(*store, 1, 1, 0, 1.0f, all, true, true).ok());
  const std::vector<float> at_one = Weights(*store);
  // Step 1: chunks 0 and 3 applied early (one worker), then a checkpoint.
  ASSERT_TRUE(PushChunks(*store, 1, 2, 1, 1.0f, {0, 3}, true).ok());
  ASSERT_TRUE(PullChunks(*store, {0, 3}, 2, absl::Now()).ok());
  auto ck = store->Checkpoint("job1");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->version(), 1);
  auto restored = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = restored->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->version(), 1);
  EXPECT_EQ(Weights(*restored), at_one);
  // Both finish step 1 the same way: the momentum restored is step 1's.
  ASSERT_TRUE(PushChunks(*store, 1, 3, 1, 1.0f, {1, 2, 4}, true, true).ok());
  ASSERT_TRUE(PushChunks(*restored, 1, 1, 1, 1.0f, all, true, true).ok());
  EXPECT_EQ(Weights(*restored), Weights(*store));
  EXPECT_EQ(Version(*restored), 2);
}

TEST(ShardStore, CheckpointOnTwoShardsRestoresOntoThree) {
  FakeClock clock;
  const std::string dir = TempDir("two_to_three");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  std::vector<std::unique_ptr<ShardStore>> two;
  for (int shard = 0; shard < 2; ++shard) {
    two.push_back(NewStore(&clock, dir));
    ASSERT_TRUE(two.back()->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
    // Different gradients per element so that a misplaced range shows.
    auto placement = *two.back()->GetPlacement("job1");
    std::vector<std::vector<float>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (int64_t id : placement->shard_chunks[shard]) {
      const Chunk& c = placement->chunks[id];
      buffers.emplace_back(c.num_elements);
      for (int64_t i = 0; i < c.num_elements; ++i) {
        buffers.back()[i] = 0.01f * (c.offset + i) + c.tensor_index;
      }
      args.chunks.push_back(
          Contiguous(id, FLOAT32, c.num_elements,
                     absl::string_view(
                         reinterpret_cast<const char*>(buffers.back().data()),
                         c.num_elements * 4)));
    }
    ASSERT_TRUE(two.back()->Push(args, Far()).ok());
    auto ck = two.back()->Checkpoint("job1");
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ(ck->version(), 1);
  }
  const std::vector<float> want = GatherWeights(two);
  std::vector<std::unique_ptr<ShardStore>> three;
  for (int shard = 0; shard < 3; ++shard) {
    three.push_back(NewStore(&clock, dir));
    SetupJobRequest r = JobSetup(spec, {1}, shard, 3);
    r.set_restore(true);
    auto resp = three.back()->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored());
    EXPECT_EQ(resp->version(), 1);
  }
  EXPECT_EQ(GatherWeights(three), want);
}

// ASP shards count their own versions, so their checkpoints differ in
// version; they still restore (onto another layout too).
TEST(ShardStore, AspShardsAtDifferentVersionsRestore) {
  FakeClock clock;
  const std::string dir = TempDir("asp_mixed");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  std::vector<std::unique_ptr<ShardStore>> two;
  for (int shard = 0; shard < 2; ++shard) {
    two.push_back(NewStore(&clock, dir));
    ASSERT_TRUE(two.back()->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
    auto placement = *two.back()->GetPlacement("job1");
    std::vector<float> g(64, 0.125f);
    for (int step = 0; step <= shard; ++step) {  // shard 1 one step ahead
      PushArgs args;
      args.job_id = "job1";
      args.worker_id = 1;
      args.seq = step + 1;
      args.end_of_step = true;
      for (int64_t id : placement->shard_chunks[shard]) {
        const Chunk& c = placement->chunks[id];
        args.chunks.push_back(Contiguous(
            id, FLOAT32, c.num_elements,
            absl::string_view(reinterpret_cast<const char*>(g.data()),
                              c.num_elements * 4)));
      }
      ASSERT_TRUE(two.back()->Push(args, Far()).ok());
    }
    ASSERT_TRUE(two.back()->Checkpoint("job1").ok());
  }
  const std::vector<float> want = GatherWeights(two);
  std::vector<std::unique_ptr<ShardStore>> three;
  for (int shard = 0; shard < 3; ++shard) {
    three.push_back(NewStore(&clock, dir));
    SetupJobRequest r = JobSetup(spec, {1}, shard, 3);
    r.set_restore(true);
    auto resp = three.back()->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored());
    EXPECT_EQ(resp->version(), 1);  // the lower of the two
  }
  EXPECT_EQ(GatherWeights(three), want);
}

TEST(ShardStore, CorruptCheckpointFallsBackToThePreviousOne) {
  FakeClock clock;
  const std::string dir = TempDir("fallback");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_checkpoint()->set_every_versions(1);
  auto store = NewStore(&clock, dir);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.5f, true).ok());
  ASSERT_TRUE(store->CheckpointDue().ok());
  ASSERT_TRUE(PushValue(*store, 1, 2, 1, 0.5f, true).ok());
  auto ck = store->Checkpoint("job1");
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(ck->version(), 2);
  {
    std::fstream f(ck->path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c;
    f.read(&c, 1);
    c ^= 0x20;
    f.seekp(200);
    f.write(&c, 1);
  }
  auto restored = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = restored->SetupJob(r);
  ASSERT_TRUE(resp.ok());
  EXPECT_TRUE(resp->restored());
  EXPECT_EQ(resp->version(), 1);
  ExpectAll(Weights(*restored), 0.5f);
}

TEST(ShardStore, CheckpointOfAnotherModelIsNotRestored) {
  FakeClock clock;
  const std::string dir = TempDir("other_model");
  auto store = NewStore(&clock, dir);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.5f, true).ok());
  ASSERT_TRUE(store->Checkpoint("job1").ok());
  spec.mutable_model()->mutable_tensors(1)->set_shape(0, 25);
  auto other = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = other->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->restored());
  EXPECT_EQ(resp->version(), 0);
}

TEST(ShardStore, PeriodicCheckpointsByTime) {
  FakeClock clock;
  const std::string dir = TempDir("by_time");
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_checkpoint()->set_every_seconds(60);
  auto store = NewStore(&clock, dir);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.5f, true).ok());
  ASSERT_TRUE(store->CheckpointDue().ok());
  EXPECT_EQ(store->GetShardStatus("job1")->last_checkpoint_version(), 0);
  clock.Advance(absl::Seconds(61));
  ASSERT_TRUE(store->CheckpointDue().ok());
  EXPECT_EQ(store->GetShardStatus("job1")->last_checkpoint_version(), 1);
}

// Job-wide rollback: SetupJob with replace drops the running state (waiting
// pulls get UNAVAILABLE) and restores the newest checkpoint at or below
// restore_max_version; the new incarnation refuses pushes of the old one.
TEST(ShardStore, ReplaceRollsBackToACheckpointAndRefusesOldIncarnations) {
  FakeClock clock;
  const std::string dir = TempDir("rollback");
  auto store = NewStore(&clock, dir);
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  // Steps 0..5 with gradient 0.1 each: w = 1 - 0.1 * steps. Checkpoints at
  // versions 2 and 4.
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.1f, true, step).ok());
    if (step == 1 || step == 3) {
      ASSERT_TRUE(store->Checkpoint("job1").ok());
    }
  }
  EXPECT_EQ(Version(*store), 6);
  // A pull waiting for step 7 while the rollback happens.
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.min_version = 7;
  absl::StatusOr<PullResult> pulled;
  std::thread t([&] {
    pulled = store->Pull(
        args, Far(),
        [](const Chunk&, absl::Span<const float>, const WeightsRef&) {});
  });
  for (int i = 0; i < 3000; ++i) {
    auto st = store->GetShardStatus("job1");
    if (st.ok() && st->blocked_pulls() == 1) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_replace(true);
  r.set_restore(true);
  r.set_restore_max_version(3);  // the newest at or below 3: version 2
  r.set_incarnation(1);
  auto resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  t.join();
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kUnavailable)
      << pulled.status();
  EXPECT_TRUE(resp->restored());
  EXPECT_EQ(resp->version(), 2);
  int64_t version = 0;
  std::vector<float> w = Weights(*store, 1, &version);
  EXPECT_EQ(version, 2);
  ExpectAll(w, 0.8f);
  // A push of incarnation 0 (a worker that has not restarted yet) is not
  // applied and says why; incarnation 1 numbers start at SeqBase(1) + 1.
  auto old = PushValue(*store, 1, 7, 2, 0.1f, true, 2);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(old.status().message().find("rolled back"), std::string::npos)
      << old.status();
  EXPECT_EQ(PushValue(*store, 1, SeqBase(1), 2, 0.1f, true, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto fresh = PushValue(*store, 1, SeqBase(1) + 1, 2, 0.1f, true, 2);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->version, 3);
  ExpectAll(Weights(*store), 0.7f);
  // A retried push of the new incarnation still applies once.
  auto again = PushValue(*store, 1, SeqBase(1) + 1, 2, 0.1f, true, 2);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  ExpectAll(Weights(*store), 0.7f);
  // start_version: the restored weights continue under another step number
  // (a rollback that found no version on every shard).
  r.set_restore_max_version(5);
  r.set_start_version(5);
  r.set_incarnation(2);
  resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->version(), 5);
  ExpectAll(Weights(*store), 0.6f);  // the checkpoint of version 4
  r.set_start_version(0);
  // Without a checkpoint at or below the bound, replace starts from the
  // initial weights.
  r.set_restore_max_version(1);
  r.set_incarnation(3);
  resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->restored());
  EXPECT_EQ(resp->version(), 0);
  ExpectAll(Weights(*store), 1.0f);
}

// Servers with a data directory each: a restarted shard of a 2-shard job
// restores from its own files alone.
TEST(ShardStore, ShardRestoresFromItsOwnDataDirectory) {
  FakeClock clock;
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  std::vector<std::vector<float>> want;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string dir = TempDir(absl::StrCat("own_", shard));
    auto store = NewStore(&clock, dir);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
    auto placement = *store->GetPlacement("job1");
    std::vector<std::vector<float>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (int64_t id : placement->shard_chunks[shard]) {
      const Chunk& c = placement->chunks[id];
      buffers.emplace_back(c.num_elements, 0.25f * (shard + 1));
      args.chunks.push_back(
          Contiguous(id, FLOAT32, c.num_elements,
                     absl::string_view(
                         reinterpret_cast<const char*>(buffers.back().data()),
                         c.num_elements * 4)));
    }
    ASSERT_TRUE(store->Push(args, Far()).ok());
    ASSERT_TRUE(store->Checkpoint("job1").ok());
    want.push_back(Weights(*store));
    // The server restarts on the same directory: the job's pushes get
    // UNAVAILABLE (retry: the coordinator restores it) until it is set up.
    auto restarted = NewStore(&clock, dir);
    PushArgs bare;
    bare.job_id = "job1";
    bare.worker_id = 1;
    bare.seq = 2;
    auto early = restarted->Push(bare, Far());
    EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable)
        << early.status();
    SetupJobRequest r = JobSetup(spec, {1}, shard, 2);
    r.set_restore(true);
    auto resp = restarted->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored()) << "shard " << shard;
    EXPECT_EQ(resp->version(), 1);
    EXPECT_EQ(Weights(*restarted), want.back());
  }
  // A store without the job's directory still says NOT_FOUND.
  auto other = NewStore(&clock, TempDir("own_none"));
  PushArgs bare;
  bare.job_id = "job1";
  bare.worker_id = 1;
  bare.seq = 1;
  EXPECT_EQ(other->Push(bare, Far()).status().code(),
            absl::StatusCode::kNotFound);
}

// ASP/SSP: workers restart at version / workers, and the restored clocks
// say so (an SSP pull at that clock does not wait).
TEST(ShardStore, RestoredSspJobStartsTheClocksAtVersionPerWorker) {
  FakeClock clock;
  const std::string dir = TempDir("ssp_restore");
  JobSpec spec = MakeSpec(ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(1);
  {
    auto store = NewStore(&clock, dir);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
    uint64_t seq[3] = {0, 0, 0};
    for (int step = 0; step < 3; ++step) {
      for (int w = 1; w <= 2; ++w) {
        ASSERT_TRUE(
            PushValue(*store, w, ++seq[w], step, 0.01f, true, 2 * step).ok());
      }
    }
    ASSERT_TRUE(store->Checkpoint("job1").ok());
  }
  auto store = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1, 2});
  r.set_restore(true);
  auto resp = store->SetupJob(r);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->version(), 6);
  auto status = store->GetShardStatus("job1");
  ASSERT_TRUE(status.ok());
  for (const WorkerClock& c : status->clocks()) EXPECT_EQ(c.clock(), 3);
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.clock = 4;  // within the bound of clock 3
  auto pulled = store->Pull(
      args, Past(),
      [](const Chunk&, absl::Span<const float>, const WeightsRef&) {});
  EXPECT_TRUE(pulled.ok()) << pulled.status();
}

// BSP shards checkpoint at the multiples of every_versions exactly (the
// state is taken when that step is applied), whenever the writer runs, so
// that every shard of a job holds the same versions.
TEST(ShardStore, BspCheckpointsAtMultiplesOfEveryVersions) {
  FakeClock clock;
  const std::string dir = TempDir("aligned");
  auto store = NewStore(&clock, dir);
  JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  spec.mutable_checkpoint()->set_every_versions(4);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  auto versions = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/job1")) {
      names.push_back(e.path().filename().string().substr(0, 26));
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.1f, true, step).ok());
  }
  ASSERT_TRUE(store->CheckpointDue().ok());
  EXPECT_EQ(versions(),
            (std::vector<std::string>{"ckpt-v00000000000000000004"}));
  for (int step = 6; step < 9; ++step) {
    ASSERT_TRUE(PushValue(*store, 1, step + 1, step, 0.1f, true, step).ok());
  }
  ASSERT_TRUE(store->CheckpointDue().ok());
  ASSERT_TRUE(store->CheckpointDue().ok());  // nothing new: no file
  EXPECT_EQ(versions(),
            (std::vector<std::string>{"ckpt-v00000000000000000004",
                                      "ckpt-v00000000000000000008"}));
  // The file at 8 holds the weights of version 8, not 9.
  auto restored = NewStore(&clock, dir);
  SetupJobRequest r = JobSetup(spec, {1});
  r.set_restore(true);
  auto resp = restored->SetupJob(r);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->version(), 8);
  ExpectAll(Weights(*restored), 1.0f - 0.8f);
}

}  // namespace
}  // namespace ps::server
