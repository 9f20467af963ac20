// A job's Python entrypoint (JobSpec.python.script) run by ps_worker as a
// child process: its stderr passed through to ps_worker's and its tail
// kept for the failure report, stopped with SIGTERM (then SIGKILL) when
// the job is.
#ifndef PS_WORKER_ENTRYPOINT_H_
#define PS_WORKER_ENTRYPOINT_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps::worker {

struct EntrypointResult {
  int exit_code = 0;        // when it exited
  int signal = 0;           // when a signal ended it (0: it exited)
  bool stopped = false;     // ended because `stop` was set
  std::string stderr_tail;  // its last stderr bytes (at most 2 KB)

  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exited with status 3" / "killed by signal 9".
  std::string Describe() const;
};

// Runs `argv` (argv[0] a path) with this process's environment plus `env`
// ("NAME=value", replacing a variable of the same name) until it ends.
// When *stop becomes true it gets SIGTERM, and SIGKILL after `grace`.
// Errors: a failed pipe or fork; a program that cannot be executed ends
// with exit status 127 and the reason in its stderr tail.
absl::StatusOr<EntrypointResult> RunEntrypoint(
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    const std::atomic<bool>* stop, absl::Duration grace);

}  // namespace ps::worker

#endif  // PS_WORKER_ENTRYPOINT_H_
