#include "worker/model/model_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>

#include "google/protobuf/text_format.h"

namespace ps::worker::model {

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

Batch BatchOf(const Dataset& d, int64_t begin, int n) {
  Batch b;
  b.size = n;
  b.example_size = d.example_size();
  b.buffer =
      HeapHostBuffer(n * (d.example_size() * sizeof(float) + sizeof(int32_t)));
  float* x = static_cast<float*>(b.buffer.data());
  std::copy(d.images.begin() + begin * d.example_size(),
            d.images.begin() + (begin + n) * d.example_size(), x);
  std::copy(d.labels.begin() + begin, d.labels.begin() + begin + n,
            reinterpret_cast<int32_t*>(x + n * d.example_size()));
  return b;
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
