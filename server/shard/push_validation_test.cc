// Push validation through ShardStore: precise statuses for bad pushes
// (which change nothing), exactly-once retries, ASP staleness bounds and
// the staleness-aware rate; and AdmitPush on a job's state.
#include "server/shard/push_validation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "common/platform/fake_clock.h"
#include "common/wire/placement.h"
#include "server/shard/job.h"
#include "server/shard/job_setup.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

TEST(ShardStore, AspAppliesAtOnceAndBoundsStaleness) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_consistency()->set_max_staleness(2);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
  for (int i = 0; i < 3; ++i) {
    auto r = PushValue(*store, 1, i + 1, i, 0.5f, true, i);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->version, i + 1);
  }
  ExpectAll(Weights(*store), 1.0f - 1.5f);
  auto stale = PushValue(*store, 2, 1, 0, 0.5f, true, 0);  // staleness 3
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Version(*store), 3);
  ExpectAll(Weights(*store), -0.5f);
  ASSERT_TRUE(PushValue(*store, 2, 2, 0, 0.5f, true, 1).ok());  // staleness 2
  ExpectAll(Weights(*store), -1.0f);
  EXPECT_EQ(store->GetShardStatus("job1")->rejected_pushes(), 1);
}

TEST(ShardStore, AspStalenessAwareLearningRate) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = MakeSpec(ConsistencySpec::ASP);
  spec.mutable_consistency()->set_staleness_aware_lr(true);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2})).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(PushValue(*store, 1, i + 1, i, 0.25f, true, i).ok());
  }
  ExpectAll(Weights(*store), 0.0f);
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true, 0).ok());  // staleness 4
  ExpectAll(Weights(*store), -0.25f);
}

TEST(ShardStore, RetriedPushAppliesOnce) {
  for (auto model : {ConsistencySpec::BSP, ConsistencySpec::ASP}) {
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(store->SetupJob(JobSetup(MakeSpec(model), {1})).ok());
    ASSERT_TRUE(PushValue(*store, 1, 1, 0, 1.0f, false).ok());
    auto again = PushValue(*store, 1, 1, 0, 1.0f, false);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->duplicate);
    ASSERT_TRUE(PushValue(*store, 1, 2, 0, 0.0f, true).ok());
    ExpectAll(Weights(*store), 0.0f);
    EXPECT_EQ(store->GetShardStatus("job1")->duplicate_pushes(), 1);
  }
}

struct BadPushCase {
  const char* name;
  absl::StatusCode code;
  std::function<void(PushArgs*, std::vector<char>* storage)> mutate;
};

TEST(ShardStore, BadPushesGetPreciseStatusesAndChangeNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadPushCase> cases = {
      {"unknown_job", absl::StatusCode::kNotFound,
       [](PushArgs* a, std::vector<char>*) { a->job_id = "nope"; }},
      {"unknown_chunk", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].chunk_id = 999; }},
      {"negative_chunk", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].chunk_id = -1; }},
      {"duplicate_chunk", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[1] = a->chunks[0]; }},
      {"short_payload", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) {
         a->chunks[0].data.remove_suffix(4);
       }},
      {"wrong_num_elements", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].num_elements += 1; }},
      {"unknown_dtype", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) {
         a->chunks[0].dtype = static_cast<DType>(9);
       }},
      {"fp16_length_mismatch", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->chunks[0].dtype = FLOAT16; }},
      {"nan", absl::StatusCode::kInvalidArgument,
       [nan](PushArgs* a, std::vector<char>* s) {
         s->assign(a->chunks.back().data.begin(), a->chunks.back().data.end());
         std::memcpy(s->data() + 4, &nan, 4);
         a->chunks.back().data = absl::string_view(s->data(), s->size());
       }},
      {"inf", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>* s) {
         const float inf = std::numeric_limits<float>::infinity();
         s->assign(a->chunks[0].data.begin(), a->chunks[0].data.end());
         std::memcpy(s->data(), &inf, 4);
         a->chunks[0].data = absl::string_view(s->data(), s->size());
       }},
      {"clock_from_the_future", absl::StatusCode::kOutOfRange,
       [](PushArgs* a, std::vector<char>*) { a->clock = 5; }},
      {"base_version_from_the_future", absl::StatusCode::kOutOfRange,
       [](PushArgs* a, std::vector<char>*) { a->base_version = 5; }},
      {"worker_not_in_job", absl::StatusCode::kFailedPrecondition,
       [](PushArgs* a, std::vector<char>*) { a->worker_id = 42; }},
      {"seq_zero", absl::StatusCode::kInvalidArgument,
       [](PushArgs* a, std::vector<char>*) { a->seq = 0; }},
  };
  for (const BadPushCase& c : cases) {
    SCOPED_TRACE(c.name);
    FakeClock clock;
    auto store = NewStore(&clock);
    ASSERT_TRUE(
        store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1})).ok());
    const std::vector<float> before = Weights(*store);
    auto placement = *store->GetPlacement("job1");
    std::vector<std::vector<float>> buffers;
    PushArgs args;
    args.job_id = "job1";
    args.worker_id = 1;
    args.seq = 1;
    args.end_of_step = true;
    for (const Chunk& chunk : placement->chunks) {
      buffers.emplace_back(chunk.num_elements, 1.0f);
    }
    for (const Chunk& chunk : placement->chunks) {
      args.chunks.push_back(Contiguous(
          chunk.chunk_id, FLOAT32, chunk.num_elements,
          absl::string_view(
              reinterpret_cast<const char*>(buffers[chunk.chunk_id].data()),
              chunk.num_elements * 4)));
    }
    std::vector<char> storage;
    c.mutate(&args, &storage);
    auto r = store->Push(args, Far());
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_FALSE(r.status().message().empty());
    EXPECT_EQ(Weights(*store), before);
    EXPECT_EQ(Version(*store), 0);
    // The shard still works and a fresh push applies. (Whether the bad push
    // used up seq 1 depends on how early it was refused.)
    ASSERT_TRUE(PushValue(*store, 1, 1, 0, 0.0f, false).ok());
    ASSERT_TRUE(PushValue(*store, 1, 2, 0, 1.0f, true).ok());
    ExpectAll(Weights(*store), 0.0f);
  }
}

// AdmitPush: an admitted push's number is in flight, so that its retry is
// a duplicate at once; the retry of a BSP end of step whose first attempt
// is no longer in flight may count its end of step.
TEST(PushValidation, AdmittedNumbersAreInFlightAndRetriesAreDuplicates) {
  const JobSpec spec = MakeSpec(ConsistencySpec::BSP);
  auto job = NewJob(JobSetup(spec, {1}), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  Job& j = **job;
  FakeClock clock;
  absl::MutexLock l(&j.mu);
  SetMembers(j, {1});
  const PushArgs push = PushHeader(1, 1, 0, 0, /*end_of_step=*/true);
  PushResult result;
  auto first = AdmitPush(j, push, clock, &result);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, Admission::Outcome::kApply);
  EXPECT_TRUE(j.workers[1].seq.InFlight(1));
  EXPECT_EQ(j.workers[1].last_push_ms, clock.NowMs());
  PushResult again;
  auto retry = AdmitPush(j, push, clock, &again);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->outcome, Admission::Outcome::kDuplicate);
  EXPECT_TRUE(again.duplicate);
  EXPECT_FALSE(retry->retry_end_of_step) << "the first attempt counts it";
  j.workers[1].seq.Finish(1);
  auto late = AdmitPush(j, push, clock, &again);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->retry_end_of_step);
  EXPECT_EQ(j.duplicate.load(), 2);
}

// ASP: the rate is the schedule's at the job's version, divided by the
// staleness with staleness_aware_lr; BSP: only a final push of the open
// step with no backup workers may complete chunks early.
TEST(PushValidation, AdmissionSetsTheRateAndTheEarlyWorkers) {
  FakeClock clock;
  JobSpec asp = MakeSpec(ConsistencySpec::ASP);
  asp.mutable_consistency()->set_staleness_aware_lr(true);
  auto a = NewJob(JobSetup(asp, {1}), asp);
  ASSERT_TRUE(a.ok());
  {
    absl::MutexLock l(&(*a)->mu);
    SetMembers(**a, {1});
    (*a)->version = 5;
    PushResult result;
    auto admitted =
        AdmitPush(**a, PushHeader(1, 1, 0, 1, false), clock, &result);
    ASSERT_TRUE(admitted.ok()) << admitted.status();
    EXPECT_EQ(admitted->rate.step, 5);
    EXPECT_EQ(admitted->rate.divisor, 4.0f);
    EXPECT_EQ(admitted->staleness, 4);
    EXPECT_TRUE(admitted->early_workers.empty());
  }
  const JobSpec bsp = MakeSpec(ConsistencySpec::BSP);
  auto b = NewJob(JobSetup(bsp, {1, 2}), bsp);
  ASSERT_TRUE(b.ok());
  absl::MutexLock l(&(*b)->mu);
  SetMembers(**b, {1, 2});
  PushArgs push = PushHeader(1, 1, 0, 0, false);
  PushResult result;
  auto plain = AdmitPush(**b, push, clock, &result);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->early_workers.empty());
  push.seq = 2;
  push.chunks_final = true;
  auto final = AdmitPush(**b, push, clock, &result);
  ASSERT_TRUE(final.ok());
  std::vector<int64_t> early = final->early_workers;
  std::sort(early.begin(), early.end());
  EXPECT_EQ(early, (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace ps::server
