#include "worker/model/model_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "google/protobuf/text_format.h"
#include "worker/data/idx_batch_reader.h"

namespace ps::worker::model {

data::Batch MfBatch(const std::vector<uint64_t>& users,
                    const std::vector<uint64_t>& items,
                    const std::vector<float>& labels) {
  data::Batch b;
  b.size = static_cast<int>(labels.size());
  b.label_kind = data::LabelKind::kFloat;
  b.labels = labels;
  b.sparse.resize(2);
  b.sparse[0].name = "user";
  b.sparse[0].keys = users;
  b.sparse[1].name = "item";
  b.sparse[1].keys = items;
  for (data::SparseField& f : b.sparse) {
    for (int e = 0; e <= b.size; ++e) f.offsets.push_back(e);
  }
  return b;
}

ModelSpec SpecFromText(const std::string& text) {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec))
      << text;
  return spec;
}

std::vector<float> RandomValues(int64_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

Dataset RandomData(int64_t n, int64_t size, int classes, uint64_t seed) {
  Dataset d;
  d.num_examples = n;
  d.rows = 1;
  d.cols = static_cast<int>(size);
  d.num_classes = classes;
  d.images = RandomValues(n * size, 1.0f, seed);
  std::mt19937_64 rng(seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<int32_t>(rng() % classes));
  }
  return d;
}

absl::StatusOr<data::Batch> IdxBatchOf(const Dataset& d, int64_t begin,
                                       int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(ids.begin(), ids.end(), begin);
  return data::IdxBatch(d, ids, begin);
}

data::Batch BatchOf(const Dataset& d, int64_t begin, int n) {
  absl::StatusOr<data::Batch> b = IdxBatchOf(d, begin, n);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : data::Batch();
}

absl::StatusOr<ModelEvaluation> EvaluateRange(TrainableModel& model,
                                              const Dataset& d, int64_t begin,
                                              int64_t count) {
  absl::StatusOr<data::Batch> b = IdxBatchOf(d, begin, count);
  if (!b.ok()) return b.status();
  return model.Evaluate(*b);
}

}  // namespace ps::worker::model

namespace ps::worker::model {

Dataset DatasetOf(std::vector<float> images, std::vector<int32_t> labels,
                  int64_t size, int classes) {
  Dataset d;
  d.num_examples = static_cast<int64_t>(labels.size());
  d.rows = 1;
  d.cols = static_cast<int>(size);
  d.num_classes = classes;
  d.images = std::move(images);
  d.labels = std::move(labels);
  return d;
}

ModelSpec MlpOf(const std::vector<int64_t>& sizes, Activation act) {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(sizes.front());
  for (size_t i = 1; i + 1 < sizes.size(); ++i) {
    spec.mutable_mlp()->add_hidden(sizes[i]);
  }
  spec.mutable_mlp()->set_num_classes(sizes.back());
  spec.mutable_mlp()->set_activation(act);
  return spec;
}

void InitializeMlp(kernels::Backend* backend, TrainableModel* model,
                   Activation act, uint64_t seed) {
  const kernels::Initializer kind = act == TANH
                                        ? kernels::Initializer::kXavierUniform
                                        : kernels::Initializer::kHeUniform;
  for (int i = 0; i < model->num_parameters(); ++i) {
    const ParameterInfo& p = model->parameters()[i];
    if (p.shape.size() == 2) {
      ASSERT_TRUE(backend
                      ->Initialize(kind, seed + i, p.shape[0], p.shape[1],
                                   model->parameter(i))
                      .ok());
    } else {
      ASSERT_TRUE(backend->Fill(0.0f, model->parameter(i)).ok());
    }
  }
}

std::vector<float> ParameterOf(kernels::Backend* backend, TrainableModel* model,
                               int index) {
  kernels::DeviceSpan<float> p = model->parameter(index);
  std::vector<float> out(p.size);
  EXPECT_TRUE(backend
                  ->CopyToHost(p.data, out.data(),
                               p.size * static_cast<int64_t>(sizeof(float)))
                  .ok());
  return out;
}

std::vector<float> GradientOf(TrainableModel* model, int index) {
  std::vector<float> g(model->parameters()[index].size);
  EXPECT_TRUE(model->GetGradientRange(index, 0, absl::MakeSpan(g)).ok());
  return g;
}

}  // namespace ps::worker::model
