// Helpers for the model layer's tests: specs from text, batches and
// datasets of fixed pseudo-random values.
#ifndef PS_WORKER_MODEL_MODEL_TEST_UTIL_H_
#define PS_WORKER_MODEL_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"
#include "worker/data/dataset.h"
#include "worker/model/trainable_model.h"

namespace ps::worker::model {

// Matrix factorization over two sparse tables (ModelSpec text): rating =
// <user row, item row>, dim 4, squared error.
inline constexpr char kMfModelSpec[] = R"pb(
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
    name: "mf"
    inputs: [ "u", "v" ]
    dot {}
  }
  head { loss: MEAN_SQUARED_ERROR }
)pb";

// A batch for kMfModelSpec: example e is user users[e]'s rating labels[e]
// of item items[e] (fields "user" and "item", one id each).
data::Batch MfBatch(const std::vector<uint64_t>& users,
                    const std::vector<uint64_t>& items,
                    const std::vector<float>& labels);

// A ModelSpec from its text format (fails the test on a parse error).
ModelSpec SpecFromText(const std::string& text);

// `n` examples of `size` values in [-1, 1) from `seed`, labels in
// [0, classes).
Dataset RandomData(int64_t n, int64_t size, int classes, uint64_t seed);

// Examples [begin, begin + n) of `d`, in order, as a data reader's batch
// (data::IdxBatch: dense = the pixels, classes = the labels).
// INVALID_ARGUMENT for examples outside `d`.
absl::StatusOr<data::Batch> IdxBatchOf(const Dataset& d, int64_t begin,
                                       int64_t n);

// The same, for examples inside `d` (fails the test and returns an empty
// batch otherwise).
data::Batch BatchOf(const Dataset& d, int64_t begin, int n);

// `model`'s evaluation of examples [begin, begin + count) of `d`: the batch
// of IdxBatchOf, then Evaluate. INVALID_ARGUMENT for examples outside `d`.
absl::StatusOr<ModelEvaluation> EvaluateRange(TrainableModel& model,
                                              const Dataset& d, int64_t begin,
                                              int64_t count);

// `n` values in [-scale, scale) from `seed`.
std::vector<float> RandomValues(int64_t n, float scale, uint64_t seed);

// `images` [n, size] and `labels` [n] (classes below `classes`) as a
// dataset.
Dataset DatasetOf(std::vector<float> images, std::vector<int32_t> labels,
                  int64_t size, int classes);

// The MLP shorthand: sizes {input, hidden..., classes}, `act` after every
// layer but the last.
ModelSpec MlpOf(const std::vector<int64_t>& sizes, Activation act = RELU);

// The MLP's weights from the seeded initialisers the parameter servers use
// for the shorthand (He uniform for ReLU, Xavier uniform for tanh;
// parameter i from seed + i), biases zero.
void InitializeMlp(kernels::Backend* backend, TrainableModel* model,
                   Activation act, uint64_t seed);

// Parameter `index` of `model`, and its gradient, copied to the host.
std::vector<float> ParameterOf(kernels::Backend* backend, TrainableModel* model,
                               int index);
std::vector<float> GradientOf(TrainableModel* model, int index);

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_MODEL_TEST_UTIL_H_
