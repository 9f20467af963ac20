// Helpers for the model layer's tests: specs from text, batches and
// datasets of fixed pseudo-random values.
#ifndef PS_WORKER_MODEL_MODEL_TEST_UTIL_H_
#define PS_WORKER_MODEL_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/config.pb.h"
#include "worker/batch_prefetcher.h"
#include "worker/dataset.h"

namespace ps::worker::model {

// A ModelSpec from its text format (fails the test on a parse error).
ModelSpec SpecFromText(const std::string& text);

// `n` examples of `size` values in [-1, 1) from `seed`, labels in
// [0, classes).
Dataset RandomData(int64_t n, int64_t size, int classes, uint64_t seed);

// Examples [begin, begin + n) of `d` as a batch.
Batch BatchOf(const Dataset& d, int64_t begin, int n);

// `n` values in [-scale, scale) from `seed`.
std::vector<float> RandomValues(int64_t n, float scale, uint64_t seed);

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_MODEL_TEST_UTIL_H_
