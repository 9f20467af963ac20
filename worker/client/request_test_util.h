// Requests of the parameter access made in one expression, for tests.
#ifndef PS_WORKER_CLIENT_REQUEST_TEST_UTIL_H_
#define PS_WORKER_CLIENT_REQUEST_TEST_UTIL_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "worker/client/parameter_access.h"

namespace ps::client {

// The dense weights of `clock` into `tensors`.
inline PullArgs PullOf(int64_t clock, std::vector<absl::Span<float>> tensors) {
  PullArgs r;
  r.clock = clock;
  r.tensors = std::move(tensors);
  return r;
}

// Rows of `pulls` at `clock`.
inline PullArgs RowsOf(int64_t clock, std::vector<SparsePull> pulls) {
  PullArgs r;
  r.clock = clock;
  r.rows = std::move(pulls);
  return r;
}

// Whole-tensor gradients (model order from tensor 0) of step `clock`.
inline StepArgs GradsOf(int64_t clock, int64_t base_version,
                        std::vector<absl::Span<const float>> grads) {
  StepArgs r;
  r.clock = clock;
  r.base_version = base_version;
  r.dense = WholeTensors(grads);
  return r;
}

// The gradient of tensor `index` (from `offset`) of step `clock`.
inline StepArgs GradOf(int64_t clock, int64_t base_version, int index,
                       absl::Span<const float> grad, int64_t offset = 0) {
  StepArgs r;
  r.clock = clock;
  r.base_version = base_version;
  r.dense = {{.tensor_index = index, .grad = grad, .offset = offset}};
  return r;
}

// Row gradients of step `clock`.
inline StepArgs RowGradsOf(int64_t clock, int64_t base_version,
                           std::vector<SparsePush> rows) {
  StepArgs r;
  r.clock = clock;
  r.base_version = base_version;
  r.rows = std::move(rows);
  return r;
}

// The end of step `clock` with nothing but the next weights (none: the
// last step).
inline StepArgs EndOf(int64_t clock, int64_t base_version,
                      std::vector<absl::Span<float>> next_weights = {}) {
  StepArgs r;
  r.clock = clock;
  r.base_version = base_version;
  r.next_weights = std::move(next_weights);
  return r;
}

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_REQUEST_TEST_UTIL_H_
