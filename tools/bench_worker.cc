#include "tools/bench_worker.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "common/platform/status.h"
#include "worker/client/parameter_client.h"

namespace ps::bench {
namespace {

using client::ParameterClient;
using client::Ticket;

constexpr absl::Duration kStepTimeout = absl::Seconds(60);

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class WorkerImpl final : public BenchWorker {
 public:
  WorkerImpl(const BenchWorkerOptions& options,
             std::unique_ptr<ParameterClient> client)
      : options_(options), client_(std::move(client)) {
    for (int64_t n : client_->placement().tensor_elements) {
      weights_.emplace_back(n);
      grads_.emplace_back(n, 1e-3f);
    }
    for (auto& v : weights_) spans_.push_back(absl::MakeSpan(v));
  }

  // The warm-up: weights pulled, then one step.
  absl::Status WarmUp() {
    PS_RETURN_IF_ERROR(client_->PullAll(0, 0, spans_).Wait(kStepTimeout));
    return Step(0);
  }

  WorkerFigures Run() override {
    WorkerFigures f;
    std::vector<double> step_ms;
    const double cpu0 = options_.process_cpu ? CpuSeconds() : 0;
    const absl::Time start = absl::Now();
    const absl::Duration window = absl::Seconds(options_.seconds);
    absl::Status s;
    int64_t clock = 1;
    while (s.ok() && (absl::Now() - start < window ||
                      static_cast<int>(step_ms.size()) < options_.min_steps)) {
      const absl::Time t0 = absl::Now();
      s = Step(clock++);
      step_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    }
    f.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (options_.process_cpu) f.cpu_seconds = CpuSeconds() - cpu0;
    f.steps = s.ok() ? step_ms.size() : step_ms.size() - 1;
    f.median_step_ms = Median(step_ms);
    if (!s.ok()) f.error = s.ToString();
    return f;
  }

 private:
  absl::Status Step(int64_t clock) {
    if (options_.fused) {
      // As a worker does: the gradients go with the end of step, whose
      // answer brings the weights for the next step.
      std::vector<client::TensorGrad> all;
      for (int t = static_cast<int>(grads_.size()) - 1; t >= 0; --t) {
        all.push_back({t, grads_[t]});
      }
      ParameterClient::StepTickets st = client_->EndStepAndPull(
          std::move(all), clock, ParameterClient::kPulledVersion, clock + 1, 0,
          spans_);
      PS_RETURN_IF_ERROR(st.end.Wait(kStepTimeout));
      return st.pull.Wait(kStepTimeout);
    }
    Ticket pull = client_->PullAll(clock, 0, spans_);
    PS_RETURN_IF_ERROR(pull.Wait(kStepTimeout));
    std::vector<Ticket> pushes;
    // Last layer first, as backward produces them.
    for (int t = static_cast<int>(grads_.size()) - 1; t >= 0; --t) {
      pushes.push_back(client_->PushTensor(t, grads_[t], clock));
    }
    pushes.push_back(client_->EndStep(clock));
    for (Ticket& p : pushes) PS_RETURN_IF_ERROR(p.Wait(kStepTimeout));
    return absl::OkStatus();
  }

  const BenchWorkerOptions options_;
  const std::unique_ptr<ParameterClient> client_;
  std::vector<std::vector<float>> weights_, grads_;
  std::vector<absl::Span<float>> spans_;
};

}  // namespace

JobSpec DenseBenchSpec(int64_t bytes, int workers) {
  JobSpec spec;
  spec.set_name("bench");
  spec.set_num_workers(workers);
  const int64_t elements = bytes / 4;
  const int tensors = elements >= 4096 ? 4 : 1;
  for (int t = 0; t < tensors; ++t) {
    TensorSpec* ts = spec.mutable_model()->add_tensors();
    ts->set_name(absl::StrCat("layer", t));
    ts->add_shape(elements / tensors);
    ts->mutable_init()->set_kind(InitializerSpec::ZEROS);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  spec.mutable_data()->set_max_steps(1);
  return spec;
}

absl::StatusOr<Placement> DenseBenchPlacement(int64_t bytes, int num_shards) {
  const JobSpec spec = DenseBenchSpec(bytes, 1);
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  return ComputePlacement(tensors, num_shards, kDefaultChunkBytes);
}

std::string FormatFigures(const WorkerFigures& f) {
  return absl::StrFormat(
      "figures steps=%d seconds=%.6f median_ms=%.6f cpu=%.6f error=%s", f.steps,
      f.seconds, f.median_step_ms, f.cpu_seconds, f.error);
}

absl::StatusOr<WorkerFigures> ParseFigures(absl::string_view line) {
  const absl::Status bad = absl::InvalidArgumentError(
      absl::StrCat("not a worker's figures: \"", line, "\""));
  if (!absl::ConsumePrefix(&line, "figures ")) return bad;
  // The error comes last and may hold spaces and '='.
  const size_t e = line.find(" error=");
  if (e == absl::string_view::npos) return bad;
  WorkerFigures f;
  f.error = std::string(line.substr(e + 7));
  int found = 0;
  for (absl::string_view field : absl::StrSplit(line.substr(0, e), ' ')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    bool ok = false;
    if (kv.first == "steps") ok = absl::SimpleAtoi(kv.second, &f.steps);
    if (kv.first == "seconds") ok = absl::SimpleAtod(kv.second, &f.seconds);
    if (kv.first == "median_ms") {
      ok = absl::SimpleAtod(kv.second, &f.median_step_ms);
    }
    if (kv.first == "cpu") ok = absl::SimpleAtod(kv.second, &f.cpu_seconds);
    if (!ok) return bad;
    ++found;
  }
  if (found != 4) return bad;
  return f;
}

absl::StatusOr<std::unique_ptr<BenchWorker>> BenchWorker::Start(
    const BenchWorkerOptions& options) {
  PS_ASSIGN_OR_RETURN(
      Placement placement,
      DenseBenchPlacement(options.bytes,
                          static_cast<int>(options.addresses.size())));
  client::ParameterClientOptions copts;
  copts.server_addresses = options.addresses;
  copts.token = options.token;
  copts.connections_per_shard = options.connections;
  copts.max_request_bytes = options.max_request_bytes;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ParameterClient> client,
                      ParameterClient::Create(copts, options.job_id,
                                              options.worker_id, placement));
  auto worker = std::make_unique<WorkerImpl>(options, std::move(client));
  PS_RETURN_IF_ERROR(worker->WarmUp());
  return std::unique_ptr<BenchWorker>(std::move(worker));
}

}  // namespace ps::bench
