// A cluster on this machine: the coordinator, N ps_server shards and M
// ps_worker daemons as detached processes on loopback, with free ports, and
// their pid, port and log files under one run directory:
//   <run_dir>/coordinator.addr   host:port psctl connects to
//   <run_dir>/token              the cluster token (mode 0600)
//   <run_dir>/pids/<name>.pid, <run_dir>/logs/<name>.log,
//   <run_dir>/ports/<name>.port, <run_dir>/data/<name>/
//   <run_dir>/cmd/<name>         the daemon's command line (supervisor.h)
//   <run_dir>/supervisor.pid, <run_dir>/events.log   with --restart
//   <run_dir>/ports/dashboard.port   the coordinator's web dashboard, if on
#ifndef PS_TOOLS_PSCTL_LOCAL_CLUSTER_H_
#define PS_TOOLS_PSCTL_LOCAL_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"

namespace ps::psctl {

struct LocalClusterOptions {
  std::string run_dir = "/tmp/ps-cluster";
  int servers = 2;
  int workers = 4;
  std::string device;  // "" = each worker picks (GPU if one works, else CPU)
  int cpu_threads = 1;
  // Where coordinator, ps_server and ps_worker live; empty = found next to
  // psctl (the bazel-bin tree or an install prefix).
  std::string bin_dir;
  absl::Duration start_timeout = absl::Seconds(60);
  // Extra flags per daemon kind, e.g. {"--heartbeat_interval_ms=200"}.
  std::vector<std::string> coordinator_flags, server_flags, worker_flags;
  // The coordinator's web dashboard (its --http_port): 0 a free port, -1
  // off.
  int dashboard_port = -1;
  // TLS for every daemon (--tls_cert/--tls_key/--tls_ca passed to each) and
  // for psctl's own start-up wait; off when empty. One certificate serves as
  // both server and client identity on this machine.
  TlsOptions tls;
  // Start `psctl cluster supervise` (supervisor.h), which starts a daemon
  // that died again ("--restart on-failure"); `psctl` is this binary
  // (default: /proc/self/exe).
  bool supervise = true;
  std::string psctl_binary;
};

struct ProcessInfo {
  std::string name;  // "coordinator", "server-0", "worker-3"
  int pid = 0;
  bool alive = false;
  std::string log;
};

// Starts the daemons, waits until every one has registered with the
// coordinator, and returns the coordinator's address. FAILED_PRECONDITION if
// a cluster is already up in run_dir; on any failure it stops what it started
// and says which daemon failed and where its log is.
absl::StatusOr<std::string> ClusterUp(const LocalClusterOptions& options);

// Stops the supervisor, then SIGTERM to every daemon of run_dir, SIGKILL
// after `grace`; idempotent.
// Returns the names of the processes that were stopped.
absl::StatusOr<std::vector<std::string>> ClusterDown(
    const std::string& run_dir, absl::Duration grace = absl::Seconds(10));

// Starts daemon `name` of run_dir detached, with its log and pid files, and
// records its command line; the pid.
absl::StatusOr<int> StartDaemon(const std::string& run_dir,
                                const std::string& name,
                                const std::vector<std::string>& argv);

// Reaps this process's children that exited (so that they stop looking
// alive).
void ReapChildren();

// The daemons recorded in run_dir and whether each process is alive.
std::vector<ProcessInfo> ClusterProcesses(const std::string& run_dir);

// The coordinator address recorded in run_dir; UNAVAILABLE if none (no
// cluster is up there).
absl::StatusOr<std::string> RecordedCoordinator(const std::string& run_dir);
// The file it is recorded in (the coordinator's --coordinator_file).
std::string RecordedCoordinatorFile(const std::string& run_dir);

// The dashboard's address recorded in run_dir, "http(s)://127.0.0.1:PORT/";
// UNAVAILABLE if the cluster runs none.
absl::StatusOr<std::string> RecordedDashboard(const std::string& run_dir,
                                              bool https);

// The directory holding the daemon binaries, given psctl's own path.
std::string DefaultBinDir();

}  // namespace ps::psctl

#endif  // PS_TOOLS_PSCTL_LOCAL_CLUSTER_H_
