// A text format: turns one line into one example of a BatchBuilder.
#ifndef PS_WORKER_DATA_LINE_PARSER_H_
#define PS_WORKER_DATA_LINE_PARSER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/data/batch.h"

namespace ps::worker::data {

// Implementations hold only their options and scratch space: one per reader,
// not thread-safe.
class LineParser {
 public:
  virtual ~LineParser() = default;

  // The name used in messages ("criteo", "libsvm", "movielens").
  virtual const char* name() const = 0;
  // What Parse appends; `builder` must have been built from it.
  virtual const BatchSchema& schema() const = 0;

  // Appends the example on `line` (without its line ending) to `builder`
  // and returns OK, or appends nothing and returns INVALID_ARGUMENT saying
  // what is wrong (the caller adds the file and line): a wrong field count,
  // a number that does not parse, a label out of range.
  virtual absl::Status Parse(absl::string_view line, BatchBuilder* builder) = 0;
};

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_LINE_PARSER_H_
