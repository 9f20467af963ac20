// Test helpers: build IDX files, good or deliberately broken, and write them
// (gzip-compressed with zlib, like the real ones) under TEST_TMPDIR.
#ifndef PS_WORKER_IDX_TEST_UTIL_H_
#define PS_WORKER_IDX_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps::worker::testing {

// An IDX file's bytes: `magic`, then `dims` big-endian, then `payload`.
std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     absl::string_view payload);

// `bytes` gzip-compressed, as a .gz file holds them.
std::string Gzip(absl::string_view bytes);

// Writes `bytes` to `path` as they are.
absl::Status WriteFile(const std::string& path, absl::string_view bytes);

// A fresh path under $TEST_TMPDIR (or /tmp) ending in `name`.
std::string TempPath(absl::string_view name);

}  // namespace ps::worker::testing

#endif  // PS_WORKER_IDX_TEST_UTIL_H_
