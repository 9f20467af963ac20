#include "tools/psctl/local_cluster.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ps::psctl {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") +
                          "/local_cluster_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// An executable `name` in `dir` that exits at once, as a daemon that fails
// its start-up would.
void FakeDaemon(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\nexit 3\n";
  chmod(path.c_str(), 0755);
}

// Which binaries ClusterUp looks up: ps_worker only for a cluster with
// ps_worker daemons. With the binaries it needs present, the (fake)
// coordinator's failed start-up is the error.
TEST(ClusterUp, LooksUpPsWorkerOnlyWhenItStartsWorkers) {
  struct Case {
    const char* name;
    int workers;
    bool with_server;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"no_workers", 0, true, absl::StatusCode::kInternal,
       "coordinator: daemon exited during start-up"},
      {"workers", 2, true, absl::StatusCode::kNotFound,
       "cannot find the 'ps_worker' binary"},
      {"no_server", 0, false, absl::StatusCode::kNotFound,
       "cannot find the 'ps_server' binary"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = FreshDir(c.name);
    const std::string bin_dir = dir + "/bin";
    std::filesystem::create_directories(bin_dir);
    FakeDaemon(bin_dir, "coordinator");
    if (c.with_server) FakeDaemon(bin_dir, "ps_server");
    LocalClusterOptions o;
    o.run_dir = dir + "/run";
    o.servers = 1;
    o.workers = c.workers;
    o.bin_dir = bin_dir;
    o.supervise = false;
    absl::StatusOr<std::string> up = ClusterUp(o);
    ASSERT_FALSE(up.ok());
    EXPECT_EQ(up.status().code(), c.code) << up.status();
    EXPECT_NE(up.status().message().find(c.message), std::string::npos)
        << up.status();
    (void)ClusterDown(o.run_dir, absl::Seconds(1));
  }
}

}  // namespace
}  // namespace ps::psctl
