#include "tools/worker_processes.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A child written in sh that speaks the protocol (or breaks it).
std::vector<std::string> Sh(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

TEST(WorkerProcesses, ReadyGoResultsInStartOrder) {
  auto p = WorkerProcesses::Start(
      {Sh("echo ready; read x; [ \"$x\" = go ] && echo \"first $BENCH_T\""),
       Sh("echo ready; read x; [ \"$x\" = go ] && echo \"second $BENCH_T\"")},
      {"BENCH_T=value"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->size(), 2);
  ASSERT_TRUE((*p)->WaitReady(Soon()).ok());
  ASSERT_TRUE((*p)->Go().ok());
  auto results = (*p)->Results(Soon());
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_THAT(*results, ElementsAre("first value", "second value"));
}

TEST(WorkerProcesses, LinesSplitOverWritesAndSeveralPerWrite) {
  auto p = WorkerProcesses::Start(
      {Sh("printf 'rea'; printf 'dy\\n'; read x; printf 'a b\\nextra\\n'")},
      {});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitReady(Soon()).ok());
  ASSERT_TRUE((*p)->Go().ok());
  auto results = (*p)->Results(Soon());
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_THAT(*results, ElementsAre("a b"));
}

TEST(WorkerProcesses, ChildErrorLineFailsReadyWithItsText) {
  auto p = WorkerProcesses::Start(
      {Sh("echo ready; read x"), Sh("echo 'error: SetupJob: refused'")}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status s = (*p)->WaitReady(Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("worker process 1"));
  EXPECT_THAT(s.message(), HasSubstr("SetupJob: refused"));
}

TEST(WorkerProcesses, ChildThatExitsSilentlyFails) {
  auto p = WorkerProcesses::Start({Sh("exit 3")}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status s = (*p)->WaitReady(Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("worker process 0"));
}

TEST(WorkerProcesses, UnexpectedLineIsNotReady) {
  auto p = WorkerProcesses::Start({Sh("echo hello")}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status s = (*p)->WaitReady(Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("said \"hello\""));
}

TEST(WorkerProcesses, NonZeroExitAfterResultFails) {
  auto p =
      WorkerProcesses::Start({Sh("echo ready; read x; echo r; exit 4")}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitReady(Soon()).ok());
  ASSERT_TRUE((*p)->Go().ok());
  const auto results = (*p)->Results(Soon());
  EXPECT_EQ(results.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(results.status().message(), HasSubstr("status 4"));
}

TEST(WorkerProcesses, DeadlinePassedIsDeadlineExceeded) {
  // The child waits for input that never comes; the destructor kills it.
  auto p = WorkerProcesses::Start({Sh("read x")}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status s = (*p)->WaitReady(absl::Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(WorkerProcesses, GoToAGoneChildFailsWithoutSigpipe) {
  auto p = WorkerProcesses::Start({Sh("echo ready; exec 0<&-")}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitReady(Soon()).ok());
  // The child's result never comes: its output ends first.
  (void)(*p)->Go();
  EXPECT_FALSE((*p)->Results(Soon()).ok());
}

TEST(WorkerProcesses, MissingProgramIsUnavailable) {
  auto p = WorkerProcesses::Start({{"/nonexistent/ps_bench_child"}}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(p.status().message(), HasSubstr("/nonexistent/ps_bench_child"));
}

// The child's side, over a pipe this test writes.
struct Pipe {
  Pipe() { EXPECT_EQ(pipe(fds), 0); }
  ~Pipe() {
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
  }
  void Write(const std::string& s) {
    ASSERT_EQ(write(fds[1], s.data(), s.size()),
              static_cast<ssize_t>(s.size()));
  }
  void CloseWriter() {
    close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST(AwaitGo, Cases) {
  struct Case {
    std::string input;
    bool close_after;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"go\n", false, absl::StatusCode::kOk},
      {"stop\n", false, absl::StatusCode::kFailedPrecondition},
      {"g", true, absl::StatusCode::kFailedPrecondition},
      {"", true, absl::StatusCode::kFailedPrecondition},
      {"g", false, absl::StatusCode::kDeadlineExceeded},
  };
  for (const Case& c : cases) {
    Pipe p;
    p.Write(c.input);
    if (c.close_after) p.CloseWriter();
    const absl::Time deadline =
        c.code == absl::StatusCode::kDeadlineExceeded ? absl::Now() : Soon();
    EXPECT_EQ(AwaitGo(p.fds[0], deadline).code(), c.code)
        << "input \"" << c.input << "\"";
  }
}

}  // namespace
}  // namespace ps::bench
