// The libsvm / svmlight format: per line
//   label [qid:N] index:value index:value ... [# comment]
// separated by spaces or tabs. `qid:` tokens and everything after "#" are
// ignored. Indices are non-negative integers (1-based by convention; not
// required to be sorted or unique), values finite numbers.
//
// What a line becomes (batch.h):
//   dense_dim == 0 (the default): one weighted sparse field "features": key =
//     the index as written, weight = the value. A feature not on the line is
//     not in the bag (an implicit 0). No dense part.
//   dense_dim > 0 (for data with few features): a dense vector instead, no
//     sparse field: column index - index_base holds the value, features not
//     on the line are 0.0 (a repeated index: the last value wins). An index
//     outside [index_base, index_base + dense_dim) makes the line bad.
//   labels: kBinary: 1 -> 1.0, 0 and -1 -> 0.0 (any spelling that parses to
//     those numbers: "+1", "-1.0"), anything else is out of range; kReal: any
//     finite number; kClass: an integer in [class_base, class_base +
//     num_classes), stored as label - class_base.
// Bad lines: an empty line, a label that does not parse or is out of range,
// a token that is not index:value, an index or value that does not parse.
#ifndef PS_WORKER_DATA_LIBSVM_FORMAT_H_
#define PS_WORKER_DATA_LIBSVM_FORMAT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/data/batch.h"
#include "worker/data/line_parser.h"

namespace ps::worker::data {

enum class LibsvmLabels { kBinary, kReal, kClass };

struct LibsvmOptions {
  LibsvmLabels labels = LibsvmLabels::kBinary;
  int num_classes = 0;  // kClass only; >= 2
  int64_t class_base = 0;
  int64_t dense_dim = 0;
  int64_t index_base = 1;  // dense_dim > 0 only
};

// INVALID_ARGUMENT for kClass without num_classes >= 2, a negative dense_dim
// or index_base, or a dense_dim over 2^24.
absl::StatusOr<BatchSchema> LibsvmSchema(const LibsvmOptions& options);
absl::StatusOr<std::unique_ptr<LineParser>> NewLibsvmParser(
    const LibsvmOptions& options);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_LIBSVM_FORMAT_H_
