#include "worker/model/model_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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
