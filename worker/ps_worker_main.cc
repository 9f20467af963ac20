// ps_worker: registers with the coordinator, waits for an assignment, and
// trains its part of the job on its device (a CUDA GPU or the CPU).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/daemon_flags.h"
#include "common/platform/process.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "kernels/blas_check_flag.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/gemm_probe.h"
#include "worker/client/ps_access.h"
#include "worker/coordinator_link.h"
#include "worker/data/dataset.h"
#include "worker/entrypoint.h"
#include "worker/health_server.h"
#include "worker/loop/trainer.h"

ABSL_FLAG(std::string, device, "",
          "Compute device: cpu, cuda or cuda:N. Default: the first GPU if one "
          "works, else the CPU (the choice is logged).");
ABSL_FLAG(std::string, data_root, "",
          "Directory with the dataset's IDX .gz files on this host; overrides "
          "the job's data.path (default: use data.path). IDX data only.");
ABSL_FLAG(int, cpu_threads, 1, "BLAS threads for the CPU backend.");
ABSL_FLAG(bool, allow_tf32, false, "Let cuBLAS use TF32 for fp32 GEMM.");
ABSL_FLAG(int, heartbeat_interval_ms, 500, "Heartbeat period.");
ABSL_FLAG(int, server_retry_s, 60,
          "How long to retry an unresponsive parameter server before "
          "reporting the failure to the coordinator.");
ABSL_FLAG(int, report_every_steps, 20, "Metric report period in steps.");
ABSL_FLAG(int, wait_spin_us, 300,
          "How long the training loop polls for weights still on their way "
          "before it sleeps until they land (microseconds; 0: sleep at "
          "once). Polling keeps a core busy but saves a wake-up per wait.");
ABSL_FLAG(int, health_port, -1,
          "Serve the standard gRPC health service (grpc.health.v1) on "
          "--health_host:PORT: SERVING while heartbeats reach the "
          "coordinator (for Kubernetes probes). -1: off; 0: a free port.");
ABSL_FLAG(std::string, health_host, "0.0.0.0", "Interface for --health_port.");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "The interpreter for jobs with a python.script (docs/python.md).");
ABSL_FLAG(int, python_rejoins, 3,
          "How many times a job's Python script killed by a signal (kill -9, "
          "the OOM killer, a crash) rejoins the job at the current step; "
          "after that, or when it exits non-zero, the worker leaves the job.");

namespace ps::worker {
namespace {

std::atomic<bool> g_terminate{false};

void OnSignal(int) { g_terminate = true; }

struct Device {
  std::string name;
  std::unique_ptr<kernels::Backend> backend;
};

absl::StatusOr<Device> OpenDevice(const std::string& flag, int cpu_threads,
                                  bool allow_tf32) {
  Device d;
  if (flag == "cpu") {
    PS_ASSIGN_OR_RETURN(
        d.backend, kernels::CreateCpuBackend({.num_threads = cpu_threads}));
    d.name = "cpu";
    return d;
  }
  int ordinal = 0;
  if (flag.starts_with("cuda:") &&
      !absl::SimpleAtoi(flag.substr(5), &ordinal)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device: expected cpu, cuda or cuda:N, got '", flag, "'"));
  }
  if (!flag.empty() && flag != "cuda" && !flag.starts_with("cuda:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device: expected cpu, cuda or cuda:N, got '", flag, "'"));
  }
  kernels::CudaBackendOptions co;
  co.device = ordinal;
  co.allow_tf32 = allow_tf32;
  absl::StatusOr<std::unique_ptr<kernels::Backend>> cuda =
      kernels::CreateCudaBackend(co);
  if (cuda.ok()) {
    d.backend = std::move(*cuda);
    d.name = absl::StrCat("cuda:", ordinal);
    return d;
  }
  if (!flag.empty())
    return Annotate(cuda.status(), absl::StrCat("--device=", flag));
  std::fprintf(stderr, "worker: no usable GPU (%s); using the CPU\n",
               std::string(cuda.status().message()).c_str());
  PS_ASSIGN_OR_RETURN(d.backend,
                      kernels::CreateCpuBackend({.num_threads = cpu_threads}));
  d.name = "cpu";
  return d;
}

// Datasets stay loaded between jobs (about 190 MB for Fashion-MNIST).
class DataCache {
 public:
  absl::Status Get(const std::string& dir, bool normalize,
                   std::shared_ptr<const Dataset>* train,
                   std::shared_ptr<const Dataset>* test) {
    const std::string key = absl::StrCat(dir, normalize ? "|n" : "|r");
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      DatasetOptions o;
      o.normalize = normalize;
      PS_ASSIGN_OR_RETURN(auto tr, LoadFashionMnist(dir, Split::kTrain, o));
      std::shared_ptr<const Dataset> tr_shared(std::move(tr));
      o.stats = tr_shared->stats;
      PS_ASSIGN_OR_RETURN(auto te, LoadFashionMnist(dir, Split::kTest, o));
      it = cache_
               .emplace(key, std::make_pair(
                                 tr_shared,
                                 std::shared_ptr<const Dataset>(std::move(te))))
               .first;
    }
    *train = it->second.first;
    *test = it->second.second;
    return absl::OkStatus();
  }

 private:
  std::map<std::string, std::pair<std::shared_ptr<const Dataset>,
                                  std::shared_ptr<const Dataset>>>
      cache_;
};

// Registers with the coordinator named by --coordinator or
// --coordinator_file (retrying for up to 5 minutes) and starts heartbeating.
absl::StatusOr<std::unique_ptr<CoordinatorLink>> ConnectToCoordinator(
    const TlsOptions& tls, const std::string& token, const std::string& device,
    const std::string& blas_core, double gflops) {
  CoordinatorLinkOptions lo;
  const CoordinatorFlags coordinator = CoordinatorFromFlags();
  lo.address = coordinator.address;
  lo.file = coordinator.file;
  lo.tls = tls;
  lo.token = token;
  lo.device = device;
  lo.blas_core = blas_core;
  lo.gemm_gflops = gflops;
  lo.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorLink> link,
                      CreateCoordinatorLink(lo));
  absl::Status s = link->Start(absl::Now() + absl::Minutes(5));
  if (!s.ok()) return absl::UnavailableError(s.message());
  return link;
}

// What every job of this process shares, set up once at start-up.
struct WorkerProcess {
  std::string token;
  TlsOptions tls;
  Device device;
  std::unique_ptr<CoordinatorLink> link;
  DataCache data;
};

// Prints "worker: <status message>" and returns `code`.
int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "worker: %s\n", std::string(status.message()).c_str());
  return code;
}

// Reads the token, opens and probes the device and registers with the
// coordinator. Returns 0 when `w` is ready, else the exit status (the reason
// printed).
int SetUp(const std::string& blas_core, WorkerProcess& w) {
  if (absl::GetFlag(FLAGS_wait_spin_us) < 0) {
    std::fprintf(stderr, "worker: --wait_spin_us must be >= 0, got %d\n",
                 absl::GetFlag(FLAGS_wait_spin_us));
    return 2;
  }
  absl::StatusOr<std::string> token = TokenFromFlags(std::getenv("PS_TOKEN"));
  if (!token.ok()) return Fail(token.status(), 2);
  w.token = *std::move(token);
  absl::StatusOr<Device> device =
      OpenDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_cpu_threads),
                 absl::GetFlag(FLAGS_allow_tf32));
  if (!device.ok()) return Fail(device.status(), 2);
  w.device = *std::move(device);
  std::fprintf(stderr, "worker: device %s (%s)\n", w.device.name.c_str(),
               w.device.backend->Name().c_str());
  // Reported at registration: a slow device or BLAS core is visible in
  // `psctl cluster status` and `psctl explain` before it makes a straggler.
  const kernels::GemmProbeOptions probe_options;
  absl::StatusOr<double> gflops =
      kernels::ProbeGemmGflops(*w.device.backend, probe_options);
  if (!gflops.ok()) return Fail(gflops.status(), 2);
  std::fprintf(stderr, "worker: GEMM probe %.1f GFLOP/s (%d^3 fp32 on %s)\n",
               *gflops, probe_options.n, w.device.name.c_str());

  w.tls = TlsFromFlags();
  absl::StatusOr<std::unique_ptr<CoordinatorLink>> link =
      ConnectToCoordinator(w.tls, w.token, w.device.name, blas_core, *gflops);
  if (!link.ok()) {
    return Fail(link.status(), absl::IsInvalidArgument(link.status()) ? 2 : 1);
  }
  w.link = *std::move(link);
  return 0;
}

// With --health_port, serves the health service and starts `updater`, which
// follows the heartbeats every 500 ms until g_terminate.
absl::Status StartHealth(CoordinatorLink* link,
                         std::unique_ptr<HealthServer>& health,
                         std::thread& updater) {
  if (absl::GetFlag(FLAGS_health_port) < 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(health, HealthServer::Start(absl::StrCat(
                                  absl::GetFlag(FLAGS_health_host), ":",
                                  absl::GetFlag(FLAGS_health_port))));
  std::fprintf(stderr, "worker: health service on port %d\n", health->port());
  HealthServer* h = health.get();
  updater = std::thread([h, link] {
    while (!g_terminate) {
      h->SetServing(link->Connected());
      absl::SleepFor(absl::Milliseconds(500));
    }
  });
  return absl::OkStatus();
}

// What the assignment says while a job trains, kept up to date by
// AssignmentWatcher.
struct JobControl {
  // A STOP, another job or a terminate request: the loop stops within one
  // step.
  std::atomic<bool> stop{false};
  // The job rolled back to a checkpoint (a shard restarted): this run
  // stops and the job starts again at the assignment's start_step.
  std::atomic<bool> rolled_back{false};
  // The evaluator role moves to another worker when its holder is evicted.
  std::atomic<bool> evaluator{false};
  // Every other worker has finished its share: an evaluation now is of the
  // job's final model.
  std::atomic<bool> others_done{false};
  // The clock the steps reached.
  std::atomic<int64_t> at_clock{0};
  // The data plan, followed from the next step when it grows (a leaver's
  // batches) or shrinks; the membership epoch it came with.
  absl::Mutex plan_mu;
  WorkerPlan plan ABSL_GUARDED_BY(plan_mu);
  int64_t plan_epoch ABSL_GUARDED_BY(plan_mu) = 0;
  int64_t shard_steps ABSL_GUARDED_BY(plan_mu) = 0;  // once the data is read
  // Set when the plan grew past where the steps ended: train on from here.
  int64_t resume_at = -1;
  // The job's Python entrypoint was killed by a signal (not by a stop): the
  // worker lost its state but not its daemon, and may rejoin.
  bool crashed = false;

  // Whether the plan goes past `clock`.
  bool Grown(int64_t clock) {
    absl::MutexLock l(&plan_mu);
    return shard_steps > 0 &&
           PlanEnd(plan.start, plan.segments, shard_steps) > clock;
  }

  // The job's servers by shard as the assignment last named them: a
  // failover moves a shard to another server in the same incarnation, and
  // the access TrainJob made (while attached) follows it, its calls going
  // on at the new address (no rollback).
  absl::Mutex servers_mu;
  std::vector<std::string> servers ABSL_GUARDED_BY(servers_mu);
  client::PsAccess* access ABSL_GUARDED_BY(servers_mu) = nullptr;
  std::vector<std::string> access_servers ABSL_GUARDED_BY(servers_mu);
  int moving ABSL_GUARDED_BY(servers_mu) = 0;  // SetServerAddresses running

  // Takes `a`'s servers (same job and incarnation), logging each shard that
  // moved, and moves the access's shards. Called by the watcher only.
  void FollowServers(const WorkerAssignment& a) {
    const std::vector<std::string> now(a.server_addresses().begin(),
                                       a.server_addresses().end());
    std::vector<size_t> moved;
    client::PsAccess* target = nullptr;
    {
      absl::MutexLock l(&servers_mu);
      for (size_t s = 0; s < now.size(); ++s) {
        if (s >= servers.size() || servers[s] != now[s]) moved.push_back(s);
      }
      servers = now;
      if (access != nullptr && access_servers != now) {
        target = access;
        access_servers = now;
        ++moving;
      }
    }
    for (size_t s : moved) {
      std::fprintf(stderr, "worker: job %s: shard %zu moved to %s (failover)\n",
                   a.job_id().c_str(), s, now[s].c_str());
    }
    if (target == nullptr) return;
    // Outside the lock (it may read TLS files); Detach waits for it.
    if (absl::Status s = target->SetServerAddresses(now); !s.ok()) {
      std::fprintf(stderr,
                   "worker: job %s: cannot follow the moved shards: %s\n",
                   a.job_id().c_str(), std::string(s.message()).c_str());
    }
    absl::MutexLock l(&servers_mu);
    --moving;
  }

  // `a` (made for `job`'s servers) follows the servers from now on; the
  // watcher moves it within a look if they moved already.
  void Attach(client::PsAccess* a, const WorkerAssignment& job) {
    absl::MutexLock l(&servers_mu);
    access = a;
    access_servers.assign(job.server_addresses().begin(),
                          job.server_addresses().end());
  }
  // Once it returns, the access is no longer used here.
  void Detach() {
    absl::MutexLock l(&servers_mu);
    servers_mu.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &moving));
    access = nullptr;
  }
};

// Keeps an access attached to a JobControl (following moved shards) for
// its own lifetime: declared after the access, it ends first.
class FollowedServers {
 public:
  FollowedServers(JobControl& control, client::PsAccess* access,
                  const WorkerAssignment& job)
      : control_(control) {
    control_.Attach(access, job);
  }
  ~FollowedServers() { control_.Detach(); }
  FollowedServers(const FollowedServers&) = delete;
  FollowedServers& operator=(const FollowedServers&) = delete;

 private:
  JobControl& control_;
};

// Watches `job`'s assignment on a thread of its own until destroyed.
class AssignmentWatcher {
 public:
  AssignmentWatcher(CoordinatorLink* link, const WorkerAssignment& job,
                    JobControl& control)
      : thread_([this, link, job, &control] { Watch(link, job, control); }) {}
  ~AssignmentWatcher() {
    training_ = false;
    thread_.join();
  }

 private:
  void Watch(CoordinatorLink* link, const WorkerAssignment& job,
             JobControl& control) {
    WorkerAssignment seen = job;
    while (training_) {
      seen = link->WaitForChange(seen, absl::Milliseconds(200));
      if (g_terminate || seen.command() != WorkerAssignment::TRAIN ||
          seen.job_id() != job.job_id()) {
        control.stop = true;
      } else if (seen.incarnation() != job.incarnation()) {
        control.rolled_back = true;
        control.stop = true;
      } else {
        control.FollowServers(seen);
        control.evaluator = seen.evaluator();
        control.others_done = seen.others_done();
        absl::MutexLock l(&control.plan_mu);
        control.plan = PlanOf(seen);
        control.plan_epoch = seen.membership_epoch();
      }
    }
  }

  std::atomic<bool> training_{true};
  std::thread thread_;
};

// The environment a job's Python entrypoint gets: how to reach the
// coordinator as this worker's member (the `ps` package reads it), and the
// package itself next to this binary when it is there (Bazel's tree).
std::vector<std::string> EntrypointEnvironment(const WorkerProcess& w,
                                               const WorkerAssignment& job) {
  const CoordinatorFlags coordinator = CoordinatorFromFlags();
  std::vector<std::string> env = {
      absl::StrCat("PS_MEMBER_ID=", w.link->member_id()),
      absl::StrCat("PS_DEVICE=", w.device.name),
      absl::StrCat("PS_TOKEN=", w.token),
      absl::StrCat("PS_JOB_ID=", job.job_id()),
      absl::StrCat("PS_TLS_CERT=", w.tls.cert_file),
      absl::StrCat("PS_TLS_KEY=", w.tls.key_file),
      absl::StrCat("PS_TLS_CA=", w.tls.ca_file),
      absl::StrCat("PS_COORDINATOR=", coordinator.address),
      absl::StrCat("PS_COORDINATOR_FILE=", coordinator.file)};
  char exe[4096] = {0};
  if (readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0) {
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/')) + "/python";
    if (access((dir + "/ps/__init__.py").c_str(), R_OK) == 0) {
      const char* path = std::getenv("PYTHONPATH");
      env.push_back(absl::StrCat("PYTHONPATH=", dir,
                                 path != nullptr && *path ? ":" : "",
                                 path != nullptr ? path : ""));
    }
  }
  return env;
}

// A job with a python.script: runs the script (it speaks for this member
// while this process's heartbeats pause) until it ends or the job stops.
absl::Status RunPythonEntrypoint(WorkerProcess& w, const WorkerAssignment& job,
                                 JobControl& control) {
  const PythonSpec& py = job.spec().python();
  std::vector<std::string> argv = {absl::GetFlag(FLAGS_python), py.script()};
  argv.insert(argv.end(), py.args().begin(), py.args().end());
  std::fprintf(stderr, "worker: job %s: running %s %s\n", job.job_id().c_str(),
               argv[0].c_str(), py.script().c_str());
  w.link->PauseHeartbeats();
  absl::StatusOr<EntrypointResult> r = RunEntrypoint(
      argv, EntrypointEnvironment(w, job), &control.stop, absl::Seconds(10));
  // The script's clock was the member's; this process's heartbeats keep it
  // alive without naming one (a clock of no incarnation is not the job's
  // progress), so that the coordinator keeps the last clock the script
  // reported.
  w.link->SetProgress(job.job_id(), 0, /*incarnation=*/-1);
  w.link->ResumeHeartbeats();
  PS_RETURN_IF_ERROR(r.status());
  if (!r->ok()) {
    // A stop or a rollback ends the script too: the heartbeats that
    // resumed tell (the watcher sets control.stop).
    const absl::Time until =
        absl::Now() +
        3 * absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
    while (!control.stop && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (r->stopped || (control.stop && !r->ok())) {
    return absl::CancelledError(absl::StrCat("python entrypoint ", py.script(),
                                             " ", r->Describe(),
                                             " as the job stopped"));
  }
  if (!r->ok()) {
    control.crashed = r->signal != 0;
    std::string tail = r->stderr_tail;
    if (tail.size() > 1000) tail = "..." + tail.substr(tail.size() - 1000);
    return absl::FailedPreconditionError(
        absl::StrCat("python entrypoint ", py.script(), " ", r->Describe(),
                     "; its stderr ends: ", tail));
  }
  return absl::OkStatus();
}

// Loads the job's data, connects to its servers and trains until the job
// ends or `control` stops it.
absl::Status TrainJob(WorkerProcess& w, const WorkerAssignment& job,
                      JobControl& control) {
  if (job.spec().has_python()) return RunPythonEntrypoint(w, job, control);
  std::shared_ptr<const Dataset> train, test;
  const std::string dir = absl::GetFlag(FLAGS_data_root).empty()
                              ? job.spec().data().path()
                              : absl::GetFlag(FLAGS_data_root);
  // Text formats stream their files in Train (worker/loop/training_data.h).
  if (job.spec().data().format() == DataSpec::IDX) {
    PS_RETURN_IF_ERROR(
        w.data.Get(dir, !job.spec().data().no_normalize(), &train, &test));
  }
  client::PsAccessOptions ao;
  ao.token = w.token;
  ao.tls = w.tls;
  ao.member_id = w.link->member_id();
  ao.retry_deadline = absl::Seconds(absl::GetFlag(FLAGS_server_retry_s));
  ao.wait_spin = absl::Microseconds(absl::GetFlag(FLAGS_wait_spin_us));
  ao.stop = &control.stop;
  // This assignment's compressed pushes (JobSpec.compression), reported
  // with the training metrics; declared before the access that counts.
  client::CompressionCounters compression;
  client::CompressionReport compression_report(&compression);
  ao.compression_counters = &compression;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<client::PsAccess> access,
                      client::CreatePsAccess(job, ao));
  FollowedServers followed(control, access.get(), job);
  TrainerOptions to;
  to.report_every_steps = absl::GetFlag(FLAGS_report_every_steps);
  if (job.spec().compression().kind() != CompressionSpec::NONE) {
    to.report_extra = [&compression_report] {
      return compression_report.Points();
    };
  }
  to.is_evaluator = [&control] { return control.evaluator.load(); };
  to.others_done = [&control] { return control.others_done.load(); };
  CoordinatorLink* l = w.link.get();
  // The data's shape as Train derived it (IDX: the dataset's size; text:
  // the counting pass), for the coordinator's cuts of data plans.
  to.on_data_shape = [&control, l](int64_t shard_steps,
                                   int64_t steps_per_epoch) {
    {
      absl::MutexLock lock(&control.plan_mu);
      control.shard_steps = shard_steps;
    }
    l->SetDataShape(shard_steps, steps_per_epoch);
  };
  to.on_step = [&job, &control, l](int64_t clock) {
    control.at_clock = clock;
    l->SetProgress(job.job_id(), clock, job.incarnation());
  };
  absl::StatusOr<TrainResult> r = Train(
      job, train, test, w.device.backend.get(), access.get(),
      [&job, &control, l](std::vector<MetricPoint> points, bool done) {
        for (MetricPoint& p : points) p.set_incarnation(job.incarnation());
        // Not done when the plan grew as the steps ended: it trains on.
        done = done && !control.Grown(control.at_clock);
        l->ReportMetrics(job.job_id(), std::move(points), done);
      },
      &control.stop, to,
      [&control] {
        absl::MutexLock l(&control.plan_mu);
        return control.plan;
      });
  PS_RETURN_IF_ERROR(r.status());
  if (control.Grown(r->final_clock) && !control.stop) {
    std::fprintf(stderr,
                 "worker: job %s: more data at step %lld; training on\n",
                 job.job_id().c_str(), static_cast<long long>(r->final_clock));
    control.resume_at = r->final_clock;
  }
  std::fprintf(stderr, "worker: job %s done: %lld steps, last loss %.4f\n",
               job.job_id().c_str(), static_cast<long long>(r->steps),
               r->last_loss);
  return absl::OkStatus();
}

// How a run of an assignment ended.
struct JobEnd {
  // False: the job rolled back, or its plan grew, and is to start again.
  bool finished = true;
  int64_t resume_at = -1;   // the plan grew: the step to train on from
  int64_t plan_epoch = 0;   // the membership epoch of the plan it finished
  int64_t incarnation = 0;  // the job's incarnation it finished in
  bool crashed = false;     // its Python script crashed; it left to rejoin
};

// Runs one assignment to its end. `may_rejoin`: a crashed Python script
// leaves the job to rejoin it rather than failing.
JobEnd RunJob(WorkerProcess& w, const WorkerAssignment& job, bool may_rejoin) {
  std::fprintf(stderr, "worker: job %s rank %d/%d, %d servers%s%s\n",
               job.job_id().c_str(), job.rank(), job.num_workers(),
               job.server_addresses_size(),
               job.evaluator() ? ", evaluator" : "",
               job.incarnation() > 0
                   ? absl::StrCat(", restarting at step ", job.start_step(),
                                  " (rollback ", job.incarnation(), ")")
                         .c_str()
                   : "");
  // No data shape until this run's trainer reports it: the heartbeats
  // would otherwise carry the last job's with this one's id.
  w.link->SetDataShape(0, 0);
  w.link->SetProgress(job.job_id(), job.start_step(), job.incarnation());
  JobControl control;
  control.evaluator = job.evaluator();
  control.others_done = job.others_done();
  control.at_clock = job.start_step();
  {
    absl::MutexLock l(&control.plan_mu);
    control.plan = PlanOf(job);
    control.plan_epoch = job.membership_epoch();
  }
  {
    absl::MutexLock l(&control.servers_mu);
    control.servers.assign(job.server_addresses().begin(),
                           job.server_addresses().end());
  }
  absl::Status status;
  {
    AssignmentWatcher watcher(w.link.get(), job, control);
    status = TrainJob(w, job, control);
  }
  // The watcher may take a grown plan after TrainJob's last look and before
  // it stops; its epoch would then count as finished and the worker would
  // wait for an assignment that never comes. Train on, as TrainJob does.
  if (status.ok() && control.resume_at < 0 && !control.stop && !g_terminate &&
      control.Grown(control.at_clock)) {
    std::fprintf(stderr,
                 "worker: job %s: more data at step %lld as it ended; "
                 "training on\n",
                 job.job_id().c_str(),
                 static_cast<long long>(control.at_clock.load()));
    control.resume_at = control.at_clock;
  }
  if (control.rolled_back && !g_terminate) {
    std::fprintf(stderr,
                 "worker: job %s rolled back to a checkpoint; dropping this "
                 "run (%s) and starting again\n",
                 job.job_id().c_str(), std::string(status.message()).c_str());
    return {.finished = false};
  }
  if (control.resume_at >= 0 && !g_terminate) {
    return {.finished = false, .resume_at = control.resume_at};
  }
  if (control.crashed && may_rejoin && !g_terminate) {
    std::fprintf(stderr,
                 "worker: job %s: %s; leaving the job to rejoin it at the "
                 "current step\n",
                 job.job_id().c_str(), std::string(status.message()).c_str());
    (void)w.link->ReportFailure(job.job_id(), std::string(status.message()),
                                /*crashed=*/true);
    w.link->SetProgress("", 0, 0);
    return {.finished = false, .crashed = true};
  }
  if (absl::IsCancelled(status)) {
    std::fprintf(stderr, "worker: job %s stopped: %s\n", job.job_id().c_str(),
                 std::string(status.message()).c_str());
  } else if (!status.ok()) {
    std::fprintf(stderr, "worker: job %s failed: %s\n", job.job_id().c_str(),
                 std::string(status.message()).c_str());
    (void)w.link->ReportFailure(job.job_id(), std::string(status.message()),
                                /*crashed=*/false);
  }
  w.link->SetProgress("", 0, 0);
  absl::MutexLock l(&control.plan_mu);
  return {.finished = true,
          .plan_epoch = control.plan_epoch,
          .incarnation = job.incarnation()};
}

int Run(const std::string& blas_core) {
  WorkerProcess w;
  if (int rc = SetUp(blas_core, w); rc != 0) return rc;
  std::unique_ptr<HealthServer> health;
  std::thread health_updater;
  if (absl::Status s = StartHealth(w.link.get(), health, health_updater);
      !s.ok()) {
    return Fail(s, 2);
  }
  WorkerAssignment current;
  std::string finished_job;
  // The membership epoch this worker finished the job under: a later one
  // that is not done gave it more of the job's data (data_plan.h), or asks
  // the evaluator for the final model's evaluation. A later incarnation
  // undid its steps past the rollback's step: it trains them again.
  int64_t finished_epoch = 0;
  int64_t finished_incarnation = 0;
  int64_t resume_at = -1;   // the step to train on from when the plan grew
  std::string crashed_job;  // the job whose script crashed, and how often
  int crashes = 0;
  while (!g_terminate) {
    current = w.link->WaitForChange(current, absl::Milliseconds(500));
    if (current.command() != WorkerAssignment::TRAIN ||
        (current.job_id() == finished_job &&
         (current.done() || (current.membership_epoch() <= finished_epoch &&
                             current.incarnation() <= finished_incarnation)))) {
      continue;
    }
    WorkerAssignment job = current;
    if (resume_at >= 0) job.set_start_step(std::exchange(resume_at, -1));
    // After a rollback `current` is the old assignment: the next wait
    // returns the new one.
    if (job.job_id() != crashed_job) crashes = 0;
    const JobEnd end =
        RunJob(w, job, crashes < absl::GetFlag(FLAGS_python_rejoins));
    if (end.crashed) {
      crashed_job = job.job_id();
      ++crashes;
    }
    resume_at = end.resume_at;
    if (end.finished) {
      finished_job = job.job_id();
      finished_epoch = end.plan_epoch;
      finished_incarnation = end.incarnation;
    }
  }
  std::fprintf(stderr, "worker: terminating\n");
  if (health_updater.joinable()) health_updater.join();
  w.link->Stop();
  return 0;
}

}  // namespace
}  // namespace ps::worker

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ps_worker --coordinator=HOST:PORT [--device=cpu|cuda|cuda:N] "
      "[--token_file=FILE]\n"
      "Registers with the coordinator and trains the jobs it is assigned on "
      "one device. Stops cleanly on SIGTERM/SIGINT (within one step).\n"
      "Jobs on text data (data.format CRITEO, LIBSVM or MOVIELENS) stream "
      "data.train_files from this host's disk; without data.max_steps the "
      "worker first counts the training examples in one streaming pass over "
      "them to size an epoch, unless the coordinator already has a worker's "
      "count (docs/data.md).\n"
      "Jobs with python { script } run that script instead, with --python, "
      "speaking for this worker (docs/python.md).\n"
      "Environment: PS_TOKEN (the cluster token without --token_file); "
      "PS_MALLOC_TUNING=0 keeps glibc's allocator defaults instead of "
      "keeping freed message buffers (up to 256 MB) in the process; "
      "OPENBLAS_CORETYPE, if set, is kept (see --blas_check).");
  absl::ParseCommandLine(argc, argv);
  // First: it may restart this process (same pid and argv).
  const ps::kernels::BlasStartupResult blas =
      ps::kernels::RunBlasStartupCheckAsFlagged(
          argv, std::getenv(ps::kernels::kBlasCoreTypeVariable),
          std::getenv(ps::kernels::kBlasRestartMarker));
  std::fprintf(stderr, "worker: blas: %s\n", blas.message.c_str());
  ps::PrepareDaemonProcess(std::getenv("PS_MALLOC_TUNING"));
  signal(SIGTERM, ps::worker::OnSignal);
  signal(SIGINT, ps::worker::OnSignal);
  signal(SIGPIPE, SIG_IGN);
  return ps::worker::Run(blas.core);
}
