#include "worker/entrypoint.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ps::worker {
namespace {

constexpr size_t kTailBytes = 2048;

// The environment for the child, built before fork (nothing but
// async-signal-safe calls may run between fork and exec).
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& add) {
  std::set<std::string> replaced;
  for (const std::string& e : add) replaced.insert(e.substr(0, e.find('=')));
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v(*e);
    if (!replaced.count(v.substr(0, v.find('=')))) out.push_back(v);
  }
  out.insert(out.end(), add.begin(), add.end());
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

std::string EntrypointResult::Describe() const {
  if (signal != 0) return absl::StrCat("killed by signal ", signal);
  return absl::StrCat("exited with status ", exit_code);
}

absl::StatusOr<EntrypointResult> RunEntrypoint(
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    const std::atomic<bool>* stop, absl::Duration grace) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = ChildEnvironment(env);
  std::vector<char*> arg_p = Pointers(args);
  std::vector<char*> env_p = Pointers(envs);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);  // dup2 clears FD_CLOEXEC on the copy
    execve(arg_p[0], arg_p.data(), env_p.data());
    const char* why = strerror(errno);
    const char* pre = "cannot execute ";
    (void)!write(STDERR_FILENO, pre, strlen(pre));
    (void)!write(STDERR_FILENO, arg_p[0], strlen(arg_p[0]));
    (void)!write(STDERR_FILENO, ": ", 2);
    (void)!write(STDERR_FILENO, why, strlen(why));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  close(fds[1]);
  // Never blocks: a grandchild may hold the pipe open after the child ends.
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  EntrypointResult r;
  bool open = true;
  absl::Time kill_at = absl::InfiniteFuture();
  int status = 0;
  for (;;) {
    if (open) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n > 0) {
          fwrite(buf, 1, static_cast<size_t>(n), stderr);
          r.stderr_tail.append(buf, static_cast<size_t>(n));
          if (r.stderr_tail.size() > kTailBytes) {
            r.stderr_tail.erase(0, r.stderr_tail.size() - kTailBytes);
          }
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          open = false;  // its end closed: it is exiting
        }
      }
    } else {
      usleep(50000);
    }
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (stop != nullptr && stop->load() && !r.stopped) {
      r.stopped = true;
      kill(pid, SIGTERM);
      kill_at = absl::Now() + grace;
    }
    if (absl::Now() >= kill_at) {
      kill(pid, SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
  // What it wrote just before exiting.
  for (char buf[4096];;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    fwrite(buf, 1, static_cast<size_t>(n), stderr);
    r.stderr_tail.append(buf, static_cast<size_t>(n));
  }
  if (r.stderr_tail.size() > kTailBytes) {
    r.stderr_tail.erase(0, r.stderr_tail.size() - kTailBytes);
  }
  close(fds[0]);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace ps::worker
