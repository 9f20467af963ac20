#include "worker/sparse_step.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "worker/local_parameter_access.h"
#include "worker/model/layer_model.h"

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

}  // namespace
}  // namespace ps::worker
