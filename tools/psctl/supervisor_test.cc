#include "tools/psctl/supervisor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/platform/fault_injecting_file_system.h"
#include "common/platform/file_system.h"

namespace ps::psctl {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/supervisor_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(RestartBackoff, DoublesUpToTheMaximumAndResetsWhenHealthy) {
  SupervisorOptions o;
  o.first_backoff = absl::Seconds(1);
  o.max_backoff = absl::Seconds(5);
  o.healthy_after = absl::Seconds(60);
  RestartBackoff b(o);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // A daemon that keeps dying at once: 1, 2, 4, 5, 5 s.
  absl::Time started = t0;
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 5; ++i) {
    const absl::Time now = started + absl::Seconds(1);
    const absl::Time at = b.OnExit(started, now);
    waits.push_back(at - now);
    started = at;
  }
  EXPECT_EQ(waits, (std::vector<absl::Duration>{
                       absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                       absl::Seconds(5), absl::Seconds(5)}));
  // One that stayed up past healthy_after starts again after 1 s.
  const absl::Time now = started + absl::Seconds(61);
  EXPECT_EQ(b.OnExit(started, now) - now, absl::Seconds(1));
}

TEST(Supervisor, CommandLinesRoundTrip) {
  const std::string dir = FreshDir("cmd");
  const std::vector<std::string> argv = {"/bin/ps_server", "--port=0",
                                         "--data_dir=/tmp/a b"};
  ASSERT_TRUE(SaveCommand(FileSystem::Posix(), dir, "server-0", argv).ok());
  absl::StatusOr<std::vector<std::string>> back = LoadCommand(dir, "server-0");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, argv);
  absl::StatusOr<std::vector<std::string>> none = LoadCommand(dir, "worker-9");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

// A failed write leaves the command line recorded before, whole, and no
// temporary file: the supervisor never starts a daemon from half a line.
TEST(Supervisor, AFailedSaveKeepsTheOldCommandLine) {
  const std::string dir = FreshDir("cmd_atomic");
  const std::vector<std::string> old_argv = {"/bin/ps_worker", "--port=0"};
  ASSERT_TRUE(SaveCommand(FileSystem::Posix(), dir, "worker-0", old_argv).ok());
  const std::vector<std::string> new_argv = {"/bin/ps_worker", "--port=0",
                                             "--device=cpu"};
  for (const FaultInjectingFileSystem::Op op :
       {FaultInjectingFileSystem::Op::kWrite,
        FaultInjectingFileSystem::Op::kSync,
        FaultInjectingFileSystem::Op::kRename}) {
    FaultInjectingFileSystem faulty;
    faulty.FailNth(op, 1);
    const absl::Status s = SaveCommand(&faulty, dir, "worker-0", new_argv);
    EXPECT_FALSE(s.ok()) << static_cast<int>(op);
    EXPECT_NE(s.message().find(dir + "/cmd/worker-0"), absl::string_view::npos)
        << s;
    absl::StatusOr<std::vector<std::string>> back =
        LoadCommand(dir, "worker-0");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, old_argv);
    EXPECT_FALSE(std::filesystem::exists(dir + "/cmd/worker-0.tmp"));
  }
  ASSERT_TRUE(SaveCommand(FileSystem::Posix(), dir, "worker-0", new_argv).ok());
  absl::StatusOr<std::vector<std::string>> back = LoadCommand(dir, "worker-0");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, new_argv);
}

TEST(Supervisor, RestartsAreCountedPerDaemon) {
  const std::string dir = FreshDir("events");
  EXPECT_TRUE(RestartCounts(dir).empty());
  AppendClusterEvent(dir, "exited", "server-1", "pid 10 is gone");
  AppendClusterEvent(dir, "restart", "server-1", "started again as pid 11");
  AppendClusterEvent(dir, "restart", "coordinator", "started again as pid 12");
  AppendClusterEvent(dir, "restart", "server-1", "started again as pid 13");
  const std::map<std::string, int> counts = RestartCounts(dir);
  EXPECT_EQ(counts,
            (std::map<std::string, int>{{"coordinator", 1}, {"server-1", 2}}));
}

}  // namespace
}  // namespace ps::psctl
