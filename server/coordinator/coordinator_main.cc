// The coordinator daemon: membership, jobs, assignments, metrics; see
// coordinator.h. Flags only here (style point 7); the token comes from
// --token_file or $PS_TOKEN, never from the command line.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/platform/clock.h"
#include "common/platform/coordinator_address.h"
#include "common/platform/daemon_flags.h"
#include "common/platform/file_system.h"
#include "common/platform/metrics.h"
#include "common/platform/process.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/dashboard.h"
#include "server/coordinator/dashboard_server.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/shard_client.h"

ABSL_FLAG(std::string, coordinator_file, "",
          "If set, this coordinator's host:port is written to this file "
          "(atomically) once it accepts calls; daemons and psctl given the "
          "same file with --coordinator_file follow it, and find a "
          "coordinator restarted at another address there.");
ABSL_FLAG(int64_t, restart_grace_ms, 30000,
          "After a restart that found running jobs, nobody is evicted for "
          "missed heartbeats, a barrier or slowness for this long (at least "
          "each job's heartbeat timeout): the members' heartbeats stopped "
          "because the coordinator was down.");
ABSL_FLAG(int, max_points_per_series, 4096,
          "Metric points the coordinator keeps in memory per series of a job "
          "(one metric of one worker); past it, older points are merged in "
          "pairs (means, with their range and count), the newest quarter "
          "kept as reported, so memory stays bounded however long a job "
          "runs. The data directory keeps every point. At least 8.");
ABSL_FLAG(std::string, data_dir, "",
          "Directory of the durable job store (job records, events, metric "
          "series). Required; a restart on the same directory resumes every "
          "job.");
ABSL_FLAG(int64_t, heartbeat_interval_ms, 1000,
          "How often members are told to heartbeat; also the period of the "
          "coordinator's failure detection and scheduling.");
ABSL_FLAG(int64_t, member_timeout_ms, 10000,
          "A member silent this long is declared dead (a job's workers are "
          "evicted after the job's consistency.heartbeat_timeout_ms).");
ABSL_FLAG(int64_t, server_wait_timeout_ms, 120000,
          "A running job whose parameter-server shard stays down this long "
          "fails (a shard restarted at the same address within it is set up "
          "again from its checkpoint).");
ABSL_FLAG(int64_t, backup_timeout_ms, 3000,
          "A replicated shard's backup that its primary has had no answer "
          "from for this long (a link cut between the two, or a backup too "
          "slow to answer) is dropped, so that the primary's answers stop "
          "waiting for it; a new backup is built on another server.");
ABSL_FLAG(bool, check_dataset, true,
          "Reject a submitted job whose data.path lacks the dataset files.");
ABSL_FLAG(int, metrics_port, -1,
          "Port for Prometheus metrics at /metrics on --host; 0 picks a free "
          "one (printed), -1 turns it off.");
ABSL_FLAG(int, http_port, -1,
          "Port of the web dashboard and its JSON API on --host (HTTPS with "
          "--tls_cert, behind the cluster token); 0 picks a free one "
          "(printed, and written to --http_port_file), -1 turns it off.");
ABSL_FLAG(std::string, http_port_file, "",
          "If set, the dashboard's port is written to this file (atomically) "
          "once it accepts requests.");
ABSL_FLAG(std::string, dashboard_chart_js,
          "/usr/share/javascript/chart.js/chart.min.js",
          "chart.js the dashboard serves (Debian's libjs-chart.js).");

namespace ps::coordinator {
namespace {

// Writes this coordinator's address to --coordinator_file, if one is set.
absl::Status PublishAddress(const std::string& host, int port) {
  const std::string file = absl::GetFlag(FLAGS_coordinator_file);
  if (file.empty()) return absl::OkStatus();
  return PublishCoordinatorAddress(
      FileSystem::Posix(), file,
      AdvertisedAddress(ListenFromFlags().advertise_address, host, port));
}

int Run() {
  // SIGTERM / SIGINT are taken synchronously by the main thread; every
  // thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (data_dir.empty()) {
    std::fprintf(stderr, "coordinator: --data_dir is required (see --help)\n");
    return 2;
  }
  absl::StatusOr<std::string> token = TokenFromFlags(std::getenv("PS_TOKEN"));
  if (!token.ok()) {
    std::fprintf(stderr, "coordinator: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }
  const TlsOptions tls = TlsFromFlags();

  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(data_dir);
  if (!store.ok()) {
    std::fprintf(stderr, "coordinator: %s\n",
                 std::string(store.status().message()).c_str());
    return 1;
  }
  GrpcShardClientOptions shard_options;
  shard_options.token = *token;
  shard_options.tls = tls;
  std::unique_ptr<ShardClient> shards = MakeGrpcShardClient(shard_options);
  CoordinatorOptions options;
  options.heartbeat_interval_ms = absl::GetFlag(FLAGS_heartbeat_interval_ms);
  options.member_timeout_ms = absl::GetFlag(FLAGS_member_timeout_ms);
  options.server_wait_timeout_ms = absl::GetFlag(FLAGS_server_wait_timeout_ms);
  options.backup_timeout_ms = absl::GetFlag(FLAGS_backup_timeout_ms);
  options.check_dataset_files = absl::GetFlag(FLAGS_check_dataset);
  options.restart_grace_ms = absl::GetFlag(FLAGS_restart_grace_ms);
  options.max_points_per_series = absl::GetFlag(FLAGS_max_points_per_series);
  if (options.max_points_per_series < MetricSeriesSet::kMinPointsPerSeries) {
    std::fprintf(stderr, "coordinator: --max_points_per_series must be >= %d\n",
                 MetricSeriesSet::kMinPointsPerSeries);
    return 2;
  }
  if (options.heartbeat_interval_ms <= 0 || options.member_timeout_ms <= 0 ||
      options.backup_timeout_ms <= 0) {
    std::fprintf(stderr,
                 "coordinator: --heartbeat_interval_ms, --member_timeout_ms "
                 "and --backup_timeout_ms must be > 0\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Coordinator>> core =
      Coordinator::Create(options, Clock::Real(), store->get(), shards.get());
  if (!core.ok()) {
    std::fprintf(stderr, "coordinator: cannot load the job store in %s: %s\n",
                 data_dir.c_str(),
                 std::string(core.status().message()).c_str());
    return 1;
  }

  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(tls);
  if (!creds.ok()) {
    std::fprintf(stderr, "coordinator: %s\n",
                 std::string(creds.status().message()).c_str());
    return 2;
  }
  CoordinatorServiceOptions service_options;
  service_options.token = *token;
  std::unique_ptr<CoordinatorService::Service> service =
      MakeCoordinatorService(core->get(), service_options);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  const ListenFlags listen = ListenFromFlags();
  const std::string& host = listen.host;
  builder.AddListeningPort(absl::StrCat(host, ":", listen.port), *creds, &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "coordinator: cannot listen on %s:%d\n", host.c_str(),
                 listen.port);
    return 1;
  }

  MetricsRegistry metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    absl::StatusOr<int> mport = metrics.Serve(
        absl::StrCat(host, ":", absl::GetFlag(FLAGS_metrics_port)));
    if (!mport.ok()) {
      std::fprintf(stderr, "coordinator: metrics: %s\n",
                   std::string(mport.status().message()).c_str());
      return 1;
    }
    std::printf("coordinator metrics on %s:%d\n", host.c_str(), *mport);
  }
  prometheus::Gauge& alive_workers = metrics.Gauge(
      "coordinator_alive_members", "members alive", {{"role", "worker"}});
  prometheus::Gauge& alive_servers = metrics.Gauge(
      "coordinator_alive_members", "members alive", {{"role", "server"}});
  prometheus::Gauge& running_jobs =
      metrics.Gauge("coordinator_running_jobs", "jobs in state RUNNING");
  prometheus::Gauge& points_reported =
      metrics.Gauge("coordinator_metric_points", "metric points of all jobs",
                    {{"kind", "reported"}});
  prometheus::Gauge& points_kept =
      metrics.Gauge("coordinator_metric_points", "metric points of all jobs",
                    {{"kind", "kept"}});

  // The dashboard (off unless --http_port): read-only, same token and TLS.
  std::unique_ptr<Dashboard> dashboard;
  std::unique_ptr<DashboardServer> dashboard_server;
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    DashboardOptions dashboard_options;
    dashboard_options.token = *token;
    dashboard_options.chart_js_path = absl::GetFlag(FLAGS_dashboard_chart_js);
    dashboard_options.secure = !tls.cert_file.empty();
    absl::StatusOr<std::unique_ptr<Dashboard>> d =
        Dashboard::Create(core->get(), dashboard_options);
    DashboardServerOptions http;
    http.host = host;
    http.port = absl::GetFlag(FLAGS_http_port);
    http.tls = tls;
    absl::StatusOr<std::unique_ptr<DashboardServer>> served =
        d.ok() ? DashboardServer::Start(d->get(), http)
               : absl::StatusOr<std::unique_ptr<DashboardServer>>(d.status());
    absl::Status written = served.ok() ? absl::OkStatus() : served.status();
    if (written.ok() && !absl::GetFlag(FLAGS_http_port_file).empty()) {
      written = WriteFileAtomically(FileSystem::Posix(),
                                    absl::GetFlag(FLAGS_http_port_file),
                                    absl::StrCat((*served)->port(), "\n"));
    }
    if (!written.ok()) {
      std::fprintf(stderr, "coordinator: %s\n",
                   std::string(written.message()).c_str());
      return 1;
    }
    dashboard = *std::move(d);
    dashboard_server = *std::move(served);
    std::printf("coordinator dashboard on %s\n",
                dashboard_server->url().c_str());
  }

  const std::string port_file = listen.port_file;
  if (!port_file.empty()) {
    absl::Status s = WriteFileAtomically(FileSystem::Posix(), port_file,
                                         absl::StrCat(port, "\n"));
    if (!s.ok()) {
      std::fprintf(stderr, "coordinator: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
  }
  if (absl::Status s = PublishAddress(host, port); !s.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("coordinator listening on %s:%d (data dir %s)\n", host.c_str(),
              port, data_dir.c_str());
  std::fflush(stdout);

  absl::Notification stop;
  std::thread ticker([&] {
    const absl::Duration period =
        absl::Milliseconds(options.heartbeat_interval_ms);
    while (!stop.WaitForNotificationWithTimeout(period)) {
      (*core)->Tick();
      int workers = 0, servers = 0, running = 0;
      const ListMembersResponse members = (*core)->ListMembers();
      for (const Member& m : members.members()) {
        if (m.state() != ALIVE) continue;
        (m.role() == WORKER ? workers : servers)++;
      }
      const ListJobsResponse jobs = (*core)->ListJobs();
      int64_t reported = 0, kept = 0;
      for (const JobRecord& j : jobs.jobs()) {
        running += j.state() == RUNNING;
        reported += j.metric_points_reported();
        kept += j.metric_points_kept();
      }
      points_reported.Set(static_cast<double>(reported));
      points_kept.Set(static_cast<double>(kept));
      alive_workers.Set(workers);
      alive_servers.Set(servers);
      running_jobs.Set(running);
    }
  });

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("coordinator: signal %d, shutting down\n", sig);
  std::fflush(stdout);
  stop.Notify();
  ticker.join();
  dashboard_server.reset();  // waits for the requests in flight
  (*core)->Shutdown();       // ends WatchJob streams
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  return 0;
}

}  // namespace
}  // namespace ps::coordinator

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The parameter-server coordinator: registers servers and workers, "
      "queues and runs jobs, stores their records and metrics.\n"
      "Usage: coordinator --data_dir=DIR [--port=0 --port_file=F] "
      "[--coordinator_file=F] [--http_port=0 --http_port_file=F] "
      "[--token_file=F | PS_TOKEN=...] [--tls_cert=C --tls_key=K "
      "[--tls_ca=CA]]");
  absl::ParseCommandLine(argc, argv);
  ps::DisableMutexDeadlockDetection();
  return ps::coordinator::Run();
}
