// ps_worker: registers with the coordinator, waits for an assignment, and
// trains its part of the job on its device (a CUDA GPU or the CPU).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/process.h"
#include "common/rpc.h"
#include "common/status.h"
#include "kernels/blas_check.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/gemm_probe.h"
#include "worker/coordinator_link.h"
#include "worker/dataset.h"
#include "worker/health_server.h"
#include "worker/ps_access.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address host:port (this or --coordinator_file).");
ABSL_FLAG(std::string, coordinator_file, "",
          "File holding the coordinator's host:port (the coordinator's own "
          "--coordinator_file), read again whenever the coordinator is "
          "unreachable: a coordinator restarted at another address is "
          "found there.");
ABSL_FLAG(std::string, device, "",
          "Compute device: cpu, cuda or cuda:N. Default: the first GPU if one "
          "works, else the CPU (the choice is logged).");
ABSL_FLAG(std::string, data_root, "",
          "Directory with the dataset's IDX .gz files on this host; overrides "
          "the job's data.path (default: use data.path).");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token (default: $PS_TOKEN; empty = no "
          "token). Never pass the token itself on the command line.");
ABSL_FLAG(int, cpu_threads, 1, "BLAS threads for the CPU backend.");
ABSL_FLAG(bool, allow_tf32, false, "Let cuBLAS use TF32 for fp32 GEMM.");
ABSL_FLAG(bool, blas_check, true,
          "At start-up, check the kernels OpenBLAS chose against the CPU: "
          "where it fell back to a generic core on a CPU that has better "
          "(OpenBLAS 0.3.21 on CPUs newer than it), restart once with "
          "OPENBLAS_CORETYPE set to the core that fits. A user-set "
          "OPENBLAS_CORETYPE is kept. false: keep OpenBLAS's choice.");
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
ABSL_FLAG(
    std::string, tls_cert, "",
    "PEM client certificate (with --tls_key) presented to the coordinator "
    "and the parameter servers (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle: enables TLS to the coordinator and the servers and "
          "verifies their certificates against it.");

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
  lo.address = absl::GetFlag(FLAGS_coordinator);
  lo.file = absl::GetFlag(FLAGS_coordinator_file);
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

int Run(const std::string& blas_core) {
  if (absl::GetFlag(FLAGS_wait_spin_us) < 0) {
    std::fprintf(stderr, "worker: --wait_spin_us must be >= 0, got %d\n",
                 absl::GetFlag(FLAGS_wait_spin_us));
    return 2;
  }
  absl::StatusOr<std::string> token = ReadClusterToken(
      absl::GetFlag(FLAGS_token_file), std::getenv("PS_TOKEN"));
  if (!token.ok()) {
    std::fprintf(stderr, "worker: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<Device> device =
      OpenDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_cpu_threads),
                 absl::GetFlag(FLAGS_allow_tf32));
  if (!device.ok()) {
    std::fprintf(stderr, "worker: %s\n",
                 std::string(device.status().message()).c_str());
    return 2;
  }
  std::fprintf(stderr, "worker: device %s (%s)\n", device->name.c_str(),
               device->backend->Name().c_str());
  // Reported at registration: a slow device or BLAS core is visible in
  // `psctl cluster status` and `psctl explain` before it makes a straggler.
  const kernels::GemmProbeOptions probe_options;
  absl::StatusOr<double> gflops =
      kernels::ProbeGemmGflops(*device->backend, probe_options);
  if (!gflops.ok()) {
    std::fprintf(stderr, "worker: %s\n",
                 std::string(gflops.status().message()).c_str());
    return 2;
  }
  std::fprintf(stderr, "worker: GEMM probe %.1f GFLOP/s (%d^3 fp32 on %s)\n",
               *gflops, probe_options.n, device->name.c_str());

  TlsOptions tls;
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_tls_key);
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca);

  absl::StatusOr<std::unique_ptr<CoordinatorLink>> link =
      ConnectToCoordinator(tls, *token, device->name, blas_core, *gflops);
  if (!link.ok()) {
    std::fprintf(stderr, "worker: %s\n",
                 std::string(link.status().message()).c_str());
    return absl::IsInvalidArgument(link.status()) ? 2 : 1;
  }

  // The health service follows the heartbeats, checked every 500 ms.
  std::unique_ptr<HealthServer> health;
  std::thread health_updater;
  if (absl::GetFlag(FLAGS_health_port) >= 0) {
    absl::StatusOr<std::unique_ptr<HealthServer>> h =
        HealthServer::Start(absl::StrCat(absl::GetFlag(FLAGS_health_host), ":",
                                         absl::GetFlag(FLAGS_health_port)));
    if (!h.ok()) {
      std::fprintf(stderr, "worker: %s\n",
                   std::string(h.status().message()).c_str());
      return 2;
    }
    health = std::move(*h);
    std::fprintf(stderr, "worker: health service on port %d\n", health->port());
    health_updater = std::thread([&] {
      while (!g_terminate) {
        health->SetServing((*link)->Connected());
        absl::SleepFor(absl::Milliseconds(500));
      }
    });
  }

  DataCache data;
  WorkerAssignment current;
  std::string finished_job;
  while (!g_terminate) {
    current = (*link)->WaitForChange(current, absl::Milliseconds(500));
    if (current.command() != WorkerAssignment::TRAIN ||
        current.job_id() == finished_job) {
      continue;
    }
    const WorkerAssignment job = current;
    std::fprintf(stderr, "worker: job %s rank %d/%d, %d servers%s%s\n",
                 job.job_id().c_str(), job.rank(), job.num_workers(),
                 job.server_addresses_size(),
                 job.evaluator() ? ", evaluator" : "",
                 job.incarnation() > 0
                     ? absl::StrCat(", restarting at step ", job.start_step(),
                                    " (rollback ", job.incarnation(), ")")
                           .c_str()
                     : "");
    (*link)->SetProgress(job.job_id(), job.start_step(), job.incarnation());

    // Watches the assignment while training: a STOP, another job or a
    // terminate request stops the loop within one step; new data shards are
    // picked up at the next epoch.
    std::atomic<bool> stop{false};
    absl::Mutex shards_mu;
    std::vector<int> shards(job.data_shards().begin(), job.data_shards().end());
    std::atomic<bool> training{true};
    // The evaluator role moves to another worker when its holder is evicted.
    std::atomic<bool> evaluator{job.evaluator()};
    // The job rolled back to a checkpoint (a shard restarted): this run
    // stops and the job starts again at the assignment's start_step.
    std::atomic<bool> rolled_back{false};
    std::thread watcher([&] {
      WorkerAssignment seen = job;
      while (training) {
        seen = (*link)->WaitForChange(seen, absl::Milliseconds(200));
        if (g_terminate || seen.command() != WorkerAssignment::TRAIN ||
            seen.job_id() != job.job_id()) {
          stop = true;
        } else if (seen.incarnation() != job.incarnation()) {
          rolled_back = true;
          stop = true;
        } else {
          evaluator = seen.evaluator();
          absl::MutexLock l(&shards_mu);
          shards.assign(seen.data_shards().begin(), seen.data_shards().end());
        }
      }
    });

    absl::Status status;
    std::shared_ptr<const Dataset> train, test;
    const std::string dir = absl::GetFlag(FLAGS_data_root).empty()
                                ? job.spec().data().path()
                                : absl::GetFlag(FLAGS_data_root);
    status = data.Get(dir, !job.spec().data().no_normalize(), &train, &test);
    std::unique_ptr<ParameterAccess> access;
    if (status.ok()) {
      PsAccessOptions ao;
      ao.token = *token;
      ao.tls = tls;
      ao.member_id = (*link)->member_id();
      ao.retry_deadline = absl::Seconds(absl::GetFlag(FLAGS_server_retry_s));
      ao.wait_spin = absl::Microseconds(absl::GetFlag(FLAGS_wait_spin_us));
      ao.stop = &stop;
      absl::StatusOr<std::unique_ptr<ParameterAccess>> a =
          CreatePsAccess(job, ao);
      status = a.status();
      if (a.ok()) access = std::move(*a);
    }
    if (status.ok()) {
      TrainerOptions to;
      to.report_every_steps = absl::GetFlag(FLAGS_report_every_steps);
      to.is_evaluator = [&evaluator] { return evaluator.load(); };
      CoordinatorLink* l = link->get();
      to.on_step = [&, l](int64_t clock) {
        l->SetProgress(job.job_id(), clock, job.incarnation());
      };
      absl::StatusOr<TrainResult> r = Train(
          job, train, test, device->backend.get(), access.get(),
          [&, l](std::vector<MetricPoint> points, bool done) {
            for (MetricPoint& p : points) p.set_incarnation(job.incarnation());
            if (absl::Status s =
                    l->ReportMetrics(job.job_id(), std::move(points), done);
                !s.ok()) {
              std::fprintf(stderr, "worker: metrics not delivered: %s\n",
                           std::string(s.message()).c_str());
            }
          },
          &stop, to,
          [&] {
            absl::MutexLock l(&shards_mu);
            return shards;
          });
      status = r.status();
      if (r.ok()) {
        std::fprintf(stderr,
                     "worker: job %s done: %lld steps, last loss %.4f\n",
                     job.job_id().c_str(), static_cast<long long>(r->steps),
                     r->last_loss);
      }
    }
    training = false;
    watcher.join();
    if (rolled_back && !g_terminate) {
      std::fprintf(stderr,
                   "worker: job %s rolled back to a checkpoint; dropping this "
                   "run (%s) and starting again\n",
                   job.job_id().c_str(), std::string(status.message()).c_str());
      continue;  // `current` is the old assignment: the next wait returns
    }
    finished_job = job.job_id();
    if (absl::IsCancelled(status)) {
      std::fprintf(stderr, "worker: job %s stopped: %s\n", job.job_id().c_str(),
                   std::string(status.message()).c_str());
    } else if (!status.ok()) {
      std::fprintf(stderr, "worker: job %s failed: %s\n", job.job_id().c_str(),
                   std::string(status.message()).c_str());
      (void)(*link)->ReportFailure(job.job_id(), std::string(status.message()),
                                   "");
    }
    (*link)->SetProgress("", 0, 0);
  }
  std::fprintf(stderr, "worker: terminating\n");
  if (health_updater.joinable()) health_updater.join();
  (*link)->Stop();
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
      "Environment: PS_TOKEN (the cluster token without --token_file); "
      "PS_MALLOC_TUNING=0 keeps glibc's allocator defaults instead of "
      "keeping freed message buffers (up to 256 MB) in the process; "
      "OPENBLAS_CORETYPE, if set, is kept (see --blas_check).");
  absl::ParseCommandLine(argc, argv);
  // First: it may restart this process (same pid and argv).
  const ps::kernels::BlasStartupResult blas = ps::kernels::RunBlasStartupCheck(
      absl::GetFlag(FLAGS_blas_check),
      ps::kernels::MakeBlasCheckEnv(
          std::getenv(ps::kernels::kBlasCoreTypeVariable),
          std::getenv(ps::kernels::kBlasRestartMarker)),
      argv);
  std::fprintf(stderr, "worker: blas: %s\n", blas.message.c_str());
  ps::DisableMutexDeadlockDetection();
  ps::TuneMallocForLargeMessages(
      ps::MallocTuningEnabled(std::getenv("PS_MALLOC_TUNING")));
  signal(SIGTERM, ps::worker::OnSignal);
  signal(SIGINT, ps::worker::OnSignal);
  signal(SIGPIPE, SIG_IGN);
  return ps::worker::Run(blas.core);
}
