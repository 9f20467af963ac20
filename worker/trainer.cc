#include "worker/trainer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/mlp.h"
#include "worker/batch_prefetcher.h"

namespace ps::worker {
namespace {

kernels::Activation ToKernels(Activation a) {
  return a == TANH ? kernels::Activation::kTanh : kernels::Activation::kRelu;
}

// Running sums between two reports.
struct Window {
  int64_t steps = 0;
  double loss = 0, wait = 0, pull = 0, compute = 0, push = 0, staleness = 0;
  int64_t staleness_steps = 0;  // step ends whose staleness is known
  absl::Time start = absl::Now();
};

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

std::vector<int64_t> FirstLayerRowSplits(const std::vector<int64_t>& parts,
                                         const std::vector<int64_t>& shape) {
  // Blocks of fewer bytes cost more in messages than they gain in overlap
  // (tools/train_bench: 4 blocks of 200 KB were slower than 2 of 400 KB at
  // batch 128); more blocks than this gain little.
  constexpr int64_t kMinBlockBytes = 384 << 10;
  constexpr int64_t kMaxBlocks = 8;
  if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) return {};
  std::vector<int64_t> rows;
  for (int64_t e : parts) {
    if (e % shape[1] == 0 && e / shape[1] > 0 && e / shape[1] < shape[0]) {
      rows.push_back(e / shape[1]);
    }
  }
  const int64_t bytes = shape[0] * shape[1] * int64_t{sizeof(float)};
  const int64_t max_blocks =
      std::max<int64_t>(1, std::min(kMaxBlocks, bytes / kMinBlockBytes));
  const int64_t blocks = static_cast<int64_t>(rows.size()) + 1;
  if (blocks <= max_blocks) return rows;
  // Every k-th boundary, k = ceil(blocks / max_blocks).
  const size_t k = static_cast<size_t>((blocks + max_blocks - 1) / max_blocks);
  std::vector<int64_t> out;
  for (size_t i = k - 1; i < rows.size(); i += k) out.push_back(rows[i]);
  return out;
}

int64_t StepsPerEpoch(int64_t train_examples, int num_data_shards,
                      int batch_size) {
  if (num_data_shards < 1 || batch_size < 1) return 0;
  return train_examples / num_data_shards / batch_size;
}

int64_t TotalSteps(const JobSpec& spec, int64_t train_examples,
                   int num_data_shards) {
  if (spec.data().max_steps() > 0) return spec.data().max_steps();
  return spec.data().epochs() * StepsPerEpoch(train_examples, num_data_shards,
                                              spec.data().batch_size());
}

absl::StatusOr<TrainResult> Train(
    const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, kernels::Backend* backend,
    ParameterAccess* params, MetricSink sink, const std::atomic<bool>* stop,
    const TrainerOptions& options,
    std::function<std::vector<int>()> current_data_shards) {
  const JobSpec& spec = a.spec();
  if (!spec.model().has_mlp()) {
    return absl::UnimplementedError(
        "this worker trains MLP models only (model.mlp)");
  }
  kernels::MlpOptions mlp_options;
  mlp_options.layer_sizes.push_back(spec.model().mlp().input_dim());
  for (int64_t h : spec.model().mlp().hidden()) {
    mlp_options.layer_sizes.push_back(h);
  }
  mlp_options.layer_sizes.push_back(spec.model().mlp().num_classes());
  mlp_options.activation = ToKernels(spec.model().mlp().activation());
  PS_ASSIGN_OR_RETURN(auto mlp, kernels::Mlp::Create(backend, mlp_options));
  if (train->example_size() != spec.model().mlp().input_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.mlp.input_dim is ", spec.model().mlp().input_dim(),
        " but the dataset's examples have ", train->example_size(), " values"));
  }

  const int num_shards = std::max(1, a.num_data_shards());
  const int batch = spec.data().batch_size();
  const int64_t steps_per_epoch =
      StepsPerEpoch(train->num_examples, num_shards, batch);
  const int64_t total_steps = TotalSteps(spec, train->num_examples, num_shards);
  if (steps_per_epoch < 1 || total_steps < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no full batch of ", batch, " per data shard: ", train->num_examples,
        " examples over ", num_shards, " shards"));
  }

  PrefetcherOptions po;
  po.batch_size = batch;
  po.seed = spec.data().shuffle_seed();
  po.assignment.shards.assign(a.data_shards().begin(), a.data_shards().end());
  if (po.assignment.shards.empty()) po.assignment.shards = {a.rank()};
  po.assignment.num_shards = num_shards;
  po.first_epoch = a.start_step() / steps_per_epoch;
  po.first_batch = a.start_step() % steps_per_epoch;
  po.num_epochs = 0;  // the step budget ends training, not the data
  PS_ASSIGN_OR_RETURN(auto prefetcher, BatchPrefetcher::Create(train, po));
  std::vector<int> shards_in_use = po.assignment.shards;

  // Straggler injection for experiments.
  double compute_factor = 1;
  absl::Duration extra_delay;
  for (const StragglerInjection& s : spec.stragglers()) {
    if (s.worker_rank() != a.rank()) continue;
    if (s.compute_factor() > 1) compute_factor = s.compute_factor();
    extra_delay += absl::Milliseconds(s.delay_ms());
  }

  // Host copies of the weights (pulled) and gradients (pushed).
  const bool host_memory = backend->HostAddressable();
  std::vector<std::vector<float>> weights, grads;
  std::vector<absl::Span<float>> weight_spans;
  for (const kernels::ParameterInfo& p : mlp->parameters()) {
    weights.emplace_back(host_memory ? 0 : p.size);
    grads.emplace_back(host_memory ? 0 : p.size);
  }
  // On a host-memory backend the pulls land in the model's own parameter
  // buffers and pushes read its gradient buffers: no staging copies.
  const bool direct = host_memory;
  for (int i = 0; i < mlp->num_parameters(); ++i) {
    if (direct) {
      kernels::DeviceSpan<float> p = mlp->parameter(i);
      weight_spans.push_back(absl::MakeSpan(p.data, p.size));
    } else {
      weight_spans.push_back(absl::MakeSpan(weights[i]));
    }
  }

  // ASP with overlap_communication: step t+1 computes while step t's
  // gradients and the next weights travel, in buffers of their own (the
  // model's are in use). One set suffices: a step's calls are over before
  // the next step's start. On a host-memory backend they are buffers of the
  // backend's, swapped with the model's own at the end of a step instead of
  // copied (about 2 MB a step for the Fashion-MNIST MLP); otherwise host
  // staging copies.
  const bool overlap = spec.consistency().model() == ConsistencySpec::ASP &&
                       spec.consistency().overlap_communication();
  std::vector<std::vector<float>> overlap_grads, overlap_weights;
  std::vector<kernels::DeviceBuffer> spare_grads, spare_weights;
  if (overlap) {
    for (const kernels::ParameterInfo& p : mlp->parameters()) {
      if (direct) {
        PS_ASSIGN_OR_RETURN(kernels::DeviceBuffer g,
                            backend->AllocateArray<float>(p.size));
        PS_ASSIGN_OR_RETURN(kernels::DeviceBuffer w,
                            backend->AllocateArray<float>(p.size));
        spare_grads.push_back(std::move(g));
        spare_weights.push_back(std::move(w));
      } else {
        overlap_grads.emplace_back(p.size);
        overlap_weights.emplace_back(p.size);
      }
    }
  }

  // On every way out (a stop, an error), the calls still in flight are
  // ended before the model and the buffers above are freed.
  struct CancelCallsOnExit {
    ParameterAccess* params;
    ~CancelCallsOnExit() { params->CancelCalls(); }
  } cancel_calls_on_exit{params};

  const int eval_every = spec.data().eval_every_steps() > 0
                             ? spec.data().eval_every_steps()
                             : static_cast<int>(steps_per_epoch);
  const absl::Time job_start = absl::Now();
  auto point = [&](const std::string& name, double value, int64_t step) {
    MetricPoint p;
    p.set_name(name);
    p.set_value(value);
    p.set_step(step);
    p.set_epoch(static_cast<double>(step) / steps_per_epoch);
    p.set_time_ms(absl::ToInt64Milliseconds(absl::Now() - job_start));
    return p;
  };
  TrainResult result;
  auto is_evaluator = [&] {
    return options.is_evaluator ? options.is_evaluator() : a.evaluator();
  };
  auto evaluate = [&](int64_t step) -> absl::Status {
    if (!is_evaluator() || test == nullptr) return absl::OkStatus();
    const int64_t n =
        spec.data().eval_examples() > 0
            ? std::min<int64_t>(spec.data().eval_examples(), test->num_examples)
            : test->num_examples;
    constexpr int64_t kEvalBatch = 1000;
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t begin = 0; begin < n; begin += kEvalBatch) {
      const int64_t len = std::min(kEvalBatch, n - begin);
      PS_ASSIGN_OR_RETURN(
          kernels::Mlp::Evaluation e,
          mlp->Evaluate(absl::MakeConstSpan(test->images)
                            .subspan(begin * test->example_size(),
                                     len * test->example_size()),
                        absl::MakeConstSpan(test->labels).subspan(begin, len)));
      loss_sum += e.loss * e.examples;
      correct += e.correct;
    }
    result.test_accuracy = static_cast<double>(correct) / n;
    sink({point("test_accuracy", result.test_accuracy, step),
          point("test_loss", loss_sum / n, step)},
         false);
    std::fprintf(stderr, "worker: step %lld test accuracy %.4f loss %.4f\n",
                 static_cast<long long>(step), result.test_accuracy,
                 loss_sum / n);
    return absl::OkStatus();
  };

  ParameterAccess::PendingStepEnd in_flight;
  // The weights of the next step, arriving part by part while it starts.
  std::unique_ptr<ParameterAccess::StepEndInProgress> incoming;
  // fc0/weight in row blocks at the parameter servers' chunk boundaries:
  // forward starts on the first rows that arrive, backward sends its first
  // blocks while it computes the next.
  const std::vector<int64_t> row_splits =
      overlap ? std::vector<int64_t>()
              : FirstLayerRowSplits(params->PartBoundaries(0),
                                    mlp->parameters()[0].shape);

  // Each push asks back its chunks' next weights, which land in the model
  // while backward still runs (the step no longer reads a tensor once its
  // gradient is handed out: kernels::Mlp::StepHooks).
  if (!overlap) params->PullWithPushes(weight_spans);

  Window window;
  int64_t clock = a.start_step();
  const bool bsp = spec.consistency().model() == ConsistencySpec::BSP;
  int64_t next_eval = (clock / eval_every + 1) * eval_every;
  // The weights for `clock`, when the previous step's FinishAndPull already
  // brought them.
  bool prefetched = false;
  int64_t prefetched_version = 0;
  while (clock < total_steps) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat("stopped at step ", clock));
    }
    const absl::Time t0 = absl::Now();
    absl::StatusOr<Batch> b = prefetcher->Next(options.batch_timeout);
    if (!b.ok()) return Annotate(b.status(), "next batch");
    // A survivor of an eviction takes over data shards from the next epoch
    // of its data.
    if (current_data_shards) {
      std::vector<int> now = current_data_shards();
      if (!now.empty() && now != shards_in_use &&
          prefetcher->Reassign(ShardAssignment{now, num_shards}, b->epoch + 1)
              .ok()) {
        shards_in_use = now;
      }
    }
    const absl::Time t1 = absl::Now();
    int64_t version = 0;
    // Time spent inside the step waiting for weights to arrive.
    absl::Duration awaited;
    // Once the previous step's end is over: the weights' version, and the
    // BSP catch-up (false: the job's steps are done).
    auto catch_up = [&] {
      if (bsp && version > clock) {
        // The job moved on without this worker (a backup worker whose
        // gradients were late, or a worker that rejoined): continue at the
        // current step rather than compute gradients that would be
        // dropped (the weights of step v are version v's).
        result.skipped_steps += version - clock;
        clock = version;
      }
      return clock < total_steps;
    };
    auto arrived = [&](const ParameterAccess::StepEnd& end) {
      window.staleness += static_cast<double>(end.staleness);
      window.staleness_steps++;
      version = end.version;
      return catch_up();
    };
    // All of the incoming weights (false: the job's steps are done).
    auto await_incoming = [&]() -> absl::StatusOr<bool> {
      std::unique_ptr<ParameterAccess::StepEndInProgress> in =
          std::move(incoming);
      absl::StatusOr<ParameterAccess::StepEnd> end = in->Wait();
      if (!end.ok()) return end.status();
      return arrived(*end);
    };
    // The evaluator needs all of the weights before the step.
    if (incoming != nullptr && clock >= next_eval) {
      PS_ASSIGN_OR_RETURN(const bool more, await_incoming());
      if (!more) {
        prefetcher->Recycle(*std::move(b));
        break;
      }
      for (int i = 0; i < mlp->num_parameters() && !direct; ++i) {
        PS_RETURN_IF_ERROR(mlp->SetParameter(i, weights[i]));
      }
    }
    const bool arriving = incoming != nullptr;
    if (arriving) {
      // Awaited part by part in the step (hooks below).
    } else if (prefetched) {
      version = prefetched_version;
      prefetched = false;
    } else {
      PS_ASSIGN_OR_RETURN(version, params->Pull(clock, weight_spans));
    }
    if (!arriving && !catch_up()) {
      prefetcher->Recycle(*std::move(b));
      break;
    }
    for (int i = 0; i < mlp->num_parameters() && !direct && !arriving; ++i) {
      PS_RETURN_IF_ERROR(mlp->SetParameter(i, weights[i]));
    }
    // The evaluator measures the weights every worker computes on.
    if (clock >= next_eval) {
      PS_RETURN_IF_ERROR(evaluate(clock));
      next_eval = (clock / eval_every + 1) * eval_every;
    }
    const absl::Time t2 = absl::Now();
    // Each gradient (block) is pushed as soon as backward produces it (the
    // output layer first), so sending overlaps the rest of backward.
    absl::Status push_status;
    const bool slowed =
        compute_factor > 1 || extra_delay > absl::ZeroDuration();
    auto push = [&](int i, int64_t begin, int64_t end) {
      if (!push_status.ok()) return;
      absl::Span<const float> g;
      if (direct) {
        kernels::DeviceSpan<const float> d = mlp->gradient(i);
        g = absl::MakeConstSpan(d.data + begin, end - begin);
      } else {
        absl::Span<float> host =
            absl::MakeSpan(grads[i]).subspan(begin, end - begin);
        push_status = mlp->GetGradientRange(i, begin, host);
        if (!push_status.ok()) return;
        g = host;
      }
      push_status = params->PushPart(clock, version, i, begin, g);
    };
    struct Part {
      int index;
      int64_t begin, end;
    };
    std::vector<Part> held;  // a slowed worker sends after its delay
    bool finished = false;   // the job's steps ended under this one
    kernels::Mlp::StepHooks hooks;
    hooks.first_weight_row_splits = row_splits;
    if (arriving) {
      hooks.before_use = [&](int index, int64_t begin,
                             int64_t end) -> absl::Status {
        if (incoming == nullptr) return absl::OkStatus();
        const absl::Time w0 = absl::Now();
        absl::Status s = incoming->AwaitWeights(index, begin, end);
        awaited += absl::Now() - w0;
        PS_RETURN_IF_ERROR(s);
        if (direct) return absl::OkStatus();
        return mlp->SetParameterRange(
            index, begin,
            absl::MakeConstSpan(weights[index]).subspan(begin, end - begin));
      };
      hooks.before_backward = [&]() -> absl::Status {
        const absl::Time w0 = absl::Now();
        absl::StatusOr<bool> more = await_incoming();
        awaited += absl::Now() - w0;
        PS_RETURN_IF_ERROR(more.status());
        if (!*more) {
          finished = true;
          return absl::CancelledError("the job's steps are done");
        }
        return absl::OkStatus();
      };
    }
    if (!overlap) {
      hooks.on_gradient_part = [&](int index, int64_t begin, int64_t end) {
        slowed ? held.push_back({index, begin, end}) : push(index, begin, end);
      };
    }
    absl::StatusOr<float> loss_or =
        mlp->TrainStep(b->images(), b->labels(), hooks);
    if (finished) {
      prefetcher->Recycle(*std::move(b));
      break;
    }
    PS_RETURN_IF_ERROR(loss_or.status());
    const float loss = *loss_or;
    const absl::Time t3 = absl::Now();
    if (slowed) {
      absl::SleepFor((t3 - t2 - awaited) * (compute_factor - 1) + extra_delay);
      for (const Part& p : held) push(p.index, p.begin, p.end);
    }
    PS_RETURN_IF_ERROR(push_status);
    const absl::Time t3b = absl::Now();
    // Unless this is the last step, the end of step also brings the next
    // step's weights (one round trip instead of two).
    if (overlap) {
      // The previous step's end brought the weights the next step computes
      // on (they lack this step's update: one more version of staleness).
      if (in_flight) {
        ParameterAccess::PendingStepEnd pending = std::move(in_flight);
        in_flight = nullptr;
        PS_ASSIGN_OR_RETURN(const ParameterAccess::StepEnd end, pending());
        window.staleness += static_cast<double>(end.staleness);
        window.staleness_steps++;
        for (int i = 0; i < mlp->num_parameters(); ++i) {
          if (direct) {
            // The weights that arrived become the model's; its previous
            // ones, no longer read, receive the next.
            PS_RETURN_IF_ERROR(mlp->SwapParameterBuffer(i, spare_weights[i]));
            kernels::DeviceSpan<float> p = mlp->parameter(i);
            weight_spans[i] = absl::MakeSpan(p.data, p.size);
          } else {
            std::copy(overlap_weights[i].begin(), overlap_weights[i].end(),
                      weight_spans[i].begin());
          }
        }
        prefetched_version = end.version;
      } else {
        prefetched_version = version;  // the first step: the same weights
      }
      // This step's gradient goes out from the spare buffers (the previous
      // step's push, which read them, is over); the model backpropagates
      // the next step into the ones they held.
      for (int i = 0; i < mlp->num_parameters(); ++i) {
        PS_RETURN_IF_ERROR(
            direct ? mlp->SwapGradientBuffer(i, spare_grads[i])
                   : mlp->GetGradient(i, absl::MakeSpan(overlap_grads[i])));
      }
      std::vector<absl::Span<const float>> grad_spans;
      std::vector<absl::Span<float>> next_spans;
      for (int i = 0; i < mlp->num_parameters(); ++i) {
        const int64_t n = mlp->parameters()[i].size;
        grad_spans.push_back(absl::MakeConstSpan(
            direct ? static_cast<float*>(spare_grads[i].data())
                   : overlap_grads[i].data(),
            n));
        next_spans.push_back(
            absl::MakeSpan(direct ? static_cast<float*>(spare_weights[i].data())
                                  : overlap_weights[i].data(),
                           n));
      }
      if (clock + 1 < total_steps) {
        in_flight = params->StartStepEnd(clock, version, std::move(grad_spans),
                                         std::move(next_spans));
        prefetched = true;
      } else {
        for (int i = 0; i < mlp->num_parameters(); ++i) {
          PS_RETURN_IF_ERROR(params->Push(clock, version, i, grad_spans[i]));
        }
        PS_ASSIGN_OR_RETURN(const int64_t staleness, params->Finish(clock));
        window.staleness += static_cast<double>(staleness);
        window.staleness_steps++;
      }
    } else if (clock + 1 < total_steps) {
      // The next step waits for these weights part by part.
      incoming = params->StartFinishAndPull(clock, weight_spans);
    } else {
      PS_ASSIGN_OR_RETURN(const int64_t staleness, params->Finish(clock));
      window.staleness += static_cast<double>(staleness);
      window.staleness_steps++;
    }
    const absl::Time t4 = absl::Now();
    prefetcher->Recycle(*std::move(b));

    window.steps++;
    window.loss += loss;
    window.wait += Ms(t1 - t0);
    window.pull += Ms(t2 - t1 + awaited);
    window.compute += Ms(t3b - t2 - awaited);
    window.push += Ms(t4 - t3b);
    result.last_loss = loss;
    if (window.steps >= options.report_every_steps ||
        clock + 1 >= total_steps) {
      const double n = static_cast<double>(window.steps);
      const double secs = absl::ToDoubleSeconds(absl::Now() - window.start);
      const int64_t step = clock + 1;
      sink({point("train_loss", window.loss / n, step),
            point("examples_per_sec", secs > 0 ? n * batch / secs : 0, step),
            point("step_time_ms", secs * 1000 / n, step),
            point("wait_ms", window.wait / n, step),
            point("pull_ms", window.pull / n, step),
            point("compute_ms", window.compute / n, step),
            point("push_ms", window.push / n, step),
            point("staleness",
                  window.staleness_steps > 0
                      ? window.staleness / window.staleness_steps
                      : 0.0,
                  step),
            point("clock", static_cast<double>(step), step)},
           false);
      window = Window();
    }
    result.steps++;
    ++clock;
    if (options.on_step) options.on_step(clock);
  }
  result.final_clock = clock;
  if (incoming != nullptr) {
    PS_RETURN_IF_ERROR(incoming->Wait().status());
    incoming.reset();
  }
  // Final evaluation on the final weights.
  if (is_evaluator()) {
    PS_ASSIGN_OR_RETURN(const int64_t version,
                        params->Pull(clock, weight_spans));
    (void)version;
    for (int i = 0; i < mlp->num_parameters() && !direct; ++i) {
      PS_RETURN_IF_ERROR(mlp->SetParameter(i, weights[i]));
    }
    PS_RETURN_IF_ERROR(evaluate(clock));
  }
  sink({}, true);
  return result;
}

}  // namespace ps::worker
