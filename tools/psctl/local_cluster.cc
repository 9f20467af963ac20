#include "tools/psctl/local_cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/platform/file_system.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/spec/config.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "tools/psctl/supervisor.h"

namespace ps::psctl {
namespace {

namespace fs = std::filesystem;

// The cores this process may run on (the daemons it starts inherit its
// affinity).
int CpuCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string Trim(std::string s) {
  return std::string(absl::StripAsciiWhitespace(s));
}

bool Alive(int pid) { return pid > 0 && kill(pid, 0) == 0; }

absl::StatusOr<std::string> FindBinary(const std::string& bin_dir,
                                       const std::string& name,
                                       const std::string& bazel_path) {
  for (const std::string& p : {absl::StrCat(bin_dir, "/", name),
                               absl::StrCat(bin_dir, "/", bazel_path)}) {
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find the '", name, "' binary under ", bin_dir,
      " (build it with: bazel build //server/... //worker/...; or pass "
      "--bin_dir)"));
}

// Starts `argv` detached (own session) with stdout/stderr to `log`; writes
// the pid file. The child outlives psctl.
absl::StatusOr<int> Spawn(const std::vector<std::string>& argv,
                          const std::string& log, const std::string& pid_file) {
  const int pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setsid();
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  // As before the atomic write: a pid file that cannot be written is not
  // an error here (`cluster down` then misses that daemon).
  WriteFileAtomically(FileSystem::Posix(), pid_file, absl::StrCat(pid, "\n"))
      .IgnoreError();
  return pid;
}

int ReadPid(const fs::path& file) {
  std::ifstream in(file);
  int pid = 0;
  in >> pid;
  return pid;
}

absl::StatusOr<std::string> WaitForPortFile(const std::string& path, int pid,
                                            const std::string& log,
                                            absl::Time deadline) {
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    std::string port;
    if (in >> port && !port.empty()) return port;
    ReapChildren();
    if (!Alive(pid)) {
      return absl::InternalError(
          absl::StrCat("daemon exited during start-up; see ", log));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("daemon did not report its port within the start timeout; "
                   "see ",
                   log));
}

std::string RandomToken() {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 32; ++i) token += "0123456789abcdef"[rd() % 16];
  return token;
}

// Stops the supervisor of run_dir, if one runs, before the daemons it would
// start again.
void StopSupervisor(const std::string& run_dir, absl::Duration grace) {
  const fs::path file = fs::path(run_dir) / "supervisor.pid";
  const int pid = ReadPid(file);
  if (Alive(pid)) {
    kill(pid, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (Alive(pid) && absl::Now() < deadline) {
      ReapChildren();
      absl::SleepFor(absl::Milliseconds(50));
    }
    if (Alive(pid)) kill(pid, SIGKILL);
    ReapChildren();
  }
  std::error_code ec;
  fs::remove(file, ec);
}

// Starts `psctl cluster supervise` for the cluster of `o` (supervisor.h).
absl::Status StartSupervisor(const LocalClusterOptions& o) {
  std::error_code ec;
  const std::string self = o.psctl_binary.empty()
                               ? fs::read_symlink("/proc/self/exe", ec).string()
                               : o.psctl_binary;
  absl::StatusOr<int> pid =
      Spawn({self, "--run_dir", o.run_dir, "cluster", "supervise"},
            o.run_dir + "/logs/supervisor.log", o.run_dir + "/supervisor.pid");
  return Annotate(pid.status(), "supervisor");
}

}  // namespace

void ReapChildren() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

absl::StatusOr<int> StartDaemon(const std::string& run_dir,
                                const std::string& name,
                                const std::vector<std::string>& argv) {
  PS_RETURN_IF_ERROR(SaveCommand(FileSystem::Posix(), run_dir, name, argv));
  return Spawn(argv, absl::StrCat(run_dir, "/logs/", name, ".log"),
               absl::StrCat(run_dir, "/pids/", name, ".pid"));
}

std::string DefaultBinDir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  // bazel-bin/tools/psctl/psctl -> bazel-bin; an install prefix keeps all
  // binaries in one directory, which FindBinary also accepts.
  const fs::path dir = self.parent_path();
  if (dir.filename() == "psctl" && dir.parent_path().filename() == "tools") {
    return dir.parent_path().parent_path().string();
  }
  return dir.string();
}

std::string RecordedCoordinatorFile(const std::string& run_dir) {
  return run_dir + "/coordinator.addr";
}

absl::StatusOr<std::string> RecordedCoordinator(const std::string& run_dir) {
  std::ifstream in(RecordedCoordinatorFile(run_dir));
  std::string addr;
  if (!(in >> addr)) {
    return absl::UnavailableError(absl::StrCat(
        "no local cluster in ", run_dir,
        " (start one with `psctl cluster up`, or pass --coordinator)"));
  }
  return addr;
}

absl::StatusOr<std::string> RecordedDashboard(const std::string& run_dir,
                                              bool https) {
  std::ifstream in(run_dir + "/ports/dashboard.port");
  int port = 0;
  if (!(in >> port) || port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("no dashboard in ", run_dir,
                     " (`psctl cluster up --dashboard_port 0` starts one)"));
  }
  return absl::StrCat(https ? "https" : "http", "://127.0.0.1:", port, "/");
}

std::vector<ProcessInfo> ClusterProcesses(const std::string& run_dir) {
  std::vector<ProcessInfo> out;
  std::error_code ec;
  std::set<fs::path> files;
  for (const auto& e : fs::directory_iterator(run_dir + "/pids", ec)) {
    files.insert(e.path());
  }
  for (const fs::path& f : files) {
    ProcessInfo p;
    p.name = f.stem().string();
    p.pid = ReadPid(f);
    p.alive = Alive(p.pid);
    p.log = absl::StrCat(run_dir, "/logs/", p.name, ".log");
    out.push_back(p);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ClusterDown(const std::string& run_dir,
                                                     absl::Duration grace) {
  StopSupervisor(run_dir, grace);
  std::vector<ProcessInfo> procs = ClusterProcesses(run_dir);
  // Workers first, then servers, then the coordinator: nobody is left
  // retrying against a peer that is already gone.
  std::stable_sort(
      procs.begin(), procs.end(),
      [](const ProcessInfo& a, const ProcessInfo& b) {
        auto rank = [](const std::string& n) {
          return n.starts_with("worker") ? 0 : n.starts_with("server") ? 1 : 2;
        };
        return rank(a.name) < rank(b.name);
      });
  std::vector<std::string> stopped;
  for (const ProcessInfo& p : procs) {
    if (p.alive) {
      kill(p.pid, SIGTERM);
      stopped.push_back(p.name);
    }
  }
  const absl::Time deadline = absl::Now() + grace;
  for (const ProcessInfo& p : procs) {
    while (Alive(p.pid) && absl::Now() < deadline) {
      ReapChildren();
      absl::SleepFor(absl::Milliseconds(50));
    }
    if (Alive(p.pid)) kill(p.pid, SIGKILL);
  }
  std::error_code ec;
  fs::remove_all(run_dir + "/pids", ec);
  fs::remove(run_dir + "/coordinator.addr", ec);
  return stopped;
}

namespace {

// Polls the coordinator until o.servers servers and o.workers workers are
// alive; fails when a daemon of the run directory exits, or at `deadline`.
absl::Status WaitForMembers(const LocalClusterOptions& o,
                            CoordinatorService::Stub& stub,
                            const std::string& token, absl::Time deadline) {
  int servers = 0, workers = 0;
  while (absl::Now() < deadline) {
    for (const ProcessInfo& p : ClusterProcesses(o.run_dir)) {
      ReapChildren();
      if (!Alive(p.pid)) {
        return absl::InternalError(
            absl::StrCat(p.name, " exited during start-up; see ", p.log));
      }
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, absl::Seconds(2), token);
    ListMembersResponse members;
    if (stub.ListMembers(&ctx, ListMembersRequest(), &members).ok()) {
      servers = workers = 0;
      for (const Member& m : members.members()) {
        if (m.state() != ALIVE) continue;
        servers += m.role() == SERVER;
        workers += m.role() == WORKER;
      }
      if (servers >= o.servers && workers >= o.workers) {
        return absl::OkStatus();
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "only ", servers, "/", o.servers, " servers and ", workers, "/",
      o.workers, " workers registered within the start timeout; see ",
      o.run_dir, "/logs/"));
}

}  // namespace

absl::StatusOr<std::string> ClusterUp(const LocalClusterOptions& o) {
  // No ps_worker at all is a cluster for workers that join it themselves
  // (Python workers: docs/python.md).
  if (o.servers < 1 || o.workers < 0) {
    return absl::InvalidArgumentError(
        "a cluster needs at least one server (and --workers >= 0)");
  }
  for (const ProcessInfo& p : ClusterProcesses(o.run_dir)) {
    if (p.alive) {
      return absl::FailedPreconditionError(
          absl::StrCat("a cluster is already up in ", o.run_dir, " (", p.name,
                       " pid ", p.pid, "); stop it with `psctl cluster down`"));
    }
  }
  const std::string bin_dir = o.bin_dir.empty() ? DefaultBinDir() : o.bin_dir;
  PS_ASSIGN_OR_RETURN(
      const std::string coordinator_bin,
      FindBinary(bin_dir, "coordinator", "server/coordinator/coordinator"));
  PS_ASSIGN_OR_RETURN(const std::string server_bin,
                      FindBinary(bin_dir, "ps_server", "server/ps_server"));
  // A cluster for workers that join by themselves needs no ps_worker.
  std::string worker_bin;
  if (o.workers > 0) {
    PS_ASSIGN_OR_RETURN(worker_bin,
                        FindBinary(bin_dir, "ps_worker", "worker/ps_worker"));
  }

  std::error_code ec;
  for (const char* sub : {"pids", "logs", "ports", "data"}) {
    fs::create_directories(fs::path(o.run_dir) / sub, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create ", o.run_dir, "/", sub, ": ", ec.message()));
    }
  }
  fs::remove_all(fs::path(o.run_dir) / "ports", ec);
  fs::create_directories(fs::path(o.run_dir) / "ports", ec);
  // The same TLS flags for every daemon (each uses them both as server and
  // as client of the others).
  std::vector<std::string> tls_flags;
  if (!o.tls.cert_file.empty()) {
    tls_flags.push_back("--tls_cert=" + o.tls.cert_file);
  }
  if (!o.tls.key_file.empty()) {
    tls_flags.push_back("--tls_key=" + o.tls.key_file);
  }
  if (!o.tls.ca_file.empty()) tls_flags.push_back("--tls_ca=" + o.tls.ca_file);
  const std::string token_file = o.run_dir + "/token";
  if (!fs::exists(token_file)) {
    PS_RETURN_IF_ERROR(WriteFileAtomically(FileSystem::Posix(), token_file,
                                           RandomToken() + "\n"));
    chmod(token_file.c_str(), 0600);
  }

  auto fail = [&](const absl::Status& s) -> absl::Status {
    (void)ClusterDown(o.run_dir, absl::Seconds(5));
    return s;
  };
  const absl::Time deadline = absl::Now() + o.start_timeout;
  auto start = [&](const std::string& name,
                   std::vector<std::string> argv) -> absl::StatusOr<int> {
    return StartDaemon(o.run_dir, name, argv);
  };

  // Coordinator first; everyone follows its file (rewritten if it moves).
  const std::string coord_port_file = o.run_dir + "/ports/coordinator.port";
  const std::string coord_file = o.run_dir + "/coordinator.addr";
  std::vector<std::string> argv = {
      coordinator_bin,
      "--port=0",
      "--port_file=" + coord_port_file,
      "--coordinator_file=" + coord_file,
      "--data_dir=" + o.run_dir + "/data/coordinator",
      "--token_file=" + token_file};
  const std::string dashboard_port_file = o.run_dir + "/ports/dashboard.port";
  if (o.dashboard_port >= 0) {
    argv.push_back(absl::StrCat("--http_port=", o.dashboard_port));
    argv.push_back("--http_port_file=" + dashboard_port_file);
  }
  argv.insert(argv.end(), tls_flags.begin(), tls_flags.end());
  argv.insert(argv.end(), o.coordinator_flags.begin(),
              o.coordinator_flags.end());
  fs::remove(coord_file, ec);  // one a crashed cluster left behind
  absl::StatusOr<int> pid = start("coordinator", argv);
  if (!pid.ok()) return fail(pid.status());
  const std::string coordinator_log = o.run_dir + "/logs/coordinator.log";
  absl::StatusOr<std::string> port =
      WaitForPortFile(coord_port_file, *pid, coordinator_log, deadline);
  if (!port.ok()) return fail(Annotate(port.status(), "coordinator"));
  const std::string address = "127.0.0.1:" + Trim(*port);
  if (o.dashboard_port >= 0) {  // written before the gRPC port file
    if (absl::StatusOr<std::string> dashboard = WaitForPortFile(
            dashboard_port_file, *pid, coordinator_log, deadline);
        !dashboard.ok()) {
      return fail(Annotate(dashboard.status(), "coordinator dashboard"));
    }
  }
  // The coordinator publishes its address in coord_file (atomically, as
  // <file>.tmp renamed) right after its port file; the servers and workers
  // follow that file. psctl does not write it too: two writers of the same
  // <file>.tmp make one rename fail.
  if (absl::StatusOr<std::string> published =
          WaitForPortFile(coord_file, *pid, coordinator_log, deadline);
      !published.ok()) {
    return fail(Annotate(published.status(), "coordinator"));
  }

  for (int i = 0; i < o.servers; ++i) {
    const std::string name = absl::StrCat("server-", i);
    argv = {server_bin,
            "--port=0",
            absl::StrCat("--port_file=", o.run_dir, "/ports/", name, ".port"),
            "--coordinator_file=" + coord_file,
            absl::StrCat("--data_dir=", o.run_dir, "/data/", name),
            "--token_file=" + token_file};
    argv.insert(argv.end(), tls_flags.begin(), tls_flags.end());
    argv.insert(argv.end(), o.server_flags.begin(), o.server_flags.end());
    if (absl::StatusOr<int> p = start(name, argv); !p.ok()) {
      return fail(p.status());
    }
  }
  // With more daemons than cores, a worker that polls for its weights takes
  // the CPU the others need (tools/demo.sh, 4 workers and 2 shards on 2
  // cores: BSP 37-39k examples/s polling against 42-44k not): they sleep at
  // once. (The user's --worker_flag comes later and wins.)
  const bool oversubscribed = o.servers + o.workers > CpuCores();
  for (int i = 0; i < o.workers; ++i) {
    const std::string name = absl::StrCat("worker-", i);
    argv = {worker_bin, "--coordinator_file=" + coord_file,
            "--token_file=" + token_file,
            absl::StrCat("--cpu_threads=", o.cpu_threads)};
    if (!o.device.empty()) argv.push_back("--device=" + o.device);
    if (oversubscribed) argv.push_back("--wait_spin_us=0");
    argv.insert(argv.end(), tls_flags.begin(), tls_flags.end());
    argv.insert(argv.end(), o.worker_flags.begin(), o.worker_flags.end());
    if (absl::StatusOr<int> p = start(name, argv); !p.ok()) {
      return fail(p.status());
    }
  }

  // Wait until every daemon has registered.
  // The daemons were given --token_file: this reads the same file.
  PS_ASSIGN_OR_RETURN(std::string token,
                      ReadClusterToken(token_file, /*env_token=*/nullptr));
  ChannelOptions channel_options;
  channel_options.tls = o.tls;
  PS_ASSIGN_OR_RETURN(auto channel, MakeChannel(address, channel_options));
  auto stub = CoordinatorService::NewStub(channel);
  if (absl::Status s = WaitForMembers(o, *stub, token, deadline); !s.ok()) {
    return fail(s);
  }
  absl::Status s = o.supervise ? StartSupervisor(o) : absl::OkStatus();
  if (!s.ok()) return fail(s);
  return address;
}

}  // namespace ps::psctl
