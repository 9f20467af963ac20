#include "worker/sparse_step.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "worker/local_parameter_access.h"
#include "worker/model/layer_model.h"
#include "worker/sparse_row_access.h"

namespace ps::worker {
namespace {

// Matrix factorization: rating = <user row, item row> + a global bias.
constexpr char kMf[] = R"pb(
  sparse_tables { name: "users" dim: 4 }
  sparse_tables { name: "items" dim: 4 }
  inputs { name: "user" }
  inputs { name: "item" }
  layers {
    name: "u"
    inputs: "user"
    embedding_bag { table: "users" }
  }
  layers {
    name: "v"
    inputs: "item"
    embedding_bag { table: "items" }
  }
  layers {
    name: "r"
    inputs: [ "u", "v" ]
    dot {}
  }
  head { loss: MEAN_SQUARED_ERROR }
)pb";

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
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kMf, &spec));
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
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kMf, &spec));
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
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kMf, &spec));
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
  EXPECT_EQ(t.access.sparse_pulls(), 0);
  EXPECT_EQ(t.access.pushes_with_rows(), kSteps - 1);
  EXPECT_EQ(t.plain_access.row_pulls(), kSteps);
  for (uint64_t key : {1000, 1003, 5007}) {
    std::vector<float> a(4), b(4);
    ASSERT_TRUE(
        t.access.PullSparse(0, key < 5000 ? 0 : 1, {key}, absl::MakeSpan(a))
            .ok());
    ASSERT_TRUE(t.plain_access
                    .PullSparse(0, key < 5000 ? 0 : 1, {key}, absl::MakeSpan(b))
                    .ok());
    EXPECT_EQ(a, b) << "key " << key;
  }
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

// An access with only the one-table calls: each table pulled on its own,
// the dense weights still fetched with the end of the step.
class OneTableAccess final : public ParameterAccess {
 public:
  explicit OneTableAccess(ParameterAccess& inner) : inner_(inner) {}
  absl::StatusOr<int64_t> Pull(int64_t clock,
                               std::vector<absl::Span<float>> t) override {
    ++pulls;
    return inner_.Pull(clock, std::move(t));
  }
  absl::Status Push(int64_t clock, int64_t base, int index,
                    absl::Span<const float> grad) override {
    return inner_.Push(clock, base, index, grad);
  }
  absl::StatusOr<int64_t> Finish(int64_t clock) override {
    return inner_.Finish(clock);
  }
  absl::Status PullSparse(int64_t clock, int table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<float> rows) override {
    return inner_.PullSparse(clock, table, keys, rows);
  }
  absl::Status PushSparse(int64_t clock, int64_t base, int table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads) override {
    return inner_.PushSparse(clock, base, table, keys, grads);
  }
  int pulls = 0;

 private:
  ParameterAccess& inner_;
};

TEST(SparseStepper, WorksThroughOneTableCalls) {
  Twins t;
  ASSERT_TRUE(t.ok());
  OneTableAccess access(t.access);
  ASSERT_EQ(SparseRowsOf(&access), nullptr);
  Ratings ratings;
  std::vector<data::Batch> batches;
  for (int i = 0; i < 5; ++i) batches.push_back(ratings.Next(16));
  SparseStepper stepper(*t.model, access);
  for (int step = 0; step < 5; ++step) {
    absl::StatusOr<SparseStepResult> want =
        RunSparseStep(*t.plain_model, t.plain_access, step, batches[step]);
    std::vector<const data::Batch*> next;
    if (step + 1 < 5) next.push_back(&batches[step + 1]);
    absl::StatusOr<SparseStepResult> got =
        stepper.Step(step, batches[step], next);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_EQ(got->loss, want->loss);
  }
  EXPECT_EQ(t.access.sparse_pulls(), 2 * 5);
  EXPECT_EQ(access.pulls, 5);  // the first step's, then one per step end
  EXPECT_EQ(t.access.dense(0), t.plain_access.dense(0));
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
