// The Mlp (mlp.h) behind the TrainableModel seam: the model a job's
// model.mlp describes.
#ifndef PS_WORKER_MODEL_MLP_MODEL_H_
#define PS_WORKER_MODEL_MLP_MODEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "worker/trainable_model.h"

namespace ps::worker::model {

// The MLP of `spec` on `backend` (not owned; must outlive the model), for
// examples of `example_size` values. UNIMPLEMENTED for a model that is not
// model.mlp; INVALID_ARGUMENT when input_dim is not `example_size`;
// Mlp::Create's errors otherwise. Only the first layer's weight
// (fc0/weight) splits in row blocks.
absl::StatusOr<std::unique_ptr<TrainableModel>> CreateMlpModel(
    const ModelSpec& spec, int64_t example_size, kernels::Backend* backend);

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_MLP_MODEL_H_
