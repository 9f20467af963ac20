#include "tools/worker_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace ps::bench {
namespace {

// Milliseconds left until `deadline` for poll(), at least 0.
int PollTimeout(absl::Time deadline) {
  const double ms =
      std::ceil(absl::ToDoubleMilliseconds(deadline - absl::Now()));
  if (ms <= 0) return 0;
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

// write() of all of `data` without dying of SIGPIPE when the reader is
// gone: the signal is blocked in this thread and a pending one is consumed.
bool WriteLine(int fd, absl::string_view data) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool ok = true;
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    data.remove_prefix(n);
  }
  if (!ok) {
    const timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

std::string Name(int index, pid_t pid) {
  return absl::StrCat("worker process ", index, " (pid ", pid, ")");
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcesses>> WorkerProcesses::Start(
    const std::vector<std::vector<std::string>>& argvs,
    const std::vector<std::string>& extra_env) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  std::unique_ptr<WorkerProcesses> p(new WorkerProcesses());
  for (const std::vector<std::string>& argv : argvs) {
    if (argv.empty()) {
      return absl::InvalidArgumentError("WorkerProcesses: an empty argv");
    }
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) {
      return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // (dup2 clears close-on-exec on the child's copies.)
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    std::vector<std::string> args = argv;
    std::vector<char*> args_p;
    for (std::string& a : args) args_p.push_back(a.data());
    args_p.push_back(nullptr);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, args_p[0], &actions, nullptr,
                                args_p.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    if (err != 0) {
      ::close(in[1]);
      ::close(out[0]);
      return absl::UnavailableError(
          absl::StrCat("cannot run ", argv[0], ": ", strerror(err)));
    }
    Child c;
    c.pid = pid;
    c.to_child = in[1];
    c.from_child = out[0];
    p->children_.push_back(std::move(c));
  }
  return p;
}

WorkerProcesses::~WorkerProcesses() {
  for (Child& c : children_) {
    if (c.to_child >= 0) ::close(c.to_child);
    if (c.from_child >= 0) ::close(c.from_child);
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      int status = 0;
      while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

absl::Status WorkerProcesses::ReadLines(absl::Time deadline) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < size(); ++i) {
      Child& c = children_[i];
      if (!c.lines.empty()) continue;
      if (c.eof) {
        return absl::InternalError(absl::StrCat(
            Name(i, c.pid), " ended its output without the expected line"));
      }
      fds.push_back({c.from_child, POLLIN, 0});
      which.push_back(i);
    }
    if (fds.empty()) return absl::OkStatus();
    const int timeout = PollTimeout(deadline);
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (n == 0) {
      const int i = which.front();
      return absl::DeadlineExceededError(
          absl::StrCat(Name(i, children_[i].pid),
                       " did not answer in time (and maybe others)"));
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Child& c = children_[which[k]];
      char buf[4096];
      const ssize_t r = ::read(c.from_child, buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        c.eof = true;
        continue;
      }
      c.pending.append(buf, r);
      size_t nl;
      while ((nl = c.pending.find('\n')) != std::string::npos) {
        c.lines.push_back(c.pending.substr(0, nl));
        c.pending.erase(0, nl + 1);
      }
    }
  }
}

absl::Status WorkerProcesses::WaitReady(absl::Time deadline) {
  if (absl::Status s = ReadLines(deadline); !s.ok()) return s;
  for (int i = 0; i < size(); ++i) {
    Child& c = children_[i];
    const std::string line = c.lines.front();
    c.lines.erase(c.lines.begin());
    if (line == "ready") continue;
    if (absl::StartsWith(line, "error: ")) {
      return absl::UnavailableError(
          absl::StrCat(Name(i, c.pid), ": ", line.substr(7)));
    }
    return absl::InternalError(
        absl::StrCat(Name(i, c.pid), " said \"", line, "\", not ready"));
  }
  return absl::OkStatus();
}

absl::Status WorkerProcesses::Go() {
  for (int i = 0; i < size(); ++i) {
    if (!WriteLine(children_[i].to_child, "go\n")) {
      return absl::InternalError(
          absl::StrCat(Name(i, children_[i].pid), " is gone"));
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerProcesses::Reap(Child& c, int index, absl::Time deadline) {
  // Its output ends when it exits; then waitpid does not block for long.
  while (!c.eof) {
    pollfd fd = {c.from_child, POLLIN, 0};
    const int n = ::poll(&fd, 1, PollTimeout(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(Name(index, c.pid), " did not exit in time"));
    }
    char buf[4096];
    const ssize_t r = ::read(c.from_child, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) c.eof = true;
  }
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  const pid_t pid = c.pid;
  c.pid = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        Name(index, pid), " ended with status ",
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> WorkerProcesses::Results(
    absl::Time deadline) {
  if (absl::Status s = ReadLines(deadline); !s.ok()) return s;
  std::vector<std::string> results;
  for (int i = 0; i < size(); ++i) {
    Child& c = children_[i];
    results.push_back(c.lines.front());
    c.lines.erase(c.lines.begin());
    if (absl::Status s = Reap(c, i, deadline); !s.ok()) return s;
  }
  return results;
}

absl::Status AwaitGo(int fd, absl::Time deadline) {
  std::string line;
  for (;;) {
    pollfd p = {fd, POLLIN, 0};
    const int n = ::poll(&p, 1, PollTimeout(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return absl::DeadlineExceededError("no \"go\" in time");
    char ch;
    const ssize_t r = ::read(fd, &ch, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return absl::FailedPreconditionError("input ended before \"go\"");
    }
    if (ch != '\n') {
      line.push_back(ch);
      continue;
    }
    if (line == "go") return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("expected \"go\", read \"", line, "\""));
  }
}

}  // namespace ps::bench
