// Test helpers: build IDX files, good or deliberately broken, and write them
// (gzip-compressed with zlib, like the real ones) under TEST_TMPDIR with the
// data readers' helpers (worker/data/data_test_util.h).
#ifndef PS_WORKER_DATA_IDX_TEST_UTIL_H_
#define PS_WORKER_DATA_IDX_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/data/data_test_util.h"

namespace ps::worker::testing {

// An IDX file's bytes: `magic`, then `dims` big-endian, then `payload`.
std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     absl::string_view payload);

// Gzip, WriteFile and TempPath are the readers' test helpers, one copy.
using ::ps::worker::data::testing::Gzip;
using ::ps::worker::data::testing::TempPath;
using ::ps::worker::data::testing::WriteFile;

}  // namespace ps::worker::testing

#endif  // PS_WORKER_DATA_IDX_TEST_UTIL_H_
