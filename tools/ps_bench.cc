// ps_bench: data-plane throughput of the parameter server on loopback, next
// to the ceilings measured in the same run on the same bytes.
//
//   ps_bench --seconds_per_case=1.5 --out=/tmp/ps_bench.md
//
// For each dense model size x shards x workers it runs in-process ps_server
// shards (ShardStore + ParameterService on 127.0.0.1:0) and workers, each
// with its own ParameterClient doing ASP steps (tools/bench_worker.h): push
// every tensor's gradient with the end of step and get every tensor's new
// weights back in its answer (EndStepAndPull, as workers do; --fused=false:
// a separate pull, then the pushes and the end of step). Workers are threads
// of this process, or with --worker_processes processes of their own (this
// binary run again, tools/worker_processes.h), as deployments run them.
// Reported: push+pull GB/s (payload bytes of both directions) of all
// workers and of each, the median step latency and, where the workers do
// not share their process with shards, the workers' CPU time per step.
// Ceilings: a plain TCP socket ping-pong, and gRPC echoing raw
// grpc::ByteBuffer slices (no protobuf) on 1 and 2 connections, both
// carrying the same bytes in the same piece size as the parameter client
// (tools/ps_bench_ceilings.h). With --pairs=N, the 1-shard 1-worker case and
// the raw echo (same connections) are measured in turn N times per size and
// the ratio summarised by its median and range: loopback figures on a small
// machine drift between measurements. Last: server-side SGD apply GB/s (the
// optimizer loop, and the whole shard Push path) vs memcpy.
//
// --servers=HOST:PORT,... measures running ps_server processes instead (one
// shard each; the jobs are set up and torn down through their RPCs), over
// whatever network lies between, and skips the ceilings and the apply,
// which would measure this host. --ceilings=false skips the ceilings only.
//
// --mode=sparse measures rows of one sparse table instead (in-process
// shards or --servers; workers as threads or --worker_processes): per dim of
// --sparse_dims x shards x workers, steps that push a gradient for each row of
// a batch of
// --sparse_batch unique Zipf(1.05) keys from --sparse_key_space and pull
// the next batch's rows, reported as rows/s and GB/s
// (tools/ps_bench_sparse.h), each case next to the dense path's GB/s for
// the same bytes per step.
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/platform/process.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/wire/placement.h"
#include "server/coordinator/shard_client.h"
#include "server/shard/parameter_service.h"
#include "server/shard/shard_store.h"
#include "tools/bench_worker.h"
#include "tools/ps_bench_ceilings.h"
#include "tools/ps_bench_remote.h"
#include "tools/ps_bench_sparse.h"
#include "tools/worker_processes.h"

ABSL_FLAG(std::string, sizes, "4K,1M,16M,64M,256M",
          "Dense model sizes (bytes of fp32 weights; K/M suffixes).");
ABSL_FLAG(std::string, shards, "1,2", "Numbers of shards.");
ABSL_FLAG(std::string, workers, "1,2,4",
          "Numbers of workers (threads of this process, or processes with "
          "--worker_processes).");
ABSL_FLAG(bool, worker_processes, false,
          "Run each worker as a process of its own (this binary, started "
          "again with --worker_child), as deployments do, instead of a "
          "thread of this one; each reports its figures and its CPU time "
          "to this process.");
ABSL_FLAG(std::string, worker_child, "",
          "Internal (set by --worker_processes): JOB_ID,WORKER_ID,BYTES of "
          "the one worker this process runs against --servers, speaking "
          "to its parent on stdin/stdout (--mode=sparse: BYTES is 0 and "
          "the worker's dim the first of --sparse_dims).");
ABSL_FLAG(double, seconds_per_case, 1.5,
          "Measuring time per case (after one warm-up step).");
ABSL_FLAG(int, min_steps, 3, "At least this many measured steps per worker.");
ABSL_FLAG(int, connections, 2, "TCP connections per shard (client).");
ABSL_FLAG(int64_t, max_request_bytes, 4 << 20,
          "Payload bytes per Push/Pull message.");
ABSL_FLAG(std::string, out, "", "Also write the markdown report here.");
ABSL_FLAG(int, pairs, 0,
          "Also measure the 1-shard, 1-worker case and the raw gRPC echo in "
          "turn this many times per size, and give the median ratio and its "
          "range (0: off).");
ABSL_FLAG(bool, ceilings, true,
          "Measure the TCP and raw gRPC ceilings first (false: only the ps "
          "cases and the server-side apply, without the ratios; the "
          "ceilings' large buffers also warm glibc's dynamic allocator "
          "thresholds up, which a daemon does not get).");
ABSL_FLAG(std::string, servers, "",
          "Comma-separated host:port of running ps_servers to measure instead "
          "of shards in this process: one shard each, in this order "
          "(--shards is ignored). Jobs are set up and torn down through "
          "their SetupJob/TeardownJob calls, with the cluster token of "
          "--token_file or $PS_TOKEN. The ceilings, measured on loopback in "
          "this process, are skipped.");
ABSL_FLAG(int, replication, 1,
          "With --servers: replicas of each shard (JobSpec.replication): "
          "shard i's backups on the next servers, as the coordinator places "
          "them (common/wire/placement.h), so at most the number of "
          "servers. Every push is then acknowledged once its backups hold "
          "it: the cost of replication.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token for --servers (else $PS_TOKEN).");
ABSL_FLAG(bool, fused, true,
          "Steps as the worker runs them: the gradients pushed with the end "
          "of step, whose answer carries the next step's weights (one round "
          "trip). False: pull, then push and end of step (two).");

ABSL_FLAG(std::string, mode, "dense",
          "dense: the dense model sizes (--sizes); sparse: rows of one "
          "sparse table by key (--sparse_dims, --sparse_batch, "
          "--sparse_key_space, --sparse_dtype; tools/ps_bench_sparse.h), "
          "workers as threads, without the ceilings.");
ABSL_FLAG(std::string, sparse_dims, "16,64",
          "--mode=sparse: the table's dims, one case each.");
ABSL_FLAG(int, sparse_batch, 4096,
          "--mode=sparse: unique keys per step (Zipf(1.05) draws).");
ABSL_FLAG(int64_t, sparse_key_space, 10000000,
          "--mode=sparse: keys are drawn from [1, this].");
ABSL_FLAG(int, sparse_predraw, 4096,
          "--mode=sparse: batches each worker draws before it measures (so "
          "the timed loop does not run the key generator, the benchmark's "
          "work; the peer's driver does the same); past them, and with 0, "
          "a batch is drawn while the step before it is in flight.");
ABSL_FLAG(std::string, sparse_dtype, "fp32",
          "--mode=sparse: the table's dtype on the wire: fp32, fp16, bf16.");

namespace ps {
namespace {

using bench::BenchWorker;
using bench::BenchWorkerOptions;
using bench::WorkerFigures;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string SizeName(int64_t b) {
  if (b >= (1 << 20)) return absl::StrCat(b >> 20, " MB");
  return absl::StrCat(b >> 10, " KB");
}

double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// --- In-process shards -------------------------------------------------

struct Shard {
  std::unique_ptr<server::ShardStore> store;
  std::unique_ptr<server::ParameterServiceAdapter> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::vector<std::unique_ptr<Shard>> StartShards(int n) {
  std::vector<std::unique_ptr<Shard>> shards;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Shard>();
    s->store = *server::ShardStore::Create({});
    server::ParameterServiceOptions options;
    options.wait_threads = 4;
    s->service =
        *server::ParameterServiceAdapter::Create(s->store.get(), options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.SetMaxReceiveMessageSize(kDefaultMaxMessageBytes);
    builder.SetMaxSendMessageSize(kDefaultMaxMessageBytes);
    builder.RegisterService(s->service->service());
    s->server = builder.BuildAndStart();
    s->address = absl::StrCat("127.0.0.1:", port);
    shards.push_back(std::move(s));
  }
  return shards;
}

void StopShards(std::vector<std::unique_ptr<Shard>>& shards) {
  for (auto& s : shards) {
    s->store->Shutdown();
    s->server->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(2));
    s->service->Stop();
  }
  shards.clear();
}

struct CaseResult {
  double gbps = 0;  // all workers
  double worker_gbps_min = 0, worker_gbps_max = 0;
  double step_ms = 0;  // median over the workers' median step times
  double steps_per_s = 0;
  double cpu_ms_per_step = -1;  // the workers' CPU; < 0: not measured
  std::string error;
};

using bench::RemoteServers;

// The workers' options but for their id.
BenchWorkerOptions WorkerOptions(const std::vector<std::string>& addresses,
                                 const std::string& token,
                                 const std::string& job_id, int64_t bytes) {
  BenchWorkerOptions o;
  o.addresses = addresses;
  o.token = token;
  o.job_id = job_id;
  o.bytes = bytes;
  o.connections = absl::GetFlag(FLAGS_connections);
  o.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  o.fused = absl::GetFlag(FLAGS_fused);
  o.seconds = absl::GetFlag(FLAGS_seconds_per_case);
  o.min_steps = absl::GetFlag(FLAGS_min_steps);
  return o;
}

// Worker threads of this process, started together once all are warm.
// cpu_seconds: this process's CPU time while they measured.
std::vector<WorkerFigures> RunThreads(const BenchWorkerOptions& options,
                                      int num_workers, double* cpu_seconds) {
  std::vector<WorkerFigures> figures(num_workers);
  std::atomic<int> ready{0};
  absl::Notification go;
  std::vector<std::thread> threads;
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back([&, w] {
      BenchWorkerOptions mine = options;
      mine.worker_id = w + 1;
      absl::StatusOr<std::unique_ptr<BenchWorker>> worker =
          BenchWorker::Start(mine);
      ready.fetch_add(1);
      go.WaitForNotification();
      if (!worker.ok()) {
        figures[w].error = worker.status().ToString();
        return;
      }
      figures[w] = (*worker)->Run();
    });
  }
  while (ready.load() < num_workers) absl::SleepFor(absl::Milliseconds(1));
  const double cpu0 = ProcessCpuSeconds();
  go.Notify();
  for (auto& t : threads) t.join();
  *cpu_seconds = ProcessCpuSeconds() - cpu0;
  return figures;
}

// Worker processes: this binary again, with --worker_child. The token
// travels in their environment, never on a command line.
absl::StatusOr<std::vector<WorkerFigures>> RunProcesses(
    const BenchWorkerOptions& options, int num_workers) {
  std::vector<std::vector<std::string>> argvs;
  for (int w = 1; w <= num_workers; ++w) {
    argvs.push_back({
        "/proc/self/exe",
        absl::StrCat("--worker_child=", options.job_id, ",", w, ",",
                     options.bytes),
        absl::StrCat("--servers=", absl::StrJoin(options.addresses, ",")),
        absl::StrCat("--connections=", options.connections),
        absl::StrCat("--max_request_bytes=", options.max_request_bytes),
        absl::StrCat("--fused=", options.fused ? "true" : "false"),
        absl::StrCat("--seconds_per_case=", options.seconds),
        absl::StrCat("--min_steps=", options.min_steps),
    });
  }
  std::vector<std::string> env = {"PS_TOKEN=" + options.token};
  PS_ASSIGN_OR_RETURN(std::unique_ptr<bench::WorkerProcesses> children,
                      bench::WorkerProcesses::Start(argvs, env));
  PS_RETURN_IF_ERROR(children->WaitReady(absl::Now() + absl::Minutes(2)));
  PS_RETURN_IF_ERROR(children->Go());
  // Each measures `seconds`, and each step has a bounded wait.
  const absl::Time deadline =
      absl::Now() + absl::Seconds(options.seconds) + absl::Minutes(3);
  PS_ASSIGN_OR_RETURN(std::vector<std::string> lines,
                      children->Results(deadline));
  std::vector<WorkerFigures> figures;
  for (const std::string& line : lines) {
    PS_ASSIGN_OR_RETURN(WorkerFigures f, bench::ParseFigures(line));
    figures.push_back(std::move(f));
  }
  return figures;
}

// The case's figures from its workers'. GB/s: all the workers' bytes over
// the longest worker's window (they start together).
CaseResult Summarize(int64_t bytes, const std::vector<WorkerFigures>& figures,
                     double shared_cpu_seconds) {
  CaseResult r;
  int64_t steps = 0;
  double window = 0, cpu = 0;
  bool cpu_known = true;
  std::vector<double> medians, per_worker;
  for (const WorkerFigures& f : figures) {
    if (!f.error.empty() && r.error.empty()) r.error = f.error;
    steps += f.steps;
    window = std::max(window, f.seconds);
    medians.push_back(f.median_step_ms);
    per_worker.push_back(f.seconds > 0 ? 2.0 * bytes * f.steps / f.seconds / 1e9
                                       : 0);
    if (f.cpu_seconds < 0) cpu_known = false;
    cpu += f.cpu_seconds;
  }
  if (window > 0) {
    r.gbps = 2.0 * bytes * steps / window / 1e9;
    r.steps_per_s = steps / window;
  }
  if (!per_worker.empty()) {
    r.worker_gbps_min = *std::min_element(per_worker.begin(), per_worker.end());
    r.worker_gbps_max = *std::max_element(per_worker.begin(), per_worker.end());
  }
  r.step_ms = Median(medians);
  if (!cpu_known) cpu = shared_cpu_seconds;
  if (cpu >= 0 && steps > 0) r.cpu_ms_per_step = 1e3 * cpu / steps;
  return r;
}

// A job set up on in-process shards (started here) or on --servers, and
// torn down (and the shards stopped) with this object. error(): the setup
// failed (what was set up is torn down already).
class BenchJob {
 public:
  BenchJob(const JobSpec& spec, int num_shards, int num_workers,
           RemoteServers* remote)
      : remote_(remote) {
    if (remote != nullptr) {
      addresses_ = remote->addresses;
      num_shards = addresses_.size();
      // Ids of this run only: another run's jobs may be on the servers.
      static int cases = 0;
      job_id_ = absl::StrCat("psbench-", getpid(), "-", ++cases);
    } else {
      shards_ = StartShards(num_shards);
      for (auto& s : shards_) addresses_.push_back(s->address);
    }
    for (int s = 0; s < num_shards; ++s) {
      SetupJobRequest r;
      r.set_job_id(job_id_);
      *r.mutable_spec() = spec;
      r.set_shard_index(s);
      r.set_num_shards(num_shards);
      for (int w = 1; w <= num_workers; ++w) r.add_worker_ids(w);
      const absl::Status st = remote != nullptr
                                  ? bench::SetUpRemoteShard(*remote, r)
                                  : shards_[s]->store->SetupJob(r).status();
      if (!st.ok()) {
        // (The shard client's message names the server already.)
        error_ = absl::StrCat("SetupJob: ", st.message());
        TearDown();
        return;
      }
      ++set_up_;
    }
  }
  ~BenchJob() { TearDown(); }

  const std::vector<std::string>& addresses() const { return addresses_; }
  const std::string& job_id() const { return job_id_; }
  const std::string& error() const { return error_; }

 private:
  void TearDown() {
    if (remote_ == nullptr) {
      StopShards(shards_);
      return;
    }
    for (int s = 0; s < set_up_; ++s) {
      TeardownJobRequest t;
      t.set_job_id(job_id_);
      if (absl::Status st = remote_->shards->TeardownJob(addresses_[s], t);
          !st.ok()) {
        std::fprintf(stderr, "warning: TeardownJob %s on %s: %s\n",
                     job_id_.c_str(), addresses_[s].c_str(),
                     std::string(st.message()).c_str());
      }
    }
    set_up_ = 0;
  }

  RemoteServers* const remote_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::string> addresses_;
  std::string job_id_ = "bench";
  std::string error_;
  int set_up_ = 0;  // remote shards that hold the job
};

CaseResult RunCase(int64_t bytes, int num_shards, int num_workers,
                   RemoteServers* remote = nullptr) {
  CaseResult result;
  BenchJob job(bench::DenseBenchSpec(bytes, num_workers), num_shards,
               num_workers, remote);
  if (!job.error().empty()) {
    result.error = job.error();
    return result;
  }
  const BenchWorkerOptions options =
      WorkerOptions(job.addresses(), remote != nullptr ? remote->token : "",
                    job.job_id(), bytes);
  if (absl::GetFlag(FLAGS_worker_processes)) {
    absl::StatusOr<std::vector<WorkerFigures>> figures =
        RunProcesses(options, num_workers);
    if (figures.ok()) {
      result = Summarize(bytes, *figures, -1);
    } else {
      result.error = figures.status().ToString();
    }
  } else {
    double cpu = 0;
    const std::vector<WorkerFigures> figures =
        RunThreads(options, num_workers, &cpu);
    // The process's CPU is the workers' only when no shard shares it.
    result = Summarize(bytes, figures, remote != nullptr ? cpu : -1);
  }
  return result;
}

std::vector<int> ParseInts(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

// --mode=sparse: the options of a worker of dim `dim` from the flags.
bench::SparseBenchOptions SparseOptions(int dim) {
  bench::SparseBenchOptions o;
  o.dim = dim;
  o.dtype = absl::GetFlag(FLAGS_sparse_dtype) == "fp16"   ? FLOAT16
            : absl::GetFlag(FLAGS_sparse_dtype) == "bf16" ? BFLOAT16
                                                          : FLOAT32;
  o.batch = absl::GetFlag(FLAGS_sparse_batch);
  o.key_space = absl::GetFlag(FLAGS_sparse_key_space);
  o.predraw = absl::GetFlag(FLAGS_sparse_predraw);
  o.fused = absl::GetFlag(FLAGS_fused);
  o.seconds = absl::GetFlag(FLAGS_seconds_per_case);
  o.min_steps = absl::GetFlag(FLAGS_min_steps);
  o.connections = absl::GetFlag(FLAGS_connections);
  o.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  return o;
}

// --mode=sparse: one case (workers as threads, or processes with
// --worker_processes), then the dense path on the same bytes per step.
bench::SparseCase RunSparseCase(int dim, int num_shards, int num_workers,
                                RemoteServers* remote) {
  bench::SparseBenchOptions o = SparseOptions(dim);
  bench::SparseCase c;
  {
    BenchJob job(bench::SparseBenchSpec(dim, o.dtype, num_workers), num_shards,
                 num_workers, remote);
    const int shards = static_cast<int>(job.addresses().size());
    if (!job.error().empty()) {
      c = bench::SummarizeSparse(dim, shards, {});
      c.workers = num_workers;
      c.error = job.error();
      return c;
    }
    o.addresses = job.addresses();
    o.token = remote != nullptr ? remote->token : "";
    o.job_id = job.job_id();
    std::vector<bench::SparseFigures> figures;
    if (absl::GetFlag(FLAGS_worker_processes)) {
      auto f = bench::RunSparseProcesses(o, num_workers);
      if (f.ok()) figures = *std::move(f);
      if (!f.ok()) figures.assign(1, {.error = f.status().ToString()});
    } else {
      figures = bench::RunSparseThreads(o, num_workers);
    }
    c = bench::SummarizeSparse(dim, shards, figures);
  }
  if (c.error.empty()) {
    const CaseResult dense =
        RunCase(bench::SparseStepBytes(o.batch, dim, o.dtype) / 2, num_shards,
                num_workers, remote);
    if (dense.error.empty()) c.dense_gbps = dense.gbps;
  }
  return c;
}

// --worker_child: one worker, driven by the parent over stdin/stdout.
int ChildMain(const std::string& spec) {
  auto fail = [](const std::string& what) {
    std::printf("error: %s\n", what.c_str());
    std::fflush(stdout);
    return 1;
  };
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  int64_t worker_id = 0, bytes = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &worker_id) ||
      !absl::SimpleAtoi(parts[2], &bytes)) {
    return fail(absl::StrCat("--worker_child=", spec,
                             ": expected JOB_ID,WORKER_ID,BYTES"));
  }
  absl::StatusOr<std::string> token = ReadClusterToken(
      absl::GetFlag(FLAGS_token_file), std::getenv("PS_TOKEN"));
  if (!token.ok()) return fail(std::string(token.status().message()));
  if (absl::GetFlag(FLAGS_mode) == "sparse") {
    const std::vector<int> dims = ParseInts(absl::GetFlag(FLAGS_sparse_dims));
    bench::SparseBenchOptions o = SparseOptions(dims.empty() ? 0 : dims[0]);
    o.addresses = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',');
    o.token = *token;
    o.job_id = parts[0];
    o.worker_id = worker_id;
    return bench::SparseChildMain(o);
  }
  BenchWorkerOptions options =
      WorkerOptions(absl::StrSplit(absl::GetFlag(FLAGS_servers), ','), *token,
                    parts[0], bytes);
  options.worker_id = worker_id;
  options.process_cpu = true;
  absl::StatusOr<std::unique_ptr<BenchWorker>> worker =
      BenchWorker::Start(options);
  if (!worker.ok()) return fail(worker.status().ToString());
  std::printf("ready\n");
  std::fflush(stdout);
  if (absl::Status s =
          bench::AwaitGo(STDIN_FILENO, absl::Now() + absl::Minutes(10));
      !s.ok()) {
    return fail(s.ToString());
  }
  const WorkerFigures figures = (*worker)->Run();
  std::printf("%s\n", bench::FormatFigures(figures).c_str());
  std::fflush(stdout);
  return 0;
}

std::vector<int64_t> ParseSizes(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t mult = 1;
    if (absl::EndsWith(part, "K")) mult = 1 << 10;
    if (absl::EndsWith(part, "M")) mult = 1 << 20;
    if (mult != 1) part.remove_suffix(1);
    int64_t v = 0;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v * mult);
  }
  return out;
}

int Main(bool malloc_tuned) {
  const double seconds = absl::GetFlag(FLAGS_seconds_per_case);
  const int64_t piece = absl::GetFlag(FLAGS_max_request_bytes);
  const int connections = absl::GetFlag(FLAGS_connections);
  std::string report;
  auto emit = [&](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    report += line + "\n";
  };
  const std::vector<int64_t> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes));
  emit(absl::StrCat("Allocator: ", malloc_tuned
                                       ? "freed message buffers kept "
                                         "(TuneMallocForLargeMessages)"
                                       : "glibc's default thresholds"));
  bool failed = false;  // a case ended with an error
  if (absl::GetFlag(FLAGS_replication) != 1 &&
      absl::GetFlag(FLAGS_servers).empty()) {
    std::fprintf(stderr,
                 "--replication needs --servers (running ps_servers)\n");
    return 2;
  }
  std::unique_ptr<RemoteServers> remote;
  if (const std::string servers = absl::GetFlag(FLAGS_servers);
      !servers.empty()) {
    absl::StatusOr<std::unique_ptr<RemoteServers>> connected =
        bench::ConnectRemote(servers, absl::GetFlag(FLAGS_token_file),
                             std::getenv("PS_TOKEN"),
                             absl::GetFlag(FLAGS_replication));
    if (!connected.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(connected.status().message()).c_str());
      return absl::IsUnavailable(connected.status()) ? 1 : 2;
    }
    remote = *std::move(connected);
  }
  if (absl::GetFlag(FLAGS_mode) == "sparse") {
    emit(absl::StrCat(
        "\n## Sparse push+pull (ASP, table of dim d in ",
        absl::GetFlag(FLAGS_sparse_dtype), ", batches of ",
        absl::GetFlag(FLAGS_sparse_batch), " unique keys Zipf(1.05) from ",
        absl::GetFlag(FLAGS_sparse_key_space), ", ",
        absl::GetFlag(FLAGS_fused) ? "next rows in the push's answer"
                                   : "push, wait, pull, wait",
        ", ", remote != nullptr ? "ps_server processes" : "in-process shards",
        ")\n"));
    emit(bench::SparseReportHeader());
    const std::vector<int> shard_counts =
        remote != nullptr
            ? std::vector<int>{static_cast<int>(remote->addresses.size())}
            : ParseInts(absl::GetFlag(FLAGS_shards));
    for (int dim : ParseInts(absl::GetFlag(FLAGS_sparse_dims))) {
      for (int shards : shard_counts) {
        for (int workers : ParseInts(absl::GetFlag(FLAGS_workers))) {
          const bench::SparseCase c =
              RunSparseCase(dim, shards, workers, remote.get());
          emit(bench::SparseReportRow(c));
          failed = failed || !c.error.empty();
        }
      }
    }
    if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
      std::ofstream(out) << report;
    }
    return failed ? 1 : 0;
  }
  const bool ceilings = absl::GetFlag(FLAGS_ceilings) && remote == nullptr;
  if (!ceilings && absl::GetFlag(FLAGS_pairs) > 0) {
    std::fprintf(stderr,
                 "--pairs needs the ceilings (--ceilings, no --servers)\n");
    return 2;
  }
  std::vector<std::pair<double, double>> raw1(sizes.size()), raw2(sizes.size()),
      tcp(sizes.size());
  if (ceilings) {
    emit("\n## Ceilings (same bytes, both directions counted)\n");
    emit(
        "| model | TCP ping-pong GB/s | TCP round trips/s "
        "| gRPC raw 1 conn GB/s | gRPC raw 2 conn GB/s "
        "| gRPC raw calls/s (1 conn) |");
    emit("|---|---|---|---|---|---|");
    for (size_t i = 0; i < sizes.size(); ++i) {
      tcp[i] =
          bench::TcpPingPong(std::min<int64_t>(sizes[i], 64 << 20), seconds);
      raw1[i] = bench::GrpcRawCeiling(sizes[i], 1, piece, seconds);
      raw2[i] = bench::GrpcRawCeiling(sizes[i], 2, piece, seconds);
      // The TCP ping-pong moves at most 64 MB per round trip (GB/s compare
      // per byte; the round trips are of the capped size).
      const std::string trips =
          sizes[i] > (64 << 20)
              ? absl::StrFormat("%.0f (of 64 MB)", tcp[i].second)
              : absl::StrFormat("%.0f", tcp[i].second);
      emit(absl::StrFormat("| %s | %.2f | %s | %.2f | %.2f | %.0f |",
                           SizeName(sizes[i]), tcp[i].first, trips,
                           raw1[i].first, raw2[i].first, raw1[i].second));
    }
  }
  emit("\n## ps push+pull (ASP, " +
       (remote != nullptr
            ? absl::StrCat("ps_server processes at ",
                           absl::StrJoin(remote->addresses, ", "), ", ")
            : std::string("in-process shards, ")) +
       absl::StrCat(connections, " connections per shard, ", piece >> 20,
                    " MB messages, ",
                    absl::GetFlag(FLAGS_fused)
                        ? "pushes + end of step answered with the weights"
                        : "pull, then pushes + end of step",
                    ", workers as ",
                    absl::GetFlag(FLAGS_worker_processes)
                        ? "processes of their own"
                        : "threads of this process",
                    ")\n"));
  emit(
      "| model | shards | workers | push+pull GB/s | per worker GB/s "
      "(min-max) | median step ms | steps/s | worker CPU ms/step "
      "| vs raw gRPC (same conns) | vs TCP |");
  emit("|---|---|---|---|---|---|---|---|---|---|");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::vector<int> shard_counts =
        remote != nullptr
            ? std::vector<int>{static_cast<int>(remote->addresses.size())}
            : ParseInts(absl::GetFlag(FLAGS_shards));
    for (int shards : shard_counts) {
      for (int workers : ParseInts(absl::GetFlag(FLAGS_workers))) {
        CaseResult r = RunCase(sizes[i], shards, workers, remote.get());
        const double raw = connections >= 2 ? raw2[i].first : raw1[i].first;
        const std::string ratios =
            ceilings ? absl::StrFormat("%.2fx | %.2fx", r.gbps / raw,
                                       r.gbps / tcp[i].first)
                     : "- | -";
        const std::string cpu =
            r.cpu_ms_per_step < 0 ? std::string("-")
                                  : absl::StrFormat("%.3f", r.cpu_ms_per_step);
        emit(absl::StrFormat(
            "| %s | %d | %d | %.2f | %.2f-%.2f | %.2f | %.0f | %s | %s |%s",
            SizeName(sizes[i]), shards, workers, r.gbps, r.worker_gbps_min,
            r.worker_gbps_max, r.step_ms, r.steps_per_s, cpu, ratios,
            r.error.empty() ? "" : " error: " + r.error));
        failed = failed || !r.error.empty();
      }
    }
  }
  if (const int pairs = absl::GetFlag(FLAGS_pairs); pairs > 0) {
    emit(absl::StrFormat(
        "\n## Paired: 1 shard, 1 worker against the raw gRPC echo (%d "
        "connection(s)), measured in turn %d times\n",
        connections, pairs));
    emit(
        "| model | ps/raw median | min | max | ps GB/s median | raw GB/s "
        "median |");
    emit("|---|---|---|---|---|---|");
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<double> ratio, ps, raw;
      for (int k = 0; k < pairs; ++k) {
        const double r =
            bench::GrpcRawCeiling(sizes[i], connections, piece, seconds).first;
        const CaseResult c = RunCase(sizes[i], 1, 1);
        if (!c.error.empty()) {
          emit(absl::StrFormat("| %s | error: %s |", SizeName(sizes[i]),
                               c.error));
          failed = true;
          break;
        }
        raw.push_back(r);
        ps.push_back(c.gbps);
        ratio.push_back(c.gbps / r);
      }
      if (ratio.empty()) continue;
      emit(absl::StrFormat("| %s | %.2fx | %.2fx | %.2fx | %.2f | %.2f |",
                           SizeName(sizes[i]), Median(ratio),
                           *std::min_element(ratio.begin(), ratio.end()),
                           *std::max_element(ratio.begin(), ratio.end()),
                           Median(ps), Median(raw)));
    }
  }
  // The server-side apply runs in this process: with --servers it would
  // measure this host, not theirs.
  if (remote == nullptr) {
    emit("\n## Server-side apply (64 MB of fp32)\n");
    const bench::ApplyResult a = bench::ApplyBandwidth(64 << 20, seconds);
    emit(
        "| memcpy GB/s | SGD apply GB/s | shard Push path GB/s | SGD / memcpy "
        "|");
    emit("|---|---|---|---|");
    emit(absl::StrFormat("| %.2f | %.2f | %.2f | %.2f |", a.memcpy_gbps,
                         a.sgd_gbps, a.push_gbps, a.sgd_gbps / a.memcpy_gbps));
    emit(
        "\nBSP step close (sum of the staged gradient and a momentum update "
        "of all 64 MB, by apply threads):\n");
    emit("| apply threads | GB/s of weights | vs 1 thread |");
    emit("|---|---|---|");
    for (const auto& [threads, gbps] : a.close_gbps) {
      emit(absl::StrFormat("| %d | %.2f | %.2fx |", threads, gbps,
                           gbps / a.close_gbps.front().second));
    }
  }
  if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
    std::ofstream(out) << report;
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "parameter-server push/pull throughput vs TCP and raw gRPC "
      "ceilings, and server-side apply vs memcpy, on loopback; or push/pull "
      "throughput against running ps_servers (--servers); workers as "
      "threads or, with --worker_processes, processes; --mode=sparse: rows "
      "of a sparse table by key, rows/s and GB/s. Exits 1 if a case "
      "failed (its row says why), 2 on a usage error.");
  absl::ParseCommandLine(argc, argv);
  ps::DisableMutexDeadlockDetection();
  const bool malloc_tuned = ps::TuneMallocForLargeMessages(
      ps::MallocTuningEnabled(std::getenv("PS_MALLOC_TUNING")));
  if (const std::string child = absl::GetFlag(FLAGS_worker_child);
      !child.empty()) {
    return ps::ChildMain(child);
  }
  return ps::Main(malloc_tuned);
}
