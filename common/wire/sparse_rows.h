// Sparse rows on the wire, above the codec (common/wire/payload_codec.h): what
// each message's SparseRows must hold (proto/parameter_service.proto), and
// cutting a large set of rows into pieces that fit the message limit.
#ifndef PS_COMMON_WIRE_SPARSE_ROWS_H_
#define PS_COMMON_WIRE_SPARSE_ROWS_H_

#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/wire/payload_codec.h"

namespace ps {

// Which message a set of SparseRows came in; each has its own rules.
enum class SparseRowsUse {
  // PushRequest.sparse: keys and rows for every row, unique keys, at most
  // one SparseRows per table.
  kPush,
  // PullRequest.sparse (and PushRequest.then_pull.sparse): keys, no rows;
  // keys may repeat.
  kPullRequest,
  // PullResponse.sparse and PushResponse.pulled_sparse: rows, no keys.
  kAnswer,
};

// Checks decoded SparseRows against the rules of `use`, beyond what the
// decoder checks already (sizes against num_rows and dim): tables in
// [0, num_tables), dim >= 1 where rows are carried, keys and rows present or
// absent as the message needs, and for a push unique keys and one
// SparseRows per table. INVALID_ARGUMENT naming the table (and the key) on
// the first violation. Whether dim and dtype match the table's spec is the
// server's to check. `scratch` is reused between calls (a push's keys go
// into a hash set there to find duplicates, unless they come in ascending
// order).
absl::Status CheckSparseRows(absl::Span<const SparseRowsView> sparse,
                             SparseRowsUse use, int num_tables,
                             std::vector<uint64_t>* scratch);

// Upper bound of what one SparseRows record adds to a message besides its
// keys' and rows' bytes: its tag, its length and the small fields.
inline constexpr size_t kSparseRowsOverhead = 64;

// The bytes a SparseRows of `num_rows` rows takes in a message, at most:
// keys (8 bytes a row) when `with_keys`, rows of `dim` `dtype` elements
// when `with_rows`, and kSparseRowsOverhead.
size_t SparseRowsWireSize(int64_t num_rows, int32_t dim, DType dtype,
                          bool with_keys, bool with_rows);

// Cuts `rows` (keys and/or rows of num_rows entries; either may be empty) into
// consecutive pieces of as many rows as fit `max_bytes` each by
// SparseRowsWireSize, in order. The pieces share `rows`' slices (sub-slices:
// no copy). A push holds one SparseRows per table, so each piece goes into a
// message of its own; `max_bytes` is what the message limit leaves after
// the rest of that message. No rows: one empty piece. INVALID_ARGUMENT when
// the sizes of keys or rows disagree with num_rows x dim x dtype, or when
// one row does not fit.
absl::StatusOr<std::vector<SparseRowsOut>> SplitSparseRows(
    const SparseRowsOut& rows, size_t max_bytes);

}  // namespace ps

#endif  // PS_COMMON_WIRE_SPARSE_ROWS_H_
