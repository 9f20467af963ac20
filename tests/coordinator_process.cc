#include "tests/coordinator_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/platform/rpc.h"

namespace ps::testing {
namespace {

std::string CoordinatorBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "ps",
                      "/server/coordinator/coordinator");
}

}  // namespace

CoordinatorProcess::CoordinatorProcess(std::string data_dir, std::string token,
                                       std::vector<std::string> flags)
    : data_dir_(std::move(data_dir)),
      token_(std::move(token)),
      flags_(std::move(flags)) {}

CoordinatorProcess::~CoordinatorProcess() { Stop(SIGTERM); }

absl::Status CoordinatorProcess::Start() {
  if (pid_ > 0) return absl::FailedPreconditionError("already running");
  const std::string port_file = data_dir_ + ".port";
  std::filesystem::remove(port_file);
  std::vector<std::string> args = {CoordinatorBinary(),
                                   "--data_dir=" + data_dir_, "--port=0",
                                   "--port_file=" + port_file};
  args.insert(args.end(), flags_.begin(), flags_.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setenv("PS_TOKEN", token_.c_str(), 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      address_ = absl::StrCat("127.0.0.1:", port);
      auto channel = MakeChannel(address_);
      if (!channel.ok()) return channel.status();
      stub_ = CoordinatorService::NewStub(*channel);
      return absl::OkStatus();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("coordinator exited during start-up, status ", status));
    }
    absl::SleepFor(absl::Milliseconds(10));  // polling a real process
  }
  return absl::DeadlineExceededError("coordinator wrote no port file in 20 s");
}

void CoordinatorProcess::Stop(int signal) {
  if (pid_ <= 0) return;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  address_.clear();
  stub_.reset();
}

}  // namespace ps::testing
