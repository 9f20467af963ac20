// Test helpers for the readers: write files (plain or gzip) under
// TEST_TMPDIR, and turn batches into comparable strings.
#ifndef PS_WORKER_DATA_DATA_TEST_UTIL_H_
#define PS_WORKER_DATA_DATA_TEST_UTIL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/batch.h"
#include "worker/data/batch_reader.h"

namespace ps::worker::data::testing {

// `bytes` as one gzip member.
std::string Gzip(absl::string_view bytes);

absl::Status WriteFile(const std::string& path, absl::string_view bytes);

// A fresh path under $TEST_TMPDIR (or /tmp) ending in `name`.
std::string TempPath(absl::string_view name);

// Example b of `batch` as one string holding every value (label, dense row,
// every field's keys and weights), so streams can be compared as vectors.
std::string ExampleString(const Batch& batch, int b);

// Every example of `reader`, read `batch_size` at a time, checking that each
// batch's first_example follows on from the last and that the batches
// validate against the reader's schema.
absl::StatusOr<std::vector<std::string>> ReadAll(BatchReader& reader,
                                                 int batch_size);

}  // namespace ps::worker::data::testing

#endif  // PS_WORKER_DATA_DATA_TEST_UTIL_H_
