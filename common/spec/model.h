// The parameter tensors of a model spec, and small shape helpers.
#ifndef PS_COMMON_SPEC_MODEL_H_
#define PS_COMMON_SPEC_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace ps {

// The tensors an MLP spec expands to, in order: for each layer i,
// "fc<i>/weight" [in, out] then "fc<i>/bias" [out]. Weights default to
// HE_UNIFORM (XAVIER_UNIFORM for tanh), biases to ZEROS.
std::vector<TensorSpec> MlpTensors(const MlpSpec& mlp);

// The model's dense parameter tensors: those its layers declare (MlpTensors
// for the MLP shorthand; ModelGraph::tensors for ModelSpec.layers), or
// `tensors` alone; none for a model of sparse tables only. Where both are
// given they must agree name for name and shape for shape (an init given in
// `tensors` wins). Fails on a model with no parameters at all and on a layer
// model with problems (ResolveModelGraph's errors). A layer model may have
// no dense tensor (sparse tables only).
absl::StatusOr<std::vector<TensorSpec>> ExpandModel(const ModelSpec& model);

// Product of the dimensions (1 for a scalar); -1 on a negative dimension or
// an overflow of int64.
int64_t NumElements(const TensorSpec& tensor);

// "[784, 256]".
std::string ShapeString(const TensorSpec& tensor);

}  // namespace ps

#endif  // PS_COMMON_SPEC_MODEL_H_
