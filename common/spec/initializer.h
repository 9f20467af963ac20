// Deterministic parameter initialisation. Element i of a tensor gets a value
// that depends only on (seed, tensor name, i), so a shard that owns any range
// of a tensor computes exactly the weights a single process would: the same
// initial model whatever the number of shards.
#ifndef PS_COMMON_SPEC_INITIALIZER_H_
#define PS_COMMON_SPEC_INITIALIZER_H_

#include <cstdint>
#include <string>

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

// Writes the initial row of `key` in sparse table `table` (out.size() must be
// table.dim()): element i depends only on (seed, table name, key, i), so a
// row is the same on any number of shards and after any eviction. Kinds
// ZEROS, CONSTANT (value), UNIFORM (U(-s, s)) and NORMAL (N(0, s^2)), s being
// init.scale() or, when 0, 1/sqrt(dim); KIND_UNSPECIFIED is UNIFORM (as the
// config normalisation writes it). INVALID_ARGUMENT for another kind or a
// wrong size.
absl::Status InitializeSparseRow(const SparseTableSpec& table, uint64_t seed,
                                 uint64_t key, absl::Span<float> out);

// The same with the (seed, name) part hashed once: a table's rows start from
// SparseRowSeed(seed, table.name()), which a hot path keeps.
uint64_t SparseRowSeed(uint64_t seed, const std::string& table_name);
absl::Status InitializeSparseRowSeeded(const SparseTableSpec& table,
                                       uint64_t row_seed, uint64_t key,
                                       absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_SPEC_INITIALIZER_H_
