#include "tests/ps_server_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps::testing {
namespace {

std::string ServerBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "ps",
                      "/server/ps_server");
}

std::atomic<int> counter{0};

}  // namespace

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/",
                                       name, "-", getpid(), "-", counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& flags,
    const std::map<std::string, std::string>& env) {
  const std::string port_file = TempDir("port") + "/port";
  std::vector<std::string> args = {ServerBinary(), "--host=127.0.0.1",
                                   "--port=0",
                                   absl::StrCat("--port_file=", port_file)};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  auto process = std::unique_ptr<ServerProcess>(new ServerProcess());
  process->pid_ = pid;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      process->address_ = absl::StrCat("127.0.0.1:", port);
      return process;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->pid_ = -1;
      return absl::InternalError(
          absl::StrCat("ps_server exited during start-up, status ", status));
    }
    absl::SleepFor(absl::Milliseconds(10));  // polling a real process
  }
  return absl::DeadlineExceededError("ps_server did not write its port file");
}

absl::StatusOr<int> ServerProcess::Signal(int sig, int timeout_s) {
  if (pid_ < 0) return absl::FailedPreconditionError("not running");
  kill(pid_, sig);
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError("ps_server did not exit");
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

}  // namespace ps::testing
