// PS overhead benchmark (issue 5): one worker's training throughput through a
// real parameter server (1 shard, gRPC on loopback: in this process, or a
// ps_server of its own with --server) against the same worker loop with no
// pull/push, at batch 128 and 512, in one run. The model is the
// Fashion-MNIST MLP, or a job config's (--config: e.g. the click-log FM or
// DLRM, whose sparse rows the compute-only loop leaves as they are).
// With --repeats=N each ratio is measured N times (each against a fresh
// compute-only measurement) and summarised by its median and range.
//
//   bazel run -c opt //tools:train_bench -- --steps=1000 --repeats=5
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/platform/process.h"
#include "common/platform/rpc.h"
#include "common/spec/config.h"
#include "kernels/blas_check_flag.h"
#include "kernels/cpu_backend.h"
#include "server/coordinator/shard_client.h"
#include "server/shard/parameter_service.h"
#include "server/shard/shard_store.h"
#include "worker/client/parameter_access.h"
#include "worker/client/ps_access.h"
#include "worker/data/dataset.h"
#include "worker/loop/trainer.h"

ABSL_FLAG(int, steps, 400, "Training steps per measurement.");
ABSL_FLAG(int, repeats, 1,
          "Measurements of each case, each mode's after a fresh compute-only "
          "one; the summary gives the median and range of the ratios.");
ABSL_FLAG(int, threads, 1, "OpenBLAS threads of the worker.");
ABSL_FLAG(std::string, batches, "128,512", "Batch sizes to measure.");
ABSL_FLAG(int, apply_threads, 0,
          "The in-process shard's BSP apply threads (ps_server "
          "--apply_threads); 0: one per CPU core, at most 8, as the daemon. "
          "With --server, the server's own setting applies.");
ABSL_FLAG(std::string, wait_spin_us, "300",
          "How long the worker polls for weights on their way before it "
          "sleeps (ps_worker --wait_spin_us), in microseconds. Several, "
          "comma-separated: each mode is measured with each in turn, right "
          "after the same compute-only loop (an A/B within one run).");
ABSL_FLAG(std::string, server, "",
          "host:port of a running ps_server to measure against (the jobs are "
          "set up and torn down through its SetupJob/TeardownJob calls; "
          "PS_TOKEN is sent if set). Empty: a shard in this process.");
ABSL_FLAG(std::string, config, "",
          "A job config whose model and data to train instead of the MLP on "
          "Fashion-MNIST (e.g. configs/ctr_fm_bsp.pbtxt; its data files must "
          "exist); its optimizer is kept, its consistency, batch size and "
          "steps are the benchmark's.");
ABSL_FLAG(std::string, consistency, "BSP",
          "Consistency models to measure through the PS, comma-separated: "
          "BSP, ASP, SSP (bound 3), ASP+overlap (overlap_communication).");

namespace ps {
namespace {

// The worker loop with nothing behind it: pulls leave the weights as they
// are (version 0), pushes go nowhere, and every call is over at once.
class NoParams : public client::ParameterAccess {
 public:
  client::Handle Pull(client::PullArgs) override { return client::Handle(); }
  absl::Status Push(client::StepArgs) override { return absl::OkStatus(); }
  client::Handle EndStep(client::StepArgs) override { return client::Handle(); }
  std::vector<int64_t> PartBoundaries(int) const override { return {}; }
  void CancelCalls() override {}
};

// --config's spec, or the MLP's; exits when it cannot be read.
JobSpec BaseSpec() {
  const std::string path = absl::GetFlag(FLAGS_config);
  absl::StatusOr<JobSpec> spec =
      path.empty()
          ? ParseJobSpec(
                R"pb(
                  model {
                    mlp {
                      input_dim: 784
                      hidden: 256
                      hidden: 128
                      num_classes: 10
                    }
                  }
                  optimizer { kind: MOMENTUM learning_rate: 0.05 momentum: 0.9 }
                  seed: 1
                )pb",
                "bench")
          : LoadJobSpec(path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    std::exit(1);
  }
  return *spec;
}

JobSpec Spec(const JobSpec& base, int batch, int steps,
             const std::string& consistency) {
  JobSpec spec = base;
  ConsistencySpec* c = spec.mutable_consistency();
  c->Clear();
  if (consistency == "SSP") {
    c->set_model(ConsistencySpec::SSP);
    c->set_staleness(3);
  } else if (consistency == "ASP+overlap") {
    c->set_model(ConsistencySpec::ASP);
    c->set_overlap_communication(true);
  } else {
    ConsistencySpec::Model m = ConsistencySpec::BSP;
    ConsistencySpec::Model_Parse(consistency, &m);  // ParseCases checked it
    c->set_model(m);
  }
  spec.set_num_workers(1);
  spec.clear_target();
  DataSpec* d = spec.mutable_data();
  d->set_max_steps(steps);
  d->set_batch_size(batch);
  d->set_eval_every_steps(1000000);
  d->set_eval_examples(0);
  return spec;
}

double Run(const JobSpec& spec, client::ParameterAccess* params,
           std::shared_ptr<const worker::Dataset> train,
           kernels::Backend* backend, const std::string& job_id,
           std::vector<std::string> servers) {
  WorkerAssignment a;
  a.set_command(WorkerAssignment::TRAIN);
  a.set_job_id(job_id);
  *a.mutable_spec() = spec;
  a.set_num_workers(1);
  a.add_data_shards(0);
  a.set_num_data_shards(1);
  for (auto& s : servers) a.add_server_addresses(s);
  const absl::Time start = absl::Now();
  std::map<std::string, std::pair<double, int>> split;
  absl::StatusOr<worker::TrainResult> r = worker::Train(
      a, train, nullptr, backend, params,
      [&](std::vector<MetricPoint> points, bool) {
        for (const MetricPoint& p : points) {
          auto& [sum, n] = split[p.name()];
          sum += p.value();
          ++n;
        }
      },
      nullptr);
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  if (!r.ok()) {
    std::fprintf(stderr, "train: %s\n",
                 std::string(r.status().message()).c_str());
    std::exit(1);
  }
  auto mean = [&](const char* name) {
    auto& [sum, n] = split[name];
    return n > 0 ? sum / n : 0.0;
  };
  std::printf(
      "  %-8s batch %4d: step %.2f ms = wait %.2f + pull %.2f + compute %.2f + "
      "push %.2f\n",
      job_id.c_str(), spec.data().batch_size(), mean("step_time_ms"),
      mean("wait_ms"), mean("pull_ms"), mean("compute_ms"), mean("push_ms"));
  return r->steps * spec.data().batch_size() / secs;
}

// What is measured: each consistency mode with each wait spin.
struct Case {
  std::string mode, label;
  int spin_us;
};

// The cases of --consistency and --wait_spin_us; prints why and returns
// false when a flag is wrong.
bool ParseCases(std::vector<Case>& cases) {
  std::vector<std::string> modes;
  for (absl::string_view m :
       absl::StrSplit(absl::GetFlag(FLAGS_consistency), ',')) {
    const std::string mode(m);
    if (mode != "BSP" && mode != "ASP" && mode != "SSP" &&
        mode != "ASP+overlap") {
      std::fprintf(stderr, "--consistency: unknown model '%s'\n", mode.c_str());
      return false;
    }
    modes.push_back(mode);
  }
  std::vector<int> spins;
  for (absl::string_view v :
       absl::StrSplit(absl::GetFlag(FLAGS_wait_spin_us), ',')) {
    int us = -1;
    if (!absl::SimpleAtoi(v, &us) || us < 0) {
      std::fprintf(stderr, "--wait_spin_us: '%s' is not a number >= 0\n",
                   std::string(v).c_str());
      return false;
    }
    spins.push_back(us);
  }
  for (const std::string& mode : modes) {
    for (int us : spins) {
      cases.push_back(
          {mode, spins.size() > 1 ? absl::StrCat(mode, " ", us, "us") : mode,
           us});
    }
  }
  return true;
}

// The shard: in this process, or a ps_server of its own (as deployed).
struct Shard {
  std::unique_ptr<server::ShardStore> store;
  std::unique_ptr<server::ParameterServiceAdapter> adapter;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  bool remote = false;
};

// Connects to --server, or starts a shard in this process. Returns false
// when it cannot.
bool OpenShard(Shard& shard) {
  shard.address = absl::GetFlag(FLAGS_server);
  shard.remote = !shard.address.empty();
  if (shard.remote) {
    // Before the compute-only loop: a wrong address fails at once.
    if (!CanConnect(shard.address, absl::Seconds(5))) {
      std::fprintf(stderr, "--server: cannot connect to %s within 5 s\n",
                   shard.address.c_str());
      return false;
    }
    return true;
  }
  server::ShardStoreOptions store_options;
  store_options.apply_threads = absl::GetFlag(FLAGS_apply_threads);
  if (store_options.apply_threads == 0) {
    store_options.apply_threads = server::DefaultApplyThreads();
  }
  auto s = server::ShardStore::Create(store_options);
  if (!s.ok()) return false;
  shard.store = *std::move(s);
  auto a = server::ParameterServiceAdapter::Create(shard.store.get(), {});
  if (!a.ok()) return false;
  shard.adapter = *std::move(a);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(kDefaultMaxMessageBytes);
  builder.RegisterService(shard.adapter->service());
  shard.server = builder.BuildAndStart();
  shard.address = absl::StrCat("127.0.0.1:", port);
  return true;
}

// Sets `spec` up as `job_id` on the shard through its RPCs (as the
// coordinator does, whichever shard) and trains it through the PS (TearDown
// ends it). Returns examples/s, or nothing (why printed) when the job could not
// be set up.
std::optional<double> MeasureWithPs(const Shard& shard,
                                    coordinator::ShardClient& shards,
                                    const std::string& token,
                                    const JobSpec& spec,
                                    const std::string& job_id, int spin_us,
                                    std::shared_ptr<const worker::Dataset> data,
                                    kernels::Backend* backend) {
  SetupJobRequest setup;
  setup.set_job_id(job_id);
  *setup.mutable_spec() = spec;
  setup.set_shard_index(0);
  setup.set_num_shards(1);
  setup.add_worker_ids(1);
  if (absl::Status s = shards.SetupJob(shard.address, setup).status();
      !s.ok()) {
    // (The shard client's message names the server.)
    std::fprintf(stderr, "setup: SetupJob: %s\n",
                 std::string(s.message()).c_str());
    return std::nullopt;
  }
  WorkerAssignment a;
  a.set_job_id(job_id);
  *a.mutable_spec() = spec;
  a.add_server_addresses(shard.address);
  client::PsAccessOptions ao;
  ao.member_id = 1;
  ao.token = token;
  ao.wait_spin = absl::Microseconds(spin_us);
  auto access = client::CreatePsAccess(a, ao);
  if (!access.ok()) return std::nullopt;
  return Run(spec, access->get(), data, backend, job_id, {shard.address});
}

// Frees the job's shard memory before the next one.
void TearDown(const Shard& shard, coordinator::ShardClient& shards,
              const std::string& job_id) {
  TeardownJobRequest teardown;
  teardown.set_job_id(job_id);
  if (absl::Status s = shards.TeardownJob(shard.address, teardown); !s.ok()) {
    std::fprintf(stderr, "warning: TeardownJob %s: %s\n", job_id.c_str(),
                 std::string(s.message()).c_str());
  }
}

// One case's ratios to the compute-only loop, one per repeat.
struct Ratios {
  int batch;
  std::string mode;
  std::vector<double> values;
};

void PrintSummary(std::vector<Ratios>& ratios, int repeats) {
  std::printf("\nratio to the compute-only loop over %d repeat(s)\n", repeats);
  std::printf("%6s %-17s %7s %7s %7s\n", "batch", "mode", "median", "min",
              "max");
  for (Ratios& r : ratios) {
    std::vector<double>& v = r.values;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median =
        n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
    std::printf("%6d %-17s %7.2f %7.2f %7.2f\n", r.batch, r.mode.c_str(),
                median, v.front(), v.back());
  }
}

int Main() {
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (repeats < 1) {
    std::fprintf(stderr, "--repeats must be >= 1\n");
    return 2;
  }
  std::vector<Case> cases;
  if (!ParseCases(cases)) return 2;
  const JobSpec base = BaseSpec();
  // Text data (a --config's) is streamed by the loop itself.
  std::shared_ptr<const worker::Dataset> data;
  if (base.data().format() == DataSpec::IDX) {
    auto train = worker::LoadFashionMnist(worker::kDefaultFashionMnistDir,
                                          worker::Split::kTrain);
    if (!train.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(train.status().message()).c_str());
      return 1;
    }
    data = std::move(*train);
  }
  auto backend =
      kernels::CreateCpuBackend({.num_threads = absl::GetFlag(FLAGS_threads)});
  if (!backend.ok()) return 1;

  absl::StatusOr<std::string> token =
      ReadClusterToken("", std::getenv("PS_TOKEN"));
  if (!token.ok()) return 1;
  Shard shard;
  if (!OpenShard(shard)) return 1;
  // Jobs are set up and torn down through the shard's RPCs, as the
  // coordinator does, whichever setup.
  coordinator::GrpcShardClientOptions shard_options;
  shard_options.token = *token;
  std::unique_ptr<coordinator::ShardClient> shards =
      coordinator::MakeGrpcShardClient(shard_options);

  const std::string config = absl::GetFlag(FLAGS_config);
  std::printf(
      "%s on the CPU (%d BLAS thread, OpenBLAS core %s, "
      "%s), %d steps each, %d repeat(s)\n",
      config.empty() ? "MLP 784-256-128-10" : config.c_str(),
      absl::GetFlag(FLAGS_threads), kernels::CurrentBlasCore().c_str(),
      kernels::DescribeCpu(kernels::DetectCpuFeatures()).c_str(),
      absl::GetFlag(FLAGS_steps), repeats);
  std::printf("%6s %-17s %6s %16s %16s %7s\n", "batch", "mode", "repeat",
              "compute ex/s", "with PS ex/s", "ratio");
  // Each ratio divides by the compute-only loop measured in the same
  // repeat, just before: the machine's speed drifts over a run.
  std::vector<Ratios> ratios;
  int job = 0;
  for (absl::string_view b :
       absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    const int batch = std::stoi(std::string(b));
    const size_t first = ratios.size();
    for (const Case& c : cases) ratios.push_back({batch, c.label, {}});
    // The compute-only loop is the same for every mode.
    const JobSpec plain = Spec(base, batch, absl::GetFlag(FLAGS_steps), "BSP");
    NoParams none;
    Run(plain, &none, data, backend->get(), "warmup", {});
    for (int rep = 1; rep <= repeats; ++rep) {
      const double compute =
          Run(plain, &none, data, backend->get(), "none", {});
      for (size_t k = 0; k < cases.size(); ++k) {
        const Case& c = cases[k];
        const JobSpec spec =
            Spec(base, batch, absl::GetFlag(FLAGS_steps), c.mode);
        // On a shared server, ids of this run only (another run's jobs may
        // still be there).
        const std::string job_id =
            shard.remote ? absl::StrCat("bench-", getpid(), "-", ++job)
                         : absl::StrCat("bench-", ++job);
        const std::optional<double> with_ps =
            MeasureWithPs(shard, *shards, *token, spec, job_id, c.spin_us, data,
                          backend->get());
        if (!with_ps.has_value()) return 1;
        std::printf("%6d %-17s %6d %16.0f %16.0f %7.2f\n", batch,
                    c.label.c_str(), rep, compute, *with_ps,
                    *with_ps / compute);
        std::fflush(stdout);
        ratios[first + k].values.push_back(*with_ps / compute);
        TearDown(shard, *shards, job_id);
      }
    }
  }
  PrintSummary(ratios, repeats);
  if (shard.server != nullptr) {
    shard.server->Shutdown();
    shard.adapter->Stop();
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the parameter server's overhead on one training worker: "
      "examples/s of the Fashion-MNIST MLP (or of --config's model on its "
      "data) through one shard over loopback gRPC (in this process, or the "
      "ps_server named by --server), against the same worker's "
      "compute-only loop.");
  absl::ParseCommandLine(argc, argv);
  // First: it may restart this process (same pid and argv).
  const ps::kernels::BlasStartupResult blas =
      ps::kernels::RunBlasStartupCheckAsFlagged(
          argv, std::getenv(ps::kernels::kBlasCoreTypeVariable),
          std::getenv(ps::kernels::kBlasRestartMarker));
  std::fprintf(stderr, "blas: %s\n", blas.message.c_str());
  ps::PrepareDaemonProcess(std::getenv("PS_MALLOC_TUNING"));
  return ps::Main();
}
