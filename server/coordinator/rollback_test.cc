#include "server/coordinator/rollback.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
namespace {

// Shards with checkpoints at the given versions: a setup restores the
// newest within its bound and records (shard, max_version, start_version).
struct Shards {
  std::map<int, std::vector<int64_t>> checkpoints;
  std::vector<std::tuple<int, int64_t, int64_t>> calls;
  std::map<int, absl::Status> errors;

  SetUpShard Fn() {
    return [this](int shard, int64_t max_version,
                  int64_t start_version) -> absl::StatusOr<int64_t> {
      calls.emplace_back(shard, max_version, start_version);
      auto err = errors.find(shard);
      if (err != errors.end()) return err->second;
      if (start_version > 0) return start_version;
      int64_t v = 0;
      if (max_version == 0) return v;  // the initial weights
      for (int64_t c : checkpoints[shard]) {
        if ((max_version < 0 || c <= max_version) && c > v) v = c;
      }
      return v;
    };
  }
};

using Calls = std::vector<std::tuple<int, int64_t, int64_t>>;

// The shards all go back to the newest version they all hold.
TEST(Rollback, BspBringsEveryShardToOneVersion) {
  Shards s;
  s.checkpoints = {{0, {20, 60}}, {1, {20, 40}}};
  const RollbackResult r = ChooseRollback(2, /*bsp=*/true, 2, 1, {1}, s.Fn());
  ASSERT_TRUE(r.status.ok()) << r.status;
  // 1 restores its newest (40); 0 has nothing at 40 and restores 20; 1
  // goes back to 20 as well.
  EXPECT_EQ(s.calls, (Calls{{1, -1, 0}, {0, 40, 0}, {1, 20, 0}}));
  EXPECT_EQ(r.version, 20);
  EXPECT_EQ(r.start_step, 20);
  EXPECT_EQ(r.note,
            "shard(s) 1 restarted; every shard restored its checkpoint at "
            "version 20; the workers restart at step 20 (incarnation 1)");
}

TEST(Rollback, BspWithoutACommonVersionRelabels) {
  Shards s;
  s.checkpoints = {{0, {60}}, {1, {40}}};
  const RollbackResult r = ChooseRollback(2, true, 1, 3, {1}, s.Fn());
  ASSERT_TRUE(r.status.ok()) << r.status;
  // Lowering finds no common version (0: the initial weights); rather than
  // that, each takes its newest at or below 40 and continues as 40.
  ASSERT_GE(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[s.calls.size() - 2], std::make_tuple(0, 40, 40));
  EXPECT_EQ(s.calls.back(), std::make_tuple(1, 40, 40));
  EXPECT_EQ(r.version, 40);
  EXPECT_EQ(r.start_step, 40);
  EXPECT_NE(r.note.find("no version was on every shard"), std::string::npos)
      << r.note;
}

TEST(Rollback, AsynchronousShardsEachRestoreTheirNewest) {
  Shards s;
  s.checkpoints = {{0, {20, 60}}, {1, {20, 40}}};
  const RollbackResult r = ChooseRollback(2, /*bsp=*/false, 2, 1, {1}, s.Fn());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(s.calls, (Calls{{1, -1, 0}, {0, -1, 0}}));
  EXPECT_EQ(r.version, 40);
  EXPECT_EQ(r.start_step, 20) << "the lowest version / 2 workers";
  EXPECT_NE(r.note.find("at version 40-60"), std::string::npos) << r.note;
}

TEST(Rollback, NoCheckpointMeansTheInitialWeights) {
  Shards s;
  const RollbackResult r = ChooseRollback(2, true, 2, 1, {0}, s.Fn());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.version, 0);
  EXPECT_EQ(r.start_step, 0);
  EXPECT_NE(r.note.find("restarted from the initial weights (no checkpoint)"),
            std::string::npos)
      << r.note;
}

TEST(Rollback, ARetryStartsFromEveryShard) {
  Shards s;
  s.checkpoints = {{0, {30}}, {1, {30}}, {2, {30, 50}}};
  const RollbackResult r = ChooseRollback(3, true, 1, 2, {}, s.Fn());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(s.calls, (Calls{{0, -1, 0}, {1, -1, 0}, {2, -1, 0}, {2, 30, 0}}));
  EXPECT_EQ(r.version, 30);
  EXPECT_EQ(r.note.rfind("shard(s) 0, 1, 2 restarted", 0), 0u) << r.note;
}

TEST(Rollback, TheFirstFailedSetupStopsIt) {
  Shards s;
  s.checkpoints = {{0, {20}}, {1, {20}}};
  s.errors[0] = absl::UnavailableError("shard 0: connection refused");
  const RollbackResult r = ChooseRollback(2, true, 1, 1, {1}, s.Fn());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.calls, (Calls{{1, -1, 0}, {0, 20, 0}}));
  EXPECT_TRUE(r.note.empty());
}

// Workers `ids`, each joined `joins` times.
UpdateMembershipRequest Workers(const std::vector<int64_t>& ids,
                                const std::vector<int64_t>& joins) {
  UpdateMembershipRequest m;
  m.mutable_worker_ids()->Add(ids.begin(), ids.end());
  m.mutable_worker_joins()->Add(joins.begin(), joins.end());
  return m;
}

TEST(Rollback, SetupsReplaceTheJobAtTheNextIncarnation) {
  FakeShardClient shards;
  shards.checkpoints["127.0.0.1:7001"] = {20};
  shards.checkpoints["127.0.0.1:7002"] = {20, 40};
  JobSpec spec;
  spec.mutable_consistency()->set_model(ConsistencySpec::BSP);
  const RollbackResult r =
      RollBack(&shards, "job-1", spec, {"127.0.0.1:7001", "127.0.0.1:7002"},
               Workers({4, 5}, {1, 2}), /*incarnation=*/2, {1});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.version, 20);
  ASSERT_EQ(shards.setups.size(), 3u);
  for (const auto& [address, req] : shards.setups) {
    EXPECT_EQ(req.job_id(), "job-1");
    EXPECT_TRUE(req.replace());
    EXPECT_TRUE(req.restore());
    EXPECT_EQ(req.incarnation(), 2);
    EXPECT_EQ(req.num_shards(), 2);
    EXPECT_EQ(
        std::vector<int64_t>(req.worker_ids().begin(), req.worker_ids().end()),
        (std::vector<int64_t>{4, 5}));
    EXPECT_EQ(std::vector<int64_t>(req.worker_joins().begin(),
                                   req.worker_joins().end()),
              (std::vector<int64_t>{1, 2}));
  }
  EXPECT_EQ(shards.setups[0].first, "127.0.0.1:7002");
  EXPECT_EQ(shards.setups[0].second.restore_max_version(), 0) << "newest";
  EXPECT_EQ(shards.setups[1].second.restore_max_version(), 40);
  EXPECT_EQ(shards.setups[2].second.restore_max_version(), 20);
  // A shard's error names it.
  shards.setup_errors["127.0.0.1:7001"] = absl::UnavailableError("refused");
  const RollbackResult failed = RollBack(
      &shards, "job-1", spec, {"127.0.0.1:7001"}, Workers({4}, {1}), 3, {0});
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.status.message().find("shard 0 (127.0.0.1:7001)"),
            std::string::npos)
      << failed.status;
}

}  // namespace
}  // namespace ps::coordinator
