// A layer model (ModelSpec.layers, common/spec/model_graph.h) behind the
// TrainableModel seam: its layers (worker/model/layer.h) run in the graph's
// order on one backend, forward then backward, and the head's loss drives
// the gradients. The dense tensors are the graph's, in the parameter
// servers' order (common/spec/model.h ExpandModel).
#ifndef PS_WORKER_MODEL_LAYER_MODEL_H_
#define PS_WORKER_MODEL_LAYER_MODEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/config.pb.h"
#include "worker/model/trainable_model.h"

namespace ps::worker::model {

// The layer model `spec` describes (ModelSpec.layers, or the MlpSpec
// shorthand expanded to Dense layers) on `backend` (not owned; must outlive
// the model). The inputs "dense" and "image" both read an example's dense
// values: with `example_size` > 0 they must be that wide (the IDX datasets'
// examples). Labels are a batch's classes (IDX) or float labels (text
// formats); a sigmoid or squared-error head reads a class as its number. A
// model with sparse inputs (embedding bags) steps and evaluates a batch only
// after PrepareSparse(batch) (trainable_model.h); otherwise
// FAILED_PRECONDITION.
//
// Errors: INVALID_ARGUMENT for a model that does not resolve (every
// problem, as ResolveModelGraph lists them) or whose inputs are not
// `example_size` wide.
//
// Row blocks (ModelStepHooks::row_splits): the weight of a Dense layer that
// reads only model inputs (the MLP's first layer, fc0/weight) splits
// (SplitsRows); forward uses it block by block as before_use announces
// each block, then its bias, and backward hands its gradient out block by
// block in the splits' order, then the bias's. Splits for any other
// parameter, or splits that do not ascend inside (0, rows), are
// INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<TrainableModel>> CreateLayerModel(
    const ModelSpec& spec, int64_t example_size, kernels::Backend* backend);

}  // namespace ps::worker::model

#endif  // PS_WORKER_MODEL_LAYER_MODEL_H_
