// Keeps a local cluster's daemons running (`psctl cluster up --restart
// on-failure`, the default): a detached `psctl cluster supervise` process
// watches every daemon recorded in the run directory and starts one that
// died again with the command line it was first given
// (<run_dir>/cmd/<name>), so with its identity and data directory: a
// server's --data_dir keeps its member id, and the coordinator and servers
// follow <run_dir>/coordinator.addr wherever the coordinator comes back.
// Restarts back off (1 s, doubling up to 30 s; back to 1 s once a daemon
// stayed up for a minute) and are logged to <run_dir>/events.log, which
// `psctl cluster status` counts.
//
// The supervisor is not the daemons' parent (they are detached, and
// outlive `psctl cluster up`), so it cannot see exit codes: any daemon that
// is gone while the cluster is up counts as failed. `psctl cluster down`
// stops the supervisor first.
#ifndef PS_TOOLS_PSCTL_SUPERVISOR_H_
#define PS_TOOLS_PSCTL_SUPERVISOR_H_

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/file_system.h"

namespace ps::psctl {

struct SupervisorOptions {
  std::string run_dir;
  absl::Duration poll = absl::Milliseconds(200);
  absl::Duration first_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  // A daemon up this long has its backoff reset.
  absl::Duration healthy_after = absl::Seconds(60);
};

// When to start one daemon again. Not thread-safe; pure (times are given).
class RestartBackoff {
 public:
  explicit RestartBackoff(const SupervisorOptions& options)
      : options_(options), next_(options.first_backoff) {}

  // The daemon (last started at `started`) was found gone at `now`: the
  // time to start it again.
  absl::Time OnExit(absl::Time started, absl::Time now);

 private:
  const SupervisorOptions options_;
  absl::Duration next_;
};

// Records argv as daemon `name`'s command line (<run_dir>/cmd/<name>, one
// argument per line) through `fs`, atomically (WriteFileAtomically): a
// supervisor reading it while `cluster up` writes it, or after a crash,
// finds the old command line or the new one, never a part. The error names
// the file that could not be written. LoadCommand reads it back; NOT_FOUND
// when none was recorded.
absl::Status SaveCommand(FileSystem* fs, const std::string& run_dir,
                         const std::string& name,
                         const std::vector<std::string>& argv);
absl::StatusOr<std::vector<std::string>> LoadCommand(const std::string& run_dir,
                                                     const std::string& name);

// Appends a line "<time>  <kind>  <name>  <message>" to <run_dir>/events.log.
void AppendClusterEvent(const std::string& run_dir, const std::string& kind,
                        const std::string& name, const std::string& message);

// The number of "restart" events per daemon name in <run_dir>/events.log.
std::map<std::string, int> RestartCounts(const std::string& run_dir);

// Watches and restarts the daemons of options.run_dir until `stop`.
void Supervise(const SupervisorOptions& options, const std::atomic<bool>& stop);

}  // namespace ps::psctl

#endif  // PS_TOOLS_PSCTL_SUPERVISOR_H_
