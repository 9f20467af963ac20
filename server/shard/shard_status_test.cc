// A job's status on the shard, through ShardStore.
#include <gtest/gtest.h>

#include <vector>

#include "absl/status/status.h"
#include "common/platform/fake_clock.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

TEST(ShardStore, StatusReportsWaitingWorkers) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(MakeSpec(ConsistencySpec::BSP), {1, 2, 3}))
          .ok());
  ASSERT_TRUE(PushValue(*store, 2, 1, 0, 1.0f, true).ok());
  auto s = store->GetShardStatus("job1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(
      std::vector<int64_t>(s->waiting_for().begin(), s->waiting_for().end()),
      (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s->pushes(), 1);
  EXPECT_EQ(s->bytes_in(), 64 * 4);
  EXPECT_EQ(store->GetShardStatus("nope").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps::server
