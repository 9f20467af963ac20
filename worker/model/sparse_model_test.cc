// Layer models with embedding bags over sparse tables, on batches of the
// data readers: the gradients of the dense tensors and of every pulled row
// against finite differences, and the sparse steps' preconditions.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu_backend.h"
#include "worker/data/batch.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker::model {
namespace {

// Two fields "a" and "b" read by a mean bag over table "t", "a" again by a
// weighted sum bag over the same table, a dense tower, DLRM's dot
// interaction and a logit.
constexpr char kDlrm[] = R"pb(
  sparse_tables { name: "t" dim: 4 }
  inputs { name: "dense" shape: 3 }
  inputs { name: "a" }
  inputs { name: "b" }
  layers {
    name: "emb"
    inputs: [ "a", "b" ]
    embedding_bag { table: "t" mode: MEAN }
  }
  layers {
    name: "embw"
    inputs: "a"
    embedding_bag { table: "t" weighted: true }
  }
  layers {
    name: "d"
    inputs: "dense"
    dense { units: 4 activation: TANH }
  }
  layers {
    name: "i"
    inputs: [ "d", "emb", "embw" ]
    dot_interaction {}
  }
  layers {
    name: "c"
    inputs: [ "i", "d" ]
    concat {}
  }
  layers {
    name: "out"
    inputs: "c"
    dense { units: 1 }
  }
  head { loss: SIGMOID_CROSS_ENTROPY }
)pb";

data::SparseField Field(const std::string& name,
                        std::vector<std::vector<uint64_t>> bags,
                        bool weighted) {
  data::SparseField f;
  f.name = name;
  f.offsets.push_back(0);
  float w = 0.5f;
  for (const auto& bag : bags) {
    for (uint64_t k : bag) {
      f.keys.push_back(k);
      if (weighted) f.weights.push_back(w += 0.25f);
    }
    f.offsets.push_back(static_cast<int32_t>(f.keys.size()));
  }
  return f;
}

// Three examples; keys repeat within and across fields, one bag is empty.
data::Batch ClickBatch() {
  data::Batch b;
  b.size = 3;
  b.dense_dim = 3;
  b.dense = RandomValues(9, 1.0f, 5);
  b.sparse.push_back(Field("a", {{7, 9}, {9}, {}}, true));
  b.sparse.push_back(Field("b", {{100}, {7, 7}, {42}}, false));
  b.label_kind = data::LabelKind::kFloat;
  b.labels = {1.0f, 0.0f, 1.0f};
  return b;
}

std::unique_ptr<TrainableModel> Make(kernels::Backend* backend,
                                     const std::string& text) {
  auto m = CreateLayerModel(SpecFromText(text), 0, backend);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

TEST(SparseLayerModel, GradientsMatchFiniteDifferences) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  std::unique_ptr<TrainableModel> m = Make(backend->get(), kDlrm);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->sparse_tables().size(), 1u);
  EXPECT_EQ(m->sparse_tables()[0].name, "t");
  EXPECT_EQ(m->sparse_tables()[0].dim, 4);
  for (int i = 0; i < m->num_parameters(); ++i) {
    ASSERT_TRUE(m->SetParameterRange(
                     i, 0, RandomValues(m->parameters()[i].size, 0.5f, 30 + i))
                    .ok());
  }
  const data::Batch batch = ClickBatch();
  absl::StatusOr<std::vector<std::vector<uint64_t>>> keys =
      m->PrepareSparse(batch);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::vector<uint64_t>>{{7, 9, 42, 100}}));
  std::vector<float> rows = RandomValues(16, 0.5f, 77);
  ASSERT_TRUE(m->SetSparseRows(0, rows).ok());
  ASSERT_TRUE(m->TrainStep(batch, {}).ok());
  std::vector<float> row_grad(16);
  ASSERT_TRUE(m->GetSparseGradient(0, absl::MakeSpan(row_grad)).ok());

  auto loss = [&] {
    absl::StatusOr<ModelEvaluation> e = m->Evaluate(batch);
    EXPECT_TRUE(e.ok()) << e.status();
    return static_cast<double>(e->loss);
  };
  constexpr float kEps = 1e-3f;
  for (size_t j = 0; j < rows.size(); ++j) {
    const float saved = rows[j];
    rows[j] = saved + kEps;
    ASSERT_TRUE(m->SetSparseRows(0, rows).ok());
    const double up = loss();
    rows[j] = saved - kEps;
    ASSERT_TRUE(m->SetSparseRows(0, rows).ok());
    const double down = loss();
    rows[j] = saved;
    const double numeric = (up - down) / (2 * kEps);
    EXPECT_NEAR(row_grad[j], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << "row " << j / 4 << " element " << j % 4;
  }
  ASSERT_TRUE(m->SetSparseRows(0, rows).ok());
  for (int i = 0; i < m->num_parameters(); ++i) {
    std::vector<float> g(m->parameters()[i].size);
    ASSERT_TRUE(m->GetGradientRange(i, 0, absl::MakeSpan(g)).ok());
    std::vector<float> w = RandomValues(m->parameters()[i].size, 0.5f, 30 + i);
    for (size_t j = 0; j < w.size(); ++j) {
      const float saved = w[j];
      auto at = [&](float v) {
        EXPECT_TRUE(m->SetParameterRange(i, j, std::vector<float>{v}).ok());
        return loss();
      };
      const double numeric = (at(saved + kEps) - at(saved - kEps)) / (2 * kEps);
      at(saved);
      EXPECT_NEAR(g[j], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << m->parameters()[i].name << " element " << j;
    }
  }
}

TEST(SparseLayerModel, StepsNeedTheirSparseFields) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  std::unique_ptr<TrainableModel> m = Make(backend->get(), kDlrm);
  ASSERT_NE(m, nullptr);
  data::Batch batch = ClickBatch();
  // Before PrepareSparse.
  EXPECT_EQ(m->TrainStep(batch, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->Evaluate(batch).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Without the weights the weighted bag reads.
  data::Batch unweighted = batch;
  unweighted.sparse[0].weights.clear();
  absl::Status s = m->PrepareSparse(unweighted).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s;
  // Without a field.
  data::Batch missing = batch;
  missing.sparse.pop_back();
  s = m->PrepareSparse(missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s;
  // Rows of the wrong size, a table that is not there.
  ASSERT_TRUE(m->PrepareSparse(batch).ok());
  EXPECT_FALSE(m->SetSparseRows(0, std::vector<float>(15)).ok());
  EXPECT_FALSE(m->SetSparseRows(1, std::vector<float>(16)).ok());
  // A batch PrepareSparse did not load (here an IDX one, which has no sparse
  // fields; PrepareSparse loaded `batch`) neither trains nor evaluates.
  const data::Batch idx = BatchOf(RandomData(2, 3, 2, 1), 0, 2);
  EXPECT_EQ(m->TrainStep(idx, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->Evaluate(idx).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Loading a batch again (as a step's keys are named before the step and
// loaded once more by it) gives the same keys and gradients, which start
// from zero again; another batch in between is loaded in full.
TEST(SparseLayerModel, LoadingABatchAgainStartsItsGradientsAfresh) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  std::unique_ptr<TrainableModel> m = Make(backend->get(), kDlrm);
  ASSERT_NE(m, nullptr);
  for (int i = 0; i < m->num_parameters(); ++i) {
    ASSERT_TRUE(m->SetParameterRange(
                     i, 0, RandomValues(m->parameters()[i].size, 0.5f, 30 + i))
                    .ok());
  }
  const data::Batch batch = ClickBatch();
  data::Batch other = ClickBatch();
  other.sparse[1].keys = {5, 8, 8, 9};  // same bags' sizes, other ids
  const std::vector<float> rows = RandomValues(16, 0.5f, 77);
  const auto step = [&](const data::Batch& b, std::vector<uint64_t>* keys) {
    absl::StatusOr<std::vector<std::vector<uint64_t>>> k = m->PrepareSparse(b);
    EXPECT_TRUE(k.ok()) << k.status();
    *keys = (*k)[0];
    std::vector<float> r(keys->size() * 4, 0.25f);
    if (&b == &batch) r = rows;
    EXPECT_TRUE(m->SetSparseRows(0, r).ok());
    EXPECT_TRUE(m->TrainStep(b, {}).ok());
    std::vector<float> g(r.size());
    EXPECT_TRUE(m->GetSparseGradient(0, absl::MakeSpan(g)).ok());
    return g;
  };
  std::vector<uint64_t> keys, again, others;
  const std::vector<float> first = step(batch, &keys);
  EXPECT_EQ(step(batch, &again), first);
  EXPECT_EQ(again, keys);
  step(other, &others);
  EXPECT_EQ(others, (std::vector<uint64_t>{5, 7, 8, 9}));
  EXPECT_EQ(step(batch, &again), first);
  EXPECT_EQ(again, (std::vector<uint64_t>{7, 9, 42, 100}));
}

// A dense layer model trains on the readers' batches too, with class or
// real labels as its head takes them.
TEST(SparseLayerModel, DenseModelsTakeReaderBatches) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  std::unique_ptr<TrainableModel> m = Make(backend->get(), R"pb(
    inputs { name: "dense" shape: 3 }
    layers {
      name: "out"
      inputs: "dense"
      dense { units: 1 }
    }
    head { loss: MEAN_SQUARED_ERROR }
  )pb");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->sparse_tables().empty());
  data::Batch batch = ClickBatch();
  batch.sparse.clear();
  absl::StatusOr<std::vector<std::vector<uint64_t>>> keys =
      m->PrepareSparse(batch);
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->empty());
  ASSERT_TRUE(m->SetParameterRange(1, 0, std::vector<float>{0.5f}).ok());
  absl::StatusOr<float> loss = m->TrainStep(batch, {});
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, 0.25f, 1e-6);  // (0.5 - y)^2 for y in {0, 1}
  batch.label_kind = data::LabelKind::kNone;
  EXPECT_FALSE(m->TrainStep(batch, {}).ok());
  batch.dense_dim = 2;
  batch.dense.resize(6);
  batch.label_kind = data::LabelKind::kFloat;
  EXPECT_EQ(m->TrainStep(batch, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::worker::model
