// Shared by the step pipeline's tests on a model with sparse tables
// (matrix factorization over two embedding tables, against the in-process
// parameter access): batches of planted ratings, the models and accesses,
// a plain reference step, a whole step as the trainer runs it, and an
// access that records the calls it forwards.
#ifndef PS_WORKER_LOOP_SPARSE_PIPELINE_TEST_UTIL_H_
#define PS_WORKER_LOOP_SPARSE_PIPELINE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "proto/config.pb.h"
#include "worker/client/local_parameter_access.h"
#include "worker/client/parameter_access.h"
#include "worker/data/batch.h"
#include "worker/loop/step_pipeline.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker::sparse_testing {

using client::LocalParameterAccess;
using Keys = std::vector<std::vector<uint64_t>>;

inline constexpr int kUsers = 16;
inline constexpr int kItems = 16;

// Ratings <U[u], V[i]> + 1 of planted rank-2 factors, `n` random pairs.
class Ratings {
 public:
  Ratings() : rng_(3) {
    std::uniform_real_distribution<float> f(-1.0f, 1.0f);
    for (auto* m : {&users_, &items_}) {
      for (int k = 0; k < kUsers * 2; ++k) m->push_back(f(rng_));
    }
  }
  data::Batch Next(int n) {
    std::vector<uint64_t> users, items;
    std::vector<float> labels;
    for (int e = 0; e < n; ++e) {
      const int u = static_cast<int>(rng_() % kUsers);
      const int i = static_cast<int>(rng_() % kItems);
      users.push_back(1000 + u);
      items.push_back(5000 + i);
      labels.push_back(users_[2 * u] * items_[2 * i] +
                       users_[2 * u + 1] * items_[2 * i + 1] + 1.0f);
    }
    return model::MfBatch(users, items, labels);
  }

 private:
  std::mt19937_64 rng_;
  std::vector<float> users_, items_;
};

inline std::unique_ptr<TrainableModel> MfModel(kernels::Backend* backend) {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(model::kMfModelSpec,
                                                            &spec));
  auto model = model::CreateLayerModel(spec, 0, backend);
  EXPECT_TRUE(model.ok()) << model.status();
  if (model.ok()) {
    EXPECT_EQ((*model)->num_parameters(), 1);  // r/bias
  }
  return model.ok() ? *std::move(model) : nullptr;
}

inline LocalParameterAccess MfAccess() {
  return LocalParameterAccess({{0.0f}},
                              {{"users", 4, 0.3f}, {"items", 4, 0.3f}},
                              /*learning_rate=*/0.3f, /*seed=*/9);
}

inline StepPipelineOptions Options(bool overlap, int64_t total_steps,
                                   bool bsp = false) {
  StepPipelineOptions o;
  o.bsp = bsp;
  o.overlap = overlap;
  o.start_clock = 0;
  o.total_steps = total_steps;
  return o;
}

// The unique keys per table of `batch`, as `model` names them.
inline Keys KeysOf(TrainableModel& model, const data::Batch& batch) {
  absl::StatusOr<Keys> keys = model.PrepareSparse(batch);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys.ok() ? *std::move(keys) : Keys();
}

// The reference: one step by hand through the three calls, nothing
// prefetched and nothing fetched for later (what RunSparseStep was): the
// batch's keys, a pull of the weights and the rows of step `clock`, forward
// and backward, then one end of step with the dense gradient and the row
// gradients, waited for.
struct PlainResult {
  float loss = 0;
  Keys keys;  // the batch's unique keys per table
};
inline absl::StatusOr<PlainResult> PlainStep(TrainableModel& model,
                                             client::ParameterAccess& access,
                                             int64_t clock,
                                             const data::Batch& batch) {
  PlainResult out;
  PS_ASSIGN_OR_RETURN(out.keys, model.PrepareSparse(batch));
  const std::vector<SparseTableInfo>& tables = model.sparse_tables();
  std::vector<std::vector<float>> weights, grads, rows(out.keys.size()),
      row_grads(out.keys.size());
  for (const ParameterInfo& p : model.parameters()) {
    weights.emplace_back(p.size);
    grads.emplace_back(p.size);
  }
  client::PullArgs pull;
  pull.clock = clock;
  for (std::vector<float>& w : weights)
    pull.tensors.push_back(absl::MakeSpan(w));
  for (size_t t = 0; t < out.keys.size(); ++t) {
    rows[t].resize(out.keys[t].size() * tables[t].dim);
    row_grads[t].resize(rows[t].size());
    pull.rows.push_back(
        {static_cast<int>(t), out.keys[t], absl::MakeSpan(rows[t])});
  }
  PS_ASSIGN_OR_RETURN(const client::CallResult pulled,
                      access.Pull(std::move(pull)).Wait());
  for (int i = 0; i < model.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(model.SetParameterRange(i, 0, weights[i]));
  }
  for (size_t t = 0; t < rows.size(); ++t) {
    PS_RETURN_IF_ERROR(model.SetSparseRows(static_cast<int>(t), rows[t]));
  }
  PS_ASSIGN_OR_RETURN(out.loss, model.TrainStep(batch, ModelStepHooks()));
  std::vector<absl::Span<const float>> dense;
  for (int i = 0; i < model.num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(model.GetGradientRange(i, 0, absl::MakeSpan(grads[i])));
    dense.push_back(grads[i]);
  }
  client::StepArgs end;
  end.clock = clock;
  end.base_version = pulled.version;
  end.dense = client::WholeTensors(dense);
  for (size_t t = 0; t < row_grads.size(); ++t) {
    PS_RETURN_IF_ERROR(model.GetSparseGradient(static_cast<int>(t),
                                               absl::MakeSpan(row_grads[t])));
    end.rows.push_back({static_cast<int>(t), out.keys[t], row_grads[t]});
  }
  PS_RETURN_IF_ERROR(access.EndStep(std::move(end)).Wait().status());
  return out;
}

// An evaluation between steps as the evaluator makes one (ScoreOnTestData):
// the probe's rows pulled through `access` at `clock` into the model, then
// forward over it. It loads another batch's keys and rows into the model.
inline absl::Status EvaluateProbe(TrainableModel& model,
                                  client::ParameterAccess& access,
                                  int64_t clock, const data::Batch& probe) {
  PS_ASSIGN_OR_RETURN(const Keys keys, model.PrepareSparse(probe));
  std::vector<std::vector<float>> rows(keys.size());
  client::PullArgs pull;
  pull.clock = clock;
  for (size_t t = 0; t < keys.size(); ++t) {
    rows[t].resize(keys[t].size() * model.sparse_tables()[t].dim);
    pull.rows.push_back(
        {static_cast<int>(t), keys[t], absl::MakeSpan(rows[t])});
  }
  PS_RETURN_IF_ERROR(access.Pull(std::move(pull)).Wait().status());
  for (size_t t = 0; t < rows.size(); ++t) {
    PS_RETURN_IF_ERROR(model.SetSparseRows(static_cast<int>(t), rows[t]));
  }
  PS_ASSIGN_OR_RETURN(const ModelEvaluation e, model.Evaluate(probe));
  if (!std::isfinite(e.loss) || e.examples != probe.size) {
    return absl::InternalError(absl::StrCat("evaluation: loss ", e.loss,
                                            " over ", e.examples, " examples"));
  }
  return absl::OkStatus();
}

// One whole step of `p` on `batch` as the trainer runs it: Pull (all the
// weights when an `evaluation` is due, which then runs), Compute, EndStep
// asking for the rows of `ahead` (the batch of step clock() + lookahead();
// null: none), what the pipeline observed, NextStep.
struct StepOutcome {
  float loss = 0;
  StepObservations seen;
};
inline absl::StatusOr<StepOutcome> RunStep(
    StepPipeline& p, const data::Batch& batch, const data::Batch* ahead,
    const std::function<absl::Status()>& evaluation = nullptr) {
  const int64_t clock = p.clock();
  PS_ASSIGN_OR_RETURN(const bool more, p.Pull(evaluation != nullptr));
  if (!more) return absl::OutOfRangeError("no step to run");
  if (p.clock() != clock) {
    return absl::InternalError(
        absl::StrCat("the clock moved from ", clock, " to ", p.clock()));
  }
  if (evaluation != nullptr) PS_RETURN_IF_ERROR(evaluation());
  PS_ASSIGN_OR_RETURN(const std::optional<float> loss, p.Compute(batch));
  if (!loss.has_value()) return absl::OutOfRangeError("the steps ended");
  PS_RETURN_IF_ERROR(p.EndStep(ahead));
  StepOutcome out;
  out.loss = *loss;
  out.seen = p.TakeObservations();
  p.NextStep();
  return out;
}

// Two MF models, each with its in-process access: one driven by plain
// steps (the reference), one by a StepPipeline.
struct Twins {
  Twins() {
    auto b = kernels::CreateCpuBackend({});
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return;
    backend = *std::move(b);
    plain_model = MfModel(backend.get());
    model = MfModel(backend.get());
  }
  bool ok() const { return plain_model != nullptr && model != nullptr; }

  // A pipeline driving `model` through `params` (default: `access`).
  std::unique_ptr<StepPipeline> Make(
      StepPipelineOptions options, client::ParameterAccess* params = nullptr) {
    auto p = StepPipeline::Create(model.get(), backend.get(),
                                  params != nullptr ? params : &access,
                                  std::move(options));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<TrainableModel> plain_model, model;
  LocalParameterAccess plain_access = MfAccess();
  LocalParameterAccess access = MfAccess();
};

// The row of `key` (a user's below 5000, else an item's) in `access`.
inline std::vector<float> RowOf(client::ParameterAccess& access, uint64_t key) {
  std::vector<float> row(4);
  const uint64_t keys[] = {key};
  client::PullArgs pull;
  pull.rows.push_back(
      {.table = key < 5000 ? 0 : 1, .keys = keys, .rows = absl::MakeSpan(row)});
  absl::StatusOr<client::CallResult> r = access.Pull(std::move(pull)).Wait();
  EXPECT_TRUE(r.ok()) << r.status();
  return row;
}

// Rows of a few keys are the same in both.
inline void ExpectSameRows(client::ParameterAccess& a,
                           client::ParameterAccess& b) {
  for (uint64_t key : {1000, 1003, 5007}) {
    EXPECT_EQ(RowOf(a, key), RowOf(b, key)) << "key " << key;
  }
}

// An access that forwards the three calls to another and records, per
// clock, what the pipeline asked of it and what each call answered: the
// calls a step needs, seen from outside (no side door into the access).
// The ends of the clocks in `fail_ends` are forwarded but answer
// UNAVAILABLE (a step end lost on its way).
class CallRecorder final : public client::ParameterAccess {
 public:
  explicit CallRecorder(client::ParameterAccess& inner) : inner_(inner) {}

  // A clock's Pull calls, merged.
  struct Pulled {
    int tensors = 0;          // dense tensors read
    std::vector<int> tables;  // tables whose rows were read, in order
    Keys keys;                // their keys, likewise
    std::deque<absl::StatusOr<client::CallResult>> results;
  };
  // A clock's Push and EndStep requests, merged.
  struct Stepped {
    std::set<int64_t> base_versions;
    std::map<int, int64_t> dense_elements;  // by tensor index
    std::vector<int> row_tables;            // tables whose rows were pushed
    Keys row_keys;                          // their keys, likewise
    std::vector<int> next_row_tables;       // tables whose rows were asked
    Keys next_row_keys;                     // their keys, likewise
    int pushes = 0;
    int ends = 0;
    size_t next_weights = 0;  // tensors its EndStep asked back
    std::deque<absl::StatusOr<client::CallResult>> end_results;
  };

  client::Handle Pull(client::PullArgs request) override {
    Pulled& p = pulled[request.clock];
    p.tensors += static_cast<int>(request.tensors.size());
    for (const client::SparsePull& r : request.rows) {
      p.tables.push_back(r.table);
      p.keys.emplace_back(r.keys.begin(), r.keys.end());
    }
    p.results.emplace_back(client::CallResult{});
    return Recorded(inner_.Pull(std::move(request)), &p.results.back(),
                    /*fail=*/false);
  }
  absl::Status Push(client::StepArgs request) override {
    ++Take(request).pushes;
    return inner_.Push(std::move(request));
  }
  client::Handle EndStep(client::StepArgs request) override {
    Stepped& s = Take(request);
    ++s.ends;
    s.next_weights += request.next_weights.size();
    s.end_results.emplace_back(client::CallResult{});
    const bool fail = fail_ends.contains(request.clock);
    return Recorded(inner_.EndStep(std::move(request)), &s.end_results.back(),
                    fail);
  }
  std::vector<int64_t> PartBoundaries(int index) const override {
    return inner_.PartBoundaries(index);
  }
  void CancelCalls() override { inner_.CancelCalls(); }

  std::set<int64_t> fail_ends;
  // By clock (std::map and std::deque: the results' addresses stay put).
  std::map<int64_t, Pulled> pulled;
  std::map<int64_t, Stepped> stepped;

 private:
  // Forwards a call's waits and keeps its result in `out`; with `fail`,
  // answers UNAVAILABLE instead.
  class Forward final : public client::Handle::Call {
   public:
    Forward(client::Handle inner, absl::StatusOr<client::CallResult>* out,
            bool fail)
        : inner_(std::move(inner)), out_(out), fail_(fail) {}
    absl::Status AwaitPart(int index, int64_t begin, int64_t end) override {
      if (fail_) return Lost();
      return inner_.AwaitPart(index, begin, end);
    }
    absl::StatusOr<client::CallResult> Wait() override {
      *out_ = inner_.Wait();
      if (fail_) *out_ = Lost();
      return *out_;
    }

   private:
    static absl::Status Lost() {
      return absl::UnavailableError("the step end was lost");
    }
    client::Handle inner_;
    absl::StatusOr<client::CallResult>* out_;
    const bool fail_;
  };
  static client::Handle Recorded(client::Handle inner,
                                 absl::StatusOr<client::CallResult>* out,
                                 bool fail) {
    *out = absl::UnknownError("never waited for");
    return client::Handle(
        std::make_unique<Forward>(std::move(inner), out, fail));
  }
  Stepped& Take(const client::StepArgs& request) {
    Stepped& s = stepped[request.clock];
    s.base_versions.insert(request.base_version);
    for (const client::TensorGrad& g : request.dense) {
      s.dense_elements[g.tensor_index] += static_cast<int64_t>(g.grad.size());
    }
    for (const client::SparsePush& r : request.rows) {
      s.row_tables.push_back(r.table);
      s.row_keys.emplace_back(r.keys.begin(), r.keys.end());
    }
    for (const client::SparsePull& r : request.next_rows) {
      s.next_row_tables.push_back(r.table);
      s.next_row_keys.emplace_back(r.keys.begin(), r.keys.end());
    }
    return s;
  }

  client::ParameterAccess& inner_;
};

// The staleness_ends a step's observations (taken after its EndStep) count
// when every step's end goes out on its way and is completed in the next
// step (without overlap: its Pull; with overlap: its EndStep): none for the
// first step, the previous step's, and the last step's own too.
inline int64_t EndsSeenAt(int64_t step, int64_t steps) {
  if (step == 0) return steps == 1 ? 1 : 0;
  return step == steps - 1 ? 2 : 1;
}

// MF learns through the seam, driven by the pipeline: with every step
// pulling its own rows (nothing ahead) and with each step's end bringing
// the next batch's rows. Each step pushes one gradient row per unique key
// of each table (at most 16 users and 16 items), and every row the access
// holds came into being on a pull.

}  // namespace ps::worker::sparse_testing

#endif  // PS_WORKER_LOOP_SPARSE_PIPELINE_TEST_UTIL_H_
