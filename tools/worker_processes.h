// Benchmark workers as processes of their own, as deployments run them:
// the parent starts one child per worker and the two sides speak in lines
// over the child's stdin and stdout.
//
//   child -> parent   "ready"            set up and warmed up
//                     "error: <text>"    could not set up (then exits)
//   parent -> child   "go"               start measuring, all at once
//   child -> parent   one result line    then exits
//
// Children's stderr is the parent's. Every wait has a deadline.
#ifndef PS_TOOLS_WORKER_PROCESSES_H_
#define PS_TOOLS_WORKER_PROCESSES_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps::bench {

// The parent's side. Not thread-safe (one thread drives it). The destructor
// kills (SIGKILL) and reaps children that are still running.
class WorkerProcesses {
 public:
  // Starts one process per entry of `argvs` (argv[0]: the program's path),
  // each with this process's environment plus `extra_env` ("NAME=value";
  // how a parent hands a child the cluster token without putting it on a
  // command line). UNAVAILABLE when one cannot be started.
  static absl::StatusOr<std::unique_ptr<WorkerProcesses>> Start(
      const std::vector<std::vector<std::string>>& argvs,
      const std::vector<std::string>& extra_env);
  ~WorkerProcesses();
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  int size() const { return static_cast<int>(children_.size()); }

  // Returns once every child has said "ready". A child's "error: ..." line
  // (UNAVAILABLE with its text), a child that exits first (INTERNAL), or
  // `deadline` (DEADLINE_EXCEEDED) ends the wait with an error naming the
  // child.
  absl::Status WaitReady(absl::Time deadline);

  // Tells every child to go (one write each, back to back).
  absl::Status Go();

  // Each child's result line, in start order, once every child has written
  // one and exited. Errors as WaitReady's; a child that exits with a
  // non-zero status after its line is an error too.
  absl::StatusOr<std::vector<std::string>> Results(absl::Time deadline);

 private:
  struct Child {
    pid_t pid = -1;
    int to_child = -1;    // its stdin
    int from_child = -1;  // its stdout
    std::string pending;  // bytes read, not yet a whole line
    std::vector<std::string> lines;
    bool eof = false;
  };

  WorkerProcesses() = default;
  // Reads until every child has a whole line not yet taken (lines[0]), a
  // child's output ends first, or `deadline` passes.
  absl::Status ReadLines(absl::Time deadline);
  absl::Status Reap(Child& child, int index, absl::Time deadline);

  std::vector<Child> children_;
};

// The child's side: waits for "go" on `fd` (its stdin) until `deadline`.
// FAILED_PRECONDITION on any other line or end of input.
absl::Status AwaitGo(int fd, absl::Time deadline);

}  // namespace ps::bench

#endif  // PS_TOOLS_WORKER_PROCESSES_H_
