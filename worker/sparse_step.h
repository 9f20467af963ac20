// One synchronous training step of a model with sparse tables over a batch
// of the data readers (worker/data/batch.h), through a ParameterAccess:
// pull the dense weights and the batch's rows (one per unique key and
// table), forward and backward, push the dense gradients and one gradient
// row per unique key, end the step. The step pipeline's overlap
// (worker/step_pipeline.h) does not cover sparse tables yet; this is the
// plain order their dependencies allow.
#ifndef PS_WORKER_SPARSE_STEP_H_
#define PS_WORKER_SPARSE_STEP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/data/batch.h"
#include "worker/parameter_access.h"
#include "worker/trainable_model.h"

namespace ps::worker {

struct SparseStepResult {
  float loss = 0.0f;
  int64_t staleness = 0;    // as Finish returns it
  int64_t unique_keys = 0;  // over the tables
};

// Step `clock` of `model` on `batch`. The errors of each call, unchanged.
absl::StatusOr<SparseStepResult> RunSparseStep(TrainableModel& model,
                                               ParameterAccess& access,
                                               int64_t clock,
                                               const data::Batch& batch);

}  // namespace ps::worker

#endif  // PS_WORKER_SPARSE_STEP_H_
