// Reads IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or not,
// with zlib. An IDX file is a big-endian header (magic 0x0000TTNN: element
// type TT, number of dimensions NN; then NN uint32 sizes) followed by the
// elements in row-major order. Only unsigned-byte elements (TT = 0x08), the
// type of every MNIST-family file, are supported.
#ifndef PS_WORKER_DATA_IDX_READER_H_
#define PS_WORKER_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps::worker {

// Magic numbers of the two MNIST file kinds: unsigned bytes, 3 dimensions
// (count, rows, cols) for images, 1 dimension (count) for labels.
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;

// A corrupt header must not make us allocate without bound: files claiming
// more payload than this are rejected before any allocation.
inline constexpr int64_t kMaxIdxPayloadBytes = int64_t{1} << 32;

// The contents of one IDX file of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;  // from the header, outermost first
  std::vector<uint8_t> data;  // the product of `dims` bytes, row-major
};

// Reads the whole file at `path` and checks that its magic is
// `expected_magic`, that every dimension is positive, and that the payload is
// exactly as long as the header says. Errors, each naming `path`:
//   NOT_FOUND         the file does not exist;
//   INVALID_ARGUMENT  wrong magic, a zero dimension, a payload over
//                     kMaxIdxPayloadBytes, or bytes after the payload;
//   DATA_LOSS         the file (or its gzip stream) ends early or is corrupt;
//   others            the file cannot be opened or read (from errno).
// Thread-compatible; no shared state.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     uint32_t expected_magic);

}  // namespace ps::worker

#endif  // PS_WORKER_DATA_IDX_READER_H_
