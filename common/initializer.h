// Deterministic parameter initialisation. Element i of a tensor gets a value
// that depends only on (seed, tensor name, i), so a shard that owns any range
// of a tensor computes exactly the weights a single process would: the same
// initial model whatever the number of shards.
#ifndef PS_COMMON_INITIALIZER_H_
#define PS_COMMON_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"

namespace ps {

// Writes elements [offset, offset + out.size()) of `tensor` initialised per
// its InitializerSpec (KIND_UNSPECIFIED: ZEROS for tensors of rank < 2, else
// HE_UNIFORM). Fan-in is shape[0], fan-out shape[1] (1 if absent). Fails on
// a range outside the tensor.
absl::Status InitializeRange(const TensorSpec& tensor, uint64_t seed,
                             int64_t offset, absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_INITIALIZER_H_
