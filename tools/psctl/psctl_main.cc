// psctl: the one command users type. Talks to the coordinator over gRPC and
// starts/stops local clusters. Flags and subcommands use CLI11 (Abseil flags
// has no subcommands); the daemons use Abseil flags.
//
// Exit codes (stable, for scripts):
//   0 success; 1 the job ended FAILED/CANCELLED (with --wait) or an internal
//   error; 2 usage error; 3 coordinator unreachable; 4 no such job;
//   5 invalid input (bad job spec, bad argument).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/spec/config.h"
#include "common/spec/job_metric.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "tools/psctl/client.h"
#include "tools/psctl/deploy.h"
#include "tools/psctl/local_cluster.h"
#include "tools/psctl/report.h"
#include "tools/psctl/supervisor.h"

namespace ps::psctl {
namespace {

enum ExitCode {
  kOk = 0,
  kJobFailed = 1,
  kUsage = 2,
  kUnreachable = 3,
  kNotFound = 4,
  kInvalid = 5,
};

int ExitFor(const absl::Status& s) {
  if (s.ok()) return kOk;
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kUnreachable;
    case absl::StatusCode::kNotFound:
      return kNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return kInvalid;
    default:
      return kJobFailed;
  }
}

int Fail(const absl::Status& s) {
  std::cerr << "psctl: " << s.message() << "\n";
  return ExitFor(s);
}

std::atomic<bool> g_stop_supervisor{false};
void StopSupervisorOnSignal(int) { g_stop_supervisor = true; }

// `psctl cluster supervise`: runs until SIGTERM (`psctl cluster down`).
int RunSupervisor(const std::string& run_dir) {
  std::signal(SIGTERM, StopSupervisorOnSignal);
  std::signal(SIGINT, StopSupervisorOnSignal);
  SupervisorOptions options;
  options.run_dir = run_dir;
  std::printf("supervising the daemons of %s\n", run_dir.c_str());
  std::fflush(stdout);
  Supervise(options, g_stop_supervisor);
  return 0;
}

// The daemon's answer to the standard grpc.health.v1 Check, or why none came.
std::string HealthOf(const std::string& address) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(address);
  if (!channel.ok()) return "UNKNOWN";
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  grpc::ClientContext ctx;
  PrepareContext(&ctx, absl::Seconds(2), "");
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s =
      stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!s.ok()) return absl::StrCat("UNREACHABLE (", s.error_message(), ")");
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
      resp.status());
}

bool Ended(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

int JobExit(const JobRecord& r) {
  return r.state() == SUCCEEDED ? kOk : kJobFailed;
}

// The line `wait` ends with: the state and why, then the job's metric as
// `status` shows it ("test AUC 0.7712 (best ..., 4 evaluations)") when the
// coordinator answers.
std::string FinalLine(Client& client, const std::string& job_id,
                      const JobRecord& last) {
  std::string line =
      absl::StrCat("job ", job_id, " ", JobState_Name(last.state()),
                   last.reason().empty() ? "" : ": ", last.reason());
  JobData job;
  if (FetchJobMetrics(client, job_id, &job).ok()) {
    const JobSummary summary = Summarize(job);
    absl::StrAppend(&line, "; ", FormatMetricValues(summary.values));
    if (const std::string t = FormatTargetProgress(summary); !t.empty()) {
      absl::StrAppend(&line, "; ", t);
    }
  }
  return line;
}

// Follows a job with WatchJob until it ends, drawing the progress line. The
// record carries no test metric but accuracy, so the job's metrics
// (ShownMetrics) are fetched on their own, at most every few seconds.
int WaitForJob(Client& client, const std::string& job_id) {
  constexpr absl::Duration kMetricsEvery = absl::Seconds(5);
  const bool tty = isatty(STDOUT_FILENO);
  JobRecord last;
  absl::Time last_print = absl::InfinitePast();
  absl::Time last_fetch = absl::InfinitePast();
  std::vector<LiveMetric> live;
  const absl::Time start = absl::Now();
  for (int attempt = 0; attempt < 30; ++attempt) {
    grpc::ClientContext ctx;
    if (!client.token().empty())
      ctx.AddMetadata(kTokenMetadataKey, client.token());
    WatchJobRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>> stub =
        client.Stub();
    if (!stub.ok()) {
      if (tty) std::printf("\n");
      return Fail(stub.status());
    }
    auto reader = (*stub)->WatchJob(&ctx, req);
    JobRecord r;
    while (reader->Read(&r)) {
      attempt = 0;  // 30 tries in a row without an answer give up
      last = r;
      if (live.empty()) live = LatestValues({}, ShownMetrics(r.spec()));
      if (r.state() != PENDING &&
          (absl::Now() - last_fetch >= kMetricsEvery || Ended(r.state()))) {
        std::vector<const TestMetricInfo*> names;
        for (const LiveMetric& m : live) names.push_back(m.metric);
        // A failed fetch keeps the values shown: the bar goes on.
        if (absl::StatusOr<std::vector<LiveMetric>> v =
                FetchLiveMetrics(client, job_id, names);
            v.ok()) {
          live = *std::move(v);
        }
        last_fetch = absl::Now();
      }
      const double elapsed =
          r.start_time_ms() > 0
              ? (absl::ToUnixMillis(absl::Now()) - r.start_time_ms()) / 1000.0
              : absl::ToDoubleSeconds(absl::Now() - start);
      const std::string line =
          absl::StrCat(r.state() == PENDING ? "pending " : "",
                       ProgressLine(r, live, elapsed, 30));
      if (tty) {
        std::printf("\r\033[K%s", line.c_str());
        std::fflush(stdout);
      } else if (absl::Now() - last_print > absl::Seconds(10) ||
                 Ended(r.state())) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        last_print = absl::Now();
      }
      if (Ended(r.state())) break;
    }
    const absl::Status s = FromGrpcStatus(reader->Finish());
    if (Ended(last.state())) break;
    if (!s.ok() && !IsRetryable(s)) {
      if (tty) std::printf("\n");
      return Fail(s);
    }
    // The coordinator restarts (at its address, or at one its file names
    // now): watch again there.
    if (!client.Refresh()) absl::SleepFor(absl::Seconds(1));
  }
  if (tty) std::printf("\n");
  std::printf("%s\n", FinalLine(client, job_id, last).c_str());
  return Ended(last.state()) ? JobExit(last) : kUnreachable;
}

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::LocalTimeZone());
}

void PrintJob(const JobData& job) {
  const JobRecord& r = job.record;
  std::printf("job        %s (%s)\n", r.job_id().c_str(),
              r.spec().name().c_str());
  std::printf("state      %s%s%s\n", JobState_Name(r.state()).c_str(),
              r.reason().empty() ? "" : ": ", r.reason().c_str());
  std::printf(
      "consistency %s\n",
      ConsistencySpec::Model_Name(r.spec().consistency().model()).c_str());
  std::printf("submitted  %s\nstarted    %s\nended      %s\n",
              FormatTime(r.submit_time_ms()).c_str(),
              FormatTime(r.start_time_ms()).c_str(),
              FormatTime(r.end_time_ms()).c_str());
  std::printf("progress   step %lld/%lld, epoch %.2f\n",
              static_cast<long long>(r.global_step()),
              static_cast<long long>(r.total_steps()), r.epoch());
  if (const std::string d = FormatDataProgress(r); !d.empty()) {
    std::printf("data       %s\n", d.c_str());
  }
  std::printf("loss       %.4f\n", r.last_train_loss());
  // The job's metric first, then any other test metric it reported.
  const JobSummary summary = Summarize(job);
  std::printf("metric     %s\n", FormatMetricValues(summary.values).c_str());
  for (const MetricValues& v : summary.other_metrics) {
    std::printf("           %s\n", FormatMetricValues(v).c_str());
  }
  if (const std::string t = FormatTargetProgress(summary); !t.empty()) {
    std::printf("target     %s\n", t.c_str());
  }
  std::printf("throughput %.0f examples/s\n", r.examples_per_sec());
  if (const std::string t = FormatThinnedSeries(r); !t.empty()) {
    std::printf("series     %s\n", t.c_str());
  }
  std::printf("workers    %d, servers %d, events %lld\n", r.workers_size(),
              r.servers_size(), static_cast<long long>(r.num_events()));
  if (r.replicas_size() > 0) {
    // Replicated shards: the backups each shard has (and of them, those
    // still being built by a state transfer).
    std::string backups;
    for (int i = 0; i < r.replicas_size(); ++i) {
      const ShardReplicas& s = r.replicas(i);
      absl::StrAppend(
          &backups, i == 0 ? "" : ", ", s.backup_members_size(),
          s.building_members_size() > 0
              ? absl::StrCat(" (", s.building_members_size(), " building)")
              : "");
    }
    std::printf("replicas   factor %d, backups per shard: %s\n",
                r.spec().replication().factor(), backups.c_str());
  }
}

struct CompareFlags {
  std::vector<std::string> job_ids;
  std::string metric;
  double target = 0;
  std::string out_prefix = "compare";
};

int RunCompare(Client& c, const CompareFlags& flags) {
  std::vector<JobData> jobs(flags.job_ids.size());
  for (size_t i = 0; i < flags.job_ids.size(); ++i) {
    if (absl::Status s = FetchJobData(c, flags.job_ids[i], &jobs[i]); !s.ok()) {
      return Fail(s);
    }
  }
  absl::StatusOr<ComparisonMetric> cmp =
      ChooseComparisonMetric(jobs, flags.metric, flags.target);
  if (!cmp.ok()) return Fail(cmp.status());
  std::vector<JobSummary> rows;
  for (const JobData& j : jobs) {
    rows.push_back(Summarize(j, *cmp->metric, cmp->target));
  }
  std::printf("%s", FormatComparison(rows, *cmp).c_str());
  for (const JobData& j : jobs) {
    if (const std::string t = FormatThinnedSeries(j.record); !t.empty()) {
      std::printf("%s: %s\n", j.record.job_id().c_str(), t.c_str());
    }
  }
  const std::string& out = flags.out_prefix;
  if (absl::Status s = WritePlots(jobs, *cmp, out); !s.ok()) {
    std::fprintf(stderr, "psctl: plot not written: %s\n",
                 std::string(s.message()).c_str());
    return ExitFor(s);
  }
  std::printf("plots: %s.png %s.svg (gnuplot script %s.gp)\n", out.c_str(),
              out.c_str(), out.c_str());
  return kOk;
}

// Every option's value once the command line is parsed.
struct Flags {
  GlobalFlags g;
  // cluster up
  LocalClusterOptions up;
  std::vector<std::string> worker_flags, server_flags, coordinator_flags;
  std::string restart = "on-failure";
  // the job commands
  std::string job_file, job_id, format = "csv";
  bool wait = false;
  bool include_superseded = false;
  CompareFlags cmp;
};

// A subcommand that needs no coordinator, and one that talks to it.
struct LocalCommand {
  CLI::App* app;
  int (*run)(const Flags&);
};
struct CoordinatorCommand {
  CLI::App* app;
  int (*run)(Client&, const Flags&);
};

int ClusterUpCommand(const Flags& f) {
  LocalClusterOptions up_opts = f.up;
  up_opts.run_dir = f.g.run_dir;
  up_opts.tls = f.g.tls;
  up_opts.worker_flags = f.worker_flags;
  up_opts.server_flags = f.server_flags;
  up_opts.coordinator_flags = f.coordinator_flags;
  up_opts.supervise = f.restart == "on-failure";
  std::printf("starting %d servers and %d workers in %s ...\n", up_opts.servers,
              up_opts.workers, f.g.run_dir.c_str());
  absl::StatusOr<std::string> addr = ClusterUp(up_opts);
  if (!addr.ok()) return Fail(addr.status());
  std::printf("cluster up: coordinator %s, logs in %s/logs\n", addr->c_str(),
              f.g.run_dir.c_str());
  if (up_opts.dashboard_port >= 0) {
    absl::StatusOr<std::string> url =
        RecordedDashboard(f.g.run_dir, !up_opts.tls.cert_file.empty());
    if (!url.ok()) return Fail(url.status());
    // As Jupyter does: the link carries the token (run_dir/token, 0600).
    absl::StatusOr<std::string> token =
        ReadClusterToken(f.g.run_dir + "/token", /*env_token=*/nullptr);
    std::printf("dashboard: %s%s\n", url->c_str(),
                token.ok() && !token->empty()
                    ? absl::StrCat("?token=", *token).c_str()
                    : "");
  }
  return kOk;
}

int ClusterDownCommand(const Flags& f) {
  absl::StatusOr<std::vector<std::string>> stopped = ClusterDown(f.g.run_dir);
  if (!stopped.ok()) return Fail(stopped.status());
  std::printf("stopped %zu processes\n", stopped->size());
  return kOk;
}

int ClusterSuperviseCommand(const Flags& f) {
  return RunSupervisor(f.g.run_dir);
}

// The local cluster's processes (none printed when there is none).
void PrintLocalProcesses(const std::string& run_dir) {
  const auto procs = ClusterProcesses(run_dir);
  if (procs.empty()) return;
  const std::map<std::string, int> restarts = RestartCounts(run_dir);
  std::printf("%-14s %8s %-6s %8s %s\n", "process", "pid", "state", "restarts",
              "log");
  for (const ProcessInfo& p : procs) {
    auto r = restarts.find(p.name);
    std::printf("%-14s %8d %-6s %8d %s\n", p.name.c_str(), p.pid,
                p.alive ? "up" : "DOWN", r == restarts.end() ? 0 : r->second,
                p.log.c_str());
  }
  std::printf("\n");
}

int ClusterStatusCommand(const Flags& f) {
  PrintLocalProcesses(f.g.run_dir);
  absl::StatusOr<Client> c = Client::Connect(f.g);
  if (!c.ok()) return Fail(c.status());
  ListMembersResponse members;
  if (absl::Status s = c->Call(&CoordinatorService::Stub::ListMembers,
                               ListMembersRequest(), &members);
      !s.ok()) {
    return Fail(s);
  }
  const int64_t now = absl::ToUnixMillis(absl::Now());
  std::printf("coordinator %s: %s\n\n", c->address().c_str(),
              HealthOf(c->address()).c_str());
  // Workers' BLAS core and start-up GEMM probe: a slow one is a
  // straggler in waiting.
  std::printf("%-6s %-7s %-22s %-8s %-11s %9s %-6s %-15s %s\n", "id", "role",
              "address", "device", "BLAS core", "GEMM GF/s", "state",
              "last heartbeat", "health");
  for (const Member& m : members.members()) {
    const std::string beat =
        absl::StrFormat("%.1fs ago", (now - m.last_heartbeat_ms()) / 1000.0);
    const std::string gemm =
        m.gemm_gflops() > 0 ? absl::StrFormat("%.1f", m.gemm_gflops()) : "-";
    std::printf("%-6lld %-7s %-22s %-8s %-11s %9s %-6s %-15s %s\n",
                static_cast<long long>(m.member_id()),
                MemberRole_Name(m.role()).c_str(), m.address().c_str(),
                m.device().c_str(),
                m.blas_core().empty() ? "-" : m.blas_core().c_str(),
                gemm.c_str(), MemberState_Name(m.state()).c_str(), beat.c_str(),
                m.address().empty() || m.state() != ALIVE
                    ? "-"
                    : HealthOf(m.address()).c_str());
  }
  return kOk;
}

int SubmitCommand(Client& c, const Flags& f) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(f.job_file);
  if (!spec.ok()) {
    // A missing or unreadable spec file is bad input, not a missing job.
    std::cerr << "psctl: " << spec.status().message() << "\n";
    return kInvalid;
  }
  SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  SubmitJobResponse resp;
  if (absl::Status s = c.Call(&CoordinatorService::Stub::SubmitJob, req, &resp);
      !s.ok()) {
    return Fail(s);
  }
  std::printf("%s\n", resp.job_id().c_str());
  std::fflush(stdout);
  return f.wait ? WaitForJob(c, resp.job_id()) : kOk;
}

int WaitCommand(Client& c, const Flags& f) { return WaitForJob(c, f.job_id); }

// One line per job, with the job's metric by name (the first of
// ShownMetrics: its target's, else its head's) and its latest value.
int ListCommand(Client& c, const Flags&) {
  ListJobsResponse resp;
  if (absl::Status s =
          c.Call(&CoordinatorService::Stub::ListJobs, ListJobsRequest(), &resp);
      !s.ok()) {
    return Fail(s);
  }
  std::printf("%-16s %-18s %-10s %-5s %10s %8s  %s\n", "job", "name", "state",
              "model", "step", "loss", "metric");
  for (const JobRecord& r : resp.jobs()) {
    const TestMetricInfo* metric = ShownMetrics(r.spec()).front();
    LiveMetric value = LatestValues({}, {metric}).front();
    if (absl::StatusOr<std::vector<LiveMetric>> v =
            FetchLiveMetrics(c, r.job_id(), {metric});
        v.ok()) {
      value = v->front();
    }
    if (metric == &AccuracyMetric() && std::isnan(value.value) &&
        r.last_test_accuracy() > 0) {
      value.value = r.last_test_accuracy();
    }
    std::printf(
        "%-16s %-18s %-10s %-5s %10lld %8.4f  %s\n", r.job_id().c_str(),
        r.spec().name().substr(0, 18).c_str(), JobState_Name(r.state()).c_str(),
        ConsistencySpec::Model_Name(r.spec().consistency().model()).c_str(),
        static_cast<long long>(r.global_step()), r.last_train_loss(),
        FormatLiveMetric(value).c_str());
  }
  return kOk;
}

int StatusCommand(Client& c, const Flags& f) {
  JobData job;
  if (absl::Status s = FetchJobMetrics(c, f.job_id, &job); !s.ok()) {
    return Fail(s);
  }
  PrintJob(job);
  // A running job's sparse tables, per shard, as the shards report them.
  ExplainJobRequest ereq;
  ereq.set_job_id(f.job_id);
  ExplainJobResponse eresp;
  if (job.record.state() == RUNNING &&
      c.Call(&CoordinatorService::Stub::ExplainJob, ereq, &eresp).ok()) {
    std::printf(
        "%s", FormatSparseTables({eresp.shards().begin(), eresp.shards().end()})
                  .c_str());
  }
  return kOk;
}

int CancelCommand(Client& c, const Flags& f) {
  CancelJobRequest req;
  req.set_job_id(f.job_id);
  req.set_reason("cancelled with psctl");
  CancelJobResponse resp;
  if (absl::Status s = c.Call(&CoordinatorService::Stub::CancelJob, req, &resp);
      !s.ok()) {
    return Fail(s);
  }
  std::printf("job %s %s\n", f.job_id.c_str(),
              JobState_Name(resp.state()).c_str());
  return kOk;
}

int MetricsCommand(Client& c, const Flags& f) {
  // The coordinator renders CSV and JSON
  // (server/coordinator/metrics_format.h) so every client exports the same
  // columns.
  GetMetricsRequest req;
  req.set_job_id(f.job_id);
  req.set_format(f.format);
  req.set_include_superseded(f.include_superseded);
  GetMetricsResponse resp;
  if (absl::Status s =
          c.Call(&CoordinatorService::Stub::GetMetrics, req, &resp);
      !s.ok()) {
    return Fail(s);
  }
  std::printf("%s", resp.text().c_str());
  if (!resp.text().empty() && !resp.text().ends_with("\n")) std::printf("\n");
  std::fflush(stdout);
  // The job's metric, on stderr so that stdout stays CSV or JSON.
  JobData job;
  if (absl::Status s = FetchJobMetrics(c, f.job_id, &job); !s.ok()) {
    return Fail(s);
  }
  const JobSummary summary = Summarize(job);
  std::string line = FormatMetricValues(summary.values);
  if (const std::string t = FormatTargetProgress(summary); !t.empty()) {
    absl::StrAppend(&line, "; ", t);
  }
  std::fprintf(stderr, "job metric: %s\n", line.c_str());
  if (const std::string t = FormatThinnedSeries(job.record); !t.empty()) {
    std::fprintf(stderr, "series: %s\n", t.c_str());
  }
  return kOk;
}

int EventsCommand(Client& c, const Flags& f) {
  GetEventsRequest req;
  req.set_job_id(f.job_id);
  GetEventsResponse resp;
  if (absl::Status s = c.Call(&CoordinatorService::Stub::GetEvents, req, &resp);
      !s.ok()) {
    return Fail(s);
  }
  for (const JobEvent& e : resp.events()) {
    std::printf("%s  %-16s %s\n", FormatTime(e.time_ms()).c_str(),
                e.kind().c_str(), e.message().c_str());
  }
  return kOk;
}

int ExplainCommand(Client& c, const Flags& f) {
  ExplainJobRequest req;
  req.set_job_id(f.job_id);
  ExplainJobResponse resp;
  if (absl::Status s =
          c.Call(&CoordinatorService::Stub::ExplainJob, req, &resp);
      !s.ok()) {
    return Fail(s);
  }
  std::printf("%s", resp.text().c_str());
  if (!resp.text().ends_with("\n")) std::printf("\n");
  return kOk;
}

int CompareCommand(Client& c, const Flags& f) { return RunCompare(c, f.cmp); }

void AddGlobalOptions(CLI::App& app, GlobalFlags& g) {
  app.add_option("--coordinator", g.coordinator,
                 "Coordinator host:port (default: --coordinator_file, else "
                 "$PS_COORDINATOR, else the local cluster in --run_dir)");
  app.add_option("--coordinator_file", g.coordinator_file,
                 "File holding the coordinator's host:port (the "
                 "coordinator's own --coordinator_file; read at each "
                 "command, so a coordinator that moved is found)");
  app.add_option("--run_dir", g.run_dir,
                 "Local cluster directory (pids, logs, ports, token)")
      ->capture_default_str();
  app.add_option("--token_file", g.token_file,
                 "File holding the cluster token (default: $PS_TOKEN, else "
                 "<run_dir>/token)");
  app.add_option("--timeout", g.timeout_s, "Seconds to wait for each RPC")
      ->capture_default_str();
  app.add_option("--tls_cert", g.tls.cert_file,
                 "PEM client certificate (with --tls_key) for mutual TLS; "
                 "`cluster up` gives it to every daemon as its identity");
  app.add_option("--tls_key", g.tls.key_file, "PEM private key of --tls_cert");
  app.add_option("--tls_ca", g.tls.ca_file,
                 "PEM CA bundle: use TLS and verify the peer against it "
                 "(`cluster up`: the daemons require client certificates)");
}

// cluster up/down/supervise/status
std::vector<LocalCommand> AddClusterCommands(CLI::App& app, Flags& f) {
  CLI::App* cluster =
      app.add_subcommand("cluster", "Start, stop or inspect a local cluster");
  cluster->require_subcommand(1);
  CLI::App* up = cluster->add_subcommand(
      "up", "Start a coordinator, N servers and M workers on this machine");
  up->add_option("--servers", f.up.servers, "Parameter-server shards")
      ->capture_default_str();
  up->add_option("--workers", f.up.workers,
                 "ps_worker daemons (0: only workers that join by themselves, "
                 "e.g. Python ones)")
      ->capture_default_str();
  up->add_option("--device", f.up.device,
                 "Worker device: cpu, cuda or cuda:N (default: a GPU if one "
                 "works, else the CPU)");
  up->add_option("--cpu_threads", f.up.cpu_threads,
                 "BLAS threads per CPU worker")
      ->capture_default_str();
  up->add_option("--bin_dir", f.up.bin_dir,
                 "Directory with coordinator, ps_server, ps_worker (default: "
                 "next to psctl)");
  up->add_option("--worker_flag", f.worker_flags,
                 "Extra flag for every worker (repeatable). With more "
                 "servers and workers than CPU cores, workers get "
                 "--wait_spin_us=0 first (a --worker_flag overrides it)");
  up->add_option("--server_flag", f.server_flags,
                 "Extra flag for every server (repeatable)");
  up->add_option("--dashboard_port", f.up.dashboard_port,
                 "The coordinator's web dashboard (a page and its JSON API, "
                 "behind the cluster token): 0 picks a free port, -1 off; "
                 "its address is printed")
      ->capture_default_str();
  up->add_option("--coordinator_flag", f.coordinator_flags,
                 "Extra flag for the coordinator (repeatable)");
  up->add_option("--restart", f.restart,
                 "on-failure: a supervisor starts a daemon that died again, "
                 "with its identity and data directory, with backoff "
                 "(events in <run_dir>/events.log); no: it stays down")
      ->check(CLI::IsMember({"on-failure", "no"}))
      ->capture_default_str();
  CLI::App* down = cluster->add_subcommand("down", "Stop the local cluster");
  // Started by `cluster up`; not for users.
  CLI::App* supervise = cluster->add_subcommand(
      "supervise", "Restart the local cluster's daemons that die");
  supervise->group("");
  CLI::App* status = cluster->add_subcommand(
      "status",
      "Members and their health (workers: BLAS core and GEMM probe), and "
      "the local processes");
  return {{up, ClusterUpCommand},
          {supervise, ClusterSuperviseCommand},
          {down, ClusterDownCommand},
          {status, ClusterStatusCommand}};
}

// A subcommand taking one job id.
CLI::App* AddJobCommand(CLI::App& app, const std::string& name,
                        const std::string& help, std::string& job_id) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->add_option("job", job_id, "Job id")->required();
  return sub;
}

std::vector<CoordinatorCommand> AddJobCommands(CLI::App& app, Flags& f) {
  CLI::App* submit =
      app.add_subcommand("submit", "Submit a job spec (text format)");
  submit->add_option("job", f.job_file, "Job spec .pbtxt")->required();
  submit->add_flag("--wait", f.wait,
                   "Follow the job with a progress bar until it ends (as "
                   "`wait` does)");
  CLI::App* list = app.add_subcommand(
      "list",
      "List jobs, each with its test metric by name (auc, logloss, rmse or "
      "acc: its target's, else its head's) and last value");
  CLI::App* status = AddJobCommand(
      app, "status",
      "Show one job, with its test metric (docs/metrics.md) and its target",
      f.job_id);
  CLI::App* wait = AddJobCommand(
      app, "wait",
      "Follow a job until it ends: a progress line with its test metrics by "
      "name (docs/metrics.md), then its state and metric",
      f.job_id);
  CLI::App* cancel = AddJobCommand(app, "cancel", "Cancel a job", f.job_id);
  CLI::App* metrics = AddJobCommand(
      app, "metrics",
      "Print a job's metric series on stdout, and its test metric's last and "
      "best value (and target) in one line on stderr",
      f.job_id);
  metrics->add_option("--format", f.format, "csv or json")
      ->check(CLI::IsMember({"csv", "json"}))
      ->capture_default_str();
  metrics->add_flag(
      "--include_superseded", f.include_superseded,
      "Also the points of steps a rollback made the job compute again, as "
      "reported before it (the incarnation column tells them apart)");
  CLI::App* events =
      AddJobCommand(app, "events", "Print a job's events", f.job_id);
  CLI::App* explain = AddJobCommand(
      app, "explain",
      "Why a job is not moving (or slow): shards, barriers, clocks, "
      "heartbeats, each worker's GEMM probe and BLAS core",
      f.job_id);
  CLI::App* compare = app.add_subcommand(
      "compare",
      "Compare jobs in their test metric (AUC, logloss, RMSE or accuracy: "
      "docs/metrics.md): a table, and plots <out>.png and <out>.svg (with "
      "<out>.gp and its data <out>-<job>-<m>.dat, m = acc, auc, logloss or "
      "rmse, and <out>-<job>-loss.dat, to replot). Jobs judged by different "
      "metrics are refused unless --metric names one");
  compare->add_option("jobs", f.cmp.job_ids, "Job ids")->required();
  compare->add_option("--metric", f.cmp.metric,
                      "Compare in this metric: auc, logloss, rmse or accuracy "
                      "(default: the jobs' own, which must agree)");
  compare->add_option(
      "--target", f.cmp.target,
      "Target in the metric, met at >= for auc and accuracy, <= for logloss "
      "and rmse (default: the first job's target in it, from its spec's "
      "target or target_accuracy)");
  compare->add_option("--out", f.cmp.out_prefix, "Plot file prefix")
      ->capture_default_str();
  return {{submit, SubmitCommand},  {wait, WaitCommand},
          {list, ListCommand},      {status, StatusCommand},
          {cancel, CancelCommand},  {metrics, MetricsCommand},
          {events, EventsCommand},  {explain, ExplainCommand},
          {compare, CompareCommand}};
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{
      "psctl: submit, watch and compare training jobs on a parameter-server "
      "cluster, and run a local one.\n"
      "Exit codes: 0 ok, 1 job failed/cancelled or internal error, 2 usage, "
      "3 coordinator unreachable, 4 no such job, 5 invalid input."};
  app.require_subcommand(1);
  Flags f;
  AddGlobalOptions(app, f.g);
  const std::vector<LocalCommand> local = AddClusterCommands(app, f);
  const std::vector<CoordinatorCommand> remote = AddJobCommands(app, f);
  AddDeployCommands(app);  // slurm submit, k8s render (tools/psctl/deploy.h)

  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // the deploy commands end here
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  if (const char* env = std::getenv("PS_COORDINATOR"))
    f.g.env_coordinator = env;
  if (const char* env = std::getenv("PS_TOKEN")) f.g.env_token = env;

  for (const LocalCommand& command : local) {
    if (*command.app) return command.run(f);
  }
  absl::StatusOr<Client> c = Client::Connect(f.g);
  if (!c.ok()) return Fail(c.status());
  for (const CoordinatorCommand& command : remote) {
    if (*command.app) return command.run(*c, f);
  }
  return kUsage;
}

}  // namespace ps::psctl

int main(int argc, char** argv) { return ps::psctl::Main(argc, argv); }
