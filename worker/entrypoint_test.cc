#include "worker/entrypoint.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

TEST(Entrypoint, ExitStatusEnvironmentAndStderrTail) {
  absl::StatusOr<EntrypointResult> r =
      RunEntrypoint({"/bin/sh", "-c", "echo \"job $PS_JOB_ID\" >&2; exit 3"},
                    {"PS_JOB_ID=job-7"}, nullptr, absl::Seconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->Describe(), "exited with status 3");
  EXPECT_EQ(r->stderr_tail, "job job-7\n");
}

TEST(Entrypoint, KeepsOnlyTheTail) {
  absl::StatusOr<EntrypointResult> r =
      RunEntrypoint({"/bin/sh", "-c",
                     "i=0; while [ $i -lt 500 ]; do echo line$i >&2; "
                     "i=$((i+1)); done"},
                    {}, nullptr, absl::Seconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  EXPECT_LE(r->stderr_tail.size(), 2048u);
  EXPECT_NE(r->stderr_tail.find("line499\n"), std::string::npos);
  EXPECT_EQ(r->stderr_tail.find("line0\n"), std::string::npos);
}

TEST(Entrypoint, StopSendsSigtermThenSigkill) {
  std::atomic<bool> stop{false};
  std::thread stopper([&stop] {
    absl::SleepFor(absl::Milliseconds(200));
    stop = true;
  });
  // Ignores SIGTERM: only SIGKILL after the grace ends it.
  const absl::Time start = absl::Now();
  absl::StatusOr<EntrypointResult> r =
      RunEntrypoint({"/bin/sh", "-c", "trap '' TERM; sleep 30"}, {}, &stop,
                    absl::Milliseconds(300));
  stopper.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->signal, 9);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(Entrypoint, AProgramThatCannotRunEndsWith127) {
  absl::StatusOr<EntrypointResult> r = RunEntrypoint(
      {"/nonexistent/python3", "x.py"}, {}, nullptr, absl::Seconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_NE(r->stderr_tail.find("cannot execute /nonexistent/python3"),
            std::string::npos)
      << r->stderr_tail;
}

}  // namespace
}  // namespace ps::worker
