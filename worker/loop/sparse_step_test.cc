#include "worker/loop/sparse_step.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "worker/client/local_parameter_access.h"
#include "worker/client/parameter_access.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker {
namespace {

using client::LocalParameterAccess;

constexpr int kUsers = 16;
constexpr int kItems = 16;

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
    data::Batch b;
    b.size = n;
    b.label_kind = data::LabelKind::kFloat;
    b.sparse.resize(2);
    b.sparse[0].name = "user";
    b.sparse[1].name = "item";
    for (data::SparseField& f : b.sparse) f.offsets.push_back(0);
    for (int e = 0; e < n; ++e) {
      const int u = static_cast<int>(rng_() % kUsers);
      const int i = static_cast<int>(rng_() % kItems);
      b.sparse[0].keys.push_back(1000 + u);
      b.sparse[1].keys.push_back(5000 + i);
      for (data::SparseField& f : b.sparse) {
        f.offsets.push_back(static_cast<int32_t>(f.keys.size()));
      }
      b.labels.push_back(users_[2 * u] * items_[2 * i] +
                         users_[2 * u + 1] * items_[2 * i + 1] + 1.0f);
    }
    return b;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<float> users_, items_;
};

TEST(SparseStep, MatrixFactorizationLearnsThroughTheSeam) {
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(model::kMfModelSpec,
                                                            &spec));
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  auto model = model::CreateLayerModel(spec, 0, backend->get());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->num_parameters(), 1);  // r/bias
  LocalParameterAccess access({{0.0f}},
                              {{"users", 4, 0.3f}, {"items", 4, 0.3f}},
                              /*learning_rate=*/0.3f, /*seed=*/9);
  Ratings ratings;
  constexpr int kSteps = 600;
  double first = 0, last = 0;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch batch = ratings.Next(32);
    absl::StatusOr<SparseStepResult> r =
        RunSparseStep(**model, access, step, batch);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->unique_keys, 2 * 16);
    if (step < 20) first += r->loss / 20;
    if (step >= kSteps - 20) last += r->loss / 20;
  }
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
  EXPECT_EQ(access.table_size(0), kUsers);
  EXPECT_EQ(access.table_size(1), kItems);
  EXPECT_EQ(access.sparse_pushes(), 2 * kSteps);
  EXPECT_NEAR(access.dense(0)[0], 1.0f, 0.3f);  // the planted offset
}

TEST(SparseStep, ErrorsOfTheAccessReturn) {
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(model::kMfModelSpec,
                                                            &spec));
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  auto model = model::CreateLayerModel(spec, 0, backend->get());
  ASSERT_TRUE(model.ok()) << model.status();
  // One table only: the pull of the second fails.
  LocalParameterAccess access({{0.0f}}, {{"users", 4, 0.3f}}, 0.1f, 9);
  Ratings ratings;
  absl::StatusOr<SparseStepResult> r =
      RunSparseStep(**model, access, 0, ratings.Next(4));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

std::unique_ptr<TrainableModel> MfModel(kernels::Backend* backend) {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(model::kMfModelSpec,
                                                            &spec));
  auto model = model::CreateLayerModel(spec, 0, backend);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

LocalParameterAccess MfAccess() {
  return LocalParameterAccess({{0.0f}},
                              {{"users", 4, 0.3f}, {"items", 4, 0.3f}},
                              /*learning_rate=*/0.3f, /*seed=*/9);
}

// Two MF models, each with its in-process access: one driven by plain
// steps (the reference), one by a SparseStepper.
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

  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<TrainableModel> plain_model, model;
  LocalParameterAccess plain_access = MfAccess();
  LocalParameterAccess access = MfAccess();
};

// The row of `key` (a user's below 5000, else an item's) in `access`.
std::vector<float> RowOf(client::ParameterAccess& access, uint64_t key) {
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
void ExpectSameRows(client::ParameterAccess& a, client::ParameterAccess& b) {
  for (uint64_t key : {1000, 1003, 5007}) {
    EXPECT_EQ(RowOf(a, key), RowOf(b, key)) << "key " << key;
  }
}

// The same steps with the next batch's rows riding on the pushes give
// exactly the losses and weights of plain steps (the in-process access
// applies each push at once, so both see the same weights), with one pull
// of rows in all, and evaluations between steps do not disturb them.
TEST(SparseStepper, PrefetchedStepsEqualPlainSteps) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  std::vector<data::Batch> batches;
  constexpr int kSteps = 40;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(16));
  const data::Batch probe = ratings.Next(8);

  SparseStepper stepper(*t.model, t.access);
  int in_flight_calls = 0;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<SparseStepResult> want =
        RunSparseStep(*t.plain_model, t.plain_access, step, batches[step]);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<const data::Batch*> next;
    if (step + 1 < kSteps) next.push_back(&batches[step + 1]);
    absl::StatusOr<SparseStepResult> got =
        stepper.Step(step, batches[step], next, [&] { ++in_flight_calls; });
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->loss, want->loss) << "step " << step;
    EXPECT_EQ(got->unique_keys, want->unique_keys);
    if (step % 10 == 5) {
      // An evaluation between steps loads another batch into the model.
      ASSERT_TRUE(t.model->PrepareSparse(probe).ok());
      ASSERT_TRUE(t.model->EvaluateDataBatch(probe).ok());
    }
  }
  EXPECT_EQ(in_flight_calls, kSteps);
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));
  EXPECT_EQ(t.access.row_pulls(), 1);  // the first step's
  // The first step's weights too; the others came with the step ends.
  EXPECT_EQ(t.access.dense_pulls(), 1);
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 1);
  EXPECT_EQ(t.plain_access.row_pulls(), kSteps);
  EXPECT_EQ(t.plain_access.dense_pulls(), kSteps);
  ExpectSameRows(t.access, t.plain_access);
}

// A step whose batch is not the one announced (the plan moved) pulls its
// rows itself; a skipped clock pulls everything.
TEST(SparseStepper, AnotherBatchOrClockIsPulledAgain) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  const data::Batch b0 = ratings.Next(16), b1 = ratings.Next(16),
                    other = ratings.Next(16), b3 = ratings.Next(16);
  SparseStepper stepper(*t.model, t.access);
  struct Call {
    int64_t clock;
    const data::Batch* batch;
    std::vector<const data::Batch*> next;
  };
  for (const Call& c :
       {Call{0, &b0, {&b1}}, Call{1, &other, {&b1}}, Call{3, &b3, {}}}) {
    absl::StatusOr<SparseStepResult> want =
        RunSparseStep(*t.plain_model, t.plain_access, c.clock, *c.batch);
    absl::StatusOr<SparseStepResult> got =
        stepper.Step(c.clock, *c.batch, c.next);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_EQ(got->loss, want->loss) << "clock " << c.clock;
  }
  EXPECT_EQ(t.access.row_pulls(), 3);
  EXPECT_EQ(t.access.pushes_with_rows(), 2);
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));
}

// A next batch the model cannot read is not fetched for; its own step
// reports it.
TEST(SparseStepper, BadNextBatchFailsAtItsOwnStep) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  const data::Batch good = ratings.Next(8);
  data::Batch bad = ratings.Next(8);
  bad.sparse.pop_back();  // no "item" field
  SparseStepper stepper(*t.model, t.access);
  ASSERT_TRUE(stepper.Step(0, good, {&bad}).ok());
  EXPECT_EQ(t.access.pushes_with_rows(), 0);
  EXPECT_EQ(stepper.Step(1, bad, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An access that forwards the three calls to another and records, per
// clock, what the stepper asked of it and what each call answered: the
// calls a step needs, seen from outside (no side door into the access).
class CallRecorder final : public client::ParameterAccess {
 public:
  explicit CallRecorder(client::ParameterAccess& inner) : inner_(inner) {}

  // A clock's Pull calls, merged.
  struct Pulled {
    int tensors = 0;          // dense tensors read
    std::vector<int> tables;  // tables whose rows were read, in order
    std::deque<absl::StatusOr<client::CallResult>> results;
  };
  // A clock's Push and EndStep requests, merged.
  struct Stepped {
    std::set<int64_t> base_versions;
    std::map<int, int64_t> dense_elements;  // by tensor index
    std::vector<int> row_tables;            // tables whose rows were pushed
    std::vector<int> next_row_tables;       // tables whose rows were asked
    int ends = 0;
    size_t next_weights = 0;  // tensors its EndStep asked back
    std::deque<absl::StatusOr<client::CallResult>> end_results;
  };

  client::Handle Pull(client::PullArgs request) override {
    Pulled& p = pulled[request.clock];
    p.tensors += static_cast<int>(request.tensors.size());
    for (const client::SparsePull& r : request.rows) {
      p.tables.push_back(r.table);
    }
    p.results.emplace_back(client::CallResult{});
    return Recorded(inner_.Pull(std::move(request)), &p.results.back());
  }
  absl::Status Push(client::StepArgs request) override {
    Take(request);
    return inner_.Push(std::move(request));
  }
  client::Handle EndStep(client::StepArgs request) override {
    Stepped& s = Take(request);
    ++s.ends;
    s.next_weights += request.next_weights.size();
    s.end_results.emplace_back(client::CallResult{});
    return Recorded(inner_.EndStep(std::move(request)), &s.end_results.back());
  }
  std::vector<int64_t> PartBoundaries(int index) const override {
    return inner_.PartBoundaries(index);
  }
  void CancelCalls() override { inner_.CancelCalls(); }

  // By clock (std::map and std::deque: the results' addresses stay put).
  std::map<int64_t, Pulled> pulled;
  std::map<int64_t, Stepped> stepped;

 private:
  // Forwards a call's waits and keeps its result in `out`.
  class Forward final : public client::Handle::Call {
   public:
    Forward(client::Handle inner, absl::StatusOr<client::CallResult>* out)
        : inner_(std::move(inner)), out_(out) {}
    absl::Status AwaitPart(int index, int64_t begin, int64_t end) override {
      return inner_.AwaitPart(index, begin, end);
    }
    absl::StatusOr<client::CallResult> Wait() override {
      *out_ = inner_.Wait();
      return *out_;
    }

   private:
    client::Handle inner_;
    absl::StatusOr<client::CallResult>* out_;
  };
  static client::Handle Recorded(client::Handle inner,
                                 absl::StatusOr<client::CallResult>* out) {
    *out = absl::UnknownError("never waited for");
    return client::Handle(std::make_unique<Forward>(std::move(inner), out));
  }
  Stepped& Take(const client::StepArgs& request) {
    Stepped& s = stepped[request.clock];
    s.base_versions.insert(request.base_version);
    for (const client::TensorGrad& g : request.dense) {
      s.dense_elements[g.tensor_index] += static_cast<int64_t>(g.grad.size());
    }
    for (const client::SparsePush& r : request.rows) {
      s.row_tables.push_back(r.table);
    }
    for (const client::SparsePull& r : request.next_rows) {
      s.next_row_tables.push_back(r.table);
    }
    return s;
  }

  client::ParameterAccess& inner_;
};

// Through an access that only forwards the three calls, steps give the
// plain steps' losses and weights, and each step asks for what it needs
// once: the first step pulls the weights and both tables' rows, every step
// pushes its dense gradient and both tables' rows on the weights it
// computed on, and ends once, asking back the next step's weights and
// rows but for the last; every call's answer is waited for.
TEST(SparseStepper, WorksThroughAnAccessThatOnlyForwardsTheCalls) {
  Twins t;
  ASSERT_TRUE(t.ok());
  CallRecorder access(t.access);
  Ratings ratings;
  constexpr int kSteps = 5;
  std::vector<data::Batch> batches;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(16));
  SparseStepper stepper(*t.model, access);
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<SparseStepResult> want =
        RunSparseStep(*t.plain_model, t.plain_access, step, batches[step]);
    std::vector<const data::Batch*> next;
    if (step + 1 < kSteps) next.push_back(&batches[step + 1]);
    absl::StatusOr<SparseStepResult> got =
        stepper.Step(step, batches[step], next);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_EQ(got->loss, want->loss);
    EXPECT_EQ(got->unique_keys, want->unique_keys);
    EXPECT_EQ(got->staleness_ends, 1);
  }
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));

  ASSERT_EQ(access.pulled.size(), 1u);  // the first step's
  const CallRecorder::Pulled& first = access.pulled[0];
  EXPECT_EQ(first.tensors, 1);
  EXPECT_EQ(first.tables, (std::vector<int>{0, 1}));
  for (const auto& r : first.results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->version, 0);
  }
  ASSERT_EQ(access.stepped.size(), static_cast<size_t>(kSteps));
  for (int64_t clock = 0; clock < kSteps; ++clock) {
    SCOPED_TRACE("step " + std::to_string(clock));
    const CallRecorder::Stepped& s = access.stepped[clock];
    const bool last = clock == kSteps - 1;
    // Each step computes on the weights of the steps ended before it.
    EXPECT_EQ(s.base_versions, std::set<int64_t>{clock});
    EXPECT_EQ(s.dense_elements, (std::map<int, int64_t>{{0, 1}}));
    EXPECT_EQ(s.row_tables, (std::vector<int>{0, 1}));
    EXPECT_EQ(s.next_row_tables,
              last ? std::vector<int>{} : (std::vector<int>{0, 1}));
    EXPECT_EQ(s.ends, 1);
    EXPECT_EQ(s.next_weights, last ? 0u : 1u);
    ASSERT_EQ(s.end_results.size(), 1u);
    ASSERT_TRUE(s.end_results[0].ok()) << s.end_results[0].status();
    EXPECT_EQ(s.end_results[0]->version, last ? 0 : clock + 1);
    EXPECT_EQ(s.end_results[0]->staleness, 0);
  }
  // What the access counted agrees: rows pulled once, asked back by every
  // step but the last, pushed by every step.
  EXPECT_EQ(t.access.row_pulls(), 1);
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 1);
  EXPECT_EQ(t.access.sparse_pushes(), 2 * kSteps);
  EXPECT_EQ(t.access.steps_ended(), kSteps);
  ExpectSameRows(t.access, t.plain_access);
}

// With overlap (ASP, overlap_communication), step t + 1 computes on the
// rows and weights step t - 1's end brought: after the first two steps no
// row is pulled on its own, each step completes the previous step's end
// (the first none, the last its own too), and the model still learns.
TEST(SparseStepper, OverlappedStepsLearnOnRowsOfTheEndBeforeLast) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  std::vector<data::Batch> batches;
  constexpr int kSteps = 600;
  for (int i = 0; i < kSteps; ++i) batches.push_back(ratings.Next(32));
  SparseStepper stepper(*t.model, t.access, {.overlap = true});
  ASSERT_EQ(stepper.lookahead(), 2);
  double first = 0, last = 0;
  int64_t ends = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<const data::Batch*> ahead;
    for (int s = step + 1; s < kSteps && s <= step + 2; ++s) {
      ahead.push_back(&batches[s]);
    }
    absl::StatusOr<SparseStepResult> r =
        stepper.Step(step, batches[step], ahead);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->staleness_ends, step == 0            ? 0
                                 : step == kSteps - 1 ? 2
                                                      : 1)
        << "step " << step;
    ends += r->staleness_ends;
    if (step < 20) first += r->loss / 20;
    if (step >= kSteps - 20) last += r->loss / 20;
  }
  EXPECT_EQ(ends, kSteps);
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
  EXPECT_EQ(t.access.row_pulls(), 2);  // steps 0 and 1
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 2);
  EXPECT_EQ(t.access.sparse_pushes(), 2 * kSteps);
  EXPECT_TRUE(stepper.Drain().ok());  // nothing left on its way
}

// Drain completes a step end on its way (before an evaluation uses the
// access), and its staleness counts in the next step's result; a step on
// other keys than those fetched pulls its rows.
TEST(SparseStepper, DrainCompletesTheEndOnItsWay) {
  Twins t;
  ASSERT_TRUE(t.ok());
  Ratings ratings;
  const data::Batch b0 = ratings.Next(16), b1 = ratings.Next(16),
                    b2 = ratings.Next(16), other = ratings.Next(16);
  SparseStepper stepper(*t.model, t.access, {.overlap = true});
  absl::StatusOr<SparseStepResult> r = stepper.Step(0, b0, {&b1, &b2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->staleness_ends, 0);
  ASSERT_TRUE(stepper.Drain().ok());
  r = stepper.Step(1, b1, {&b2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->staleness_ends, 1);  // step 0's, completed by Drain
  r = stepper.Step(2, other, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->staleness_ends, 2);
  EXPECT_EQ(t.access.row_pulls(), 3);  // b0, b1, other
}

}  // namespace
}  // namespace ps::worker
