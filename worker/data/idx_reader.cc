#include "worker/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps::worker {
namespace {

// zlib's input buffer; the default 8 KiB makes the 26 MB training images
// file take thousands of read() calls.
constexpr unsigned kGzBufferBytes = 1 << 18;
// Payload is read in pieces of this size so that a header claiming a large
// count on a short file costs a bounded allocation before we notice.
constexpr int64_t kReadChunkBytes = int64_t{1} << 22;

// Owns a gzFile; closes it on every return path.
class GzFile {
 public:
  explicit GzFile(gzFile file) : file_(file) {}
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }
  gzFile get() const { return file_; }

 private:
  gzFile file_;
};

// The reason zlib gave for the last failed call, for error messages.
std::string GzErrorText(gzFile file) {
  int errnum = Z_OK;
  const char* text = gzerror(file, &errnum);
  if (errnum == Z_ERRNO) return absl::StrCat("read error: ", strerror(errno));
  return text != nullptr && *text != '\0' ? text : "unknown zlib error";
}

// Reads up to `size` bytes. Returns the count read, which is less than `size`
// only at the end of the file; a zlib error (corrupt or cut gzip stream)
// becomes DATA_LOSS.
absl::StatusOr<int64_t> ReadUpTo(gzFile file, const std::string& path,
                                 uint8_t* out, int64_t size) {
  int64_t done = 0;
  while (done < size) {
    const int64_t want = std::min<int64_t>(size - done, kReadChunkBytes);
    const int n = gzread(file, out + done, static_cast<unsigned>(want));
    if (n < 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt or truncated: ", GzErrorText(file)));
    }
    if (n == 0) {
      // zlib reports a gzip stream cut short (no end marker or trailer) not
      // as an error but as an early end of file with Z_BUF_ERROR pending.
      int errnum = Z_OK;
      gzerror(file, &errnum);
      if (errnum == Z_BUF_ERROR) {
        return absl::DataLossError(absl::StrCat(
            path, ": corrupt or truncated: gzip stream ends early"));
      }
      break;
    }
    done += n;
  }
  return done;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     uint32_t expected_magic) {
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (file.get() == nullptr) {
    const int error = errno;
    if (error == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": zlib could not allocate its state"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat("cannot open ", path));
  }
  gzbuffer(file.get(), kGzBufferBytes);

  uint8_t magic_bytes[4];
  absl::StatusOr<int64_t> got = ReadUpTo(file.get(), path, magic_bytes, 4);
  if (!got.ok()) return got.status();
  if (*got < 4) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated: %d bytes, too short for an IDX header", path, *got));
  }
  const uint32_t magic = BigEndian32(magic_bytes);
  if (magic != expected_magic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: wrong magic number 0x%08x, expected 0x%08x (%s)",
                        path, magic, expected_magic,
                        expected_magic == kIdxImagesMagic   ? "IDX images"
                        : expected_magic == kIdxLabelsMagic ? "IDX labels"
                                                            : "IDX"));
  }

  const int num_dims = static_cast<int>(magic & 0xff);
  std::vector<uint8_t> dim_bytes(4 * num_dims);
  got = ReadUpTo(file.get(), path, dim_bytes.data(), dim_bytes.size());
  if (!got.ok()) return got.status();
  if (*got < static_cast<int64_t>(dim_bytes.size())) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated inside the header (%d dimensions expected)", path,
        num_dims));
  }

  IdxArray array;
  int64_t payload = 1;
  for (int i = 0; i < num_dims; ++i) {
    const int64_t dim = BigEndian32(&dim_bytes[4 * i]);
    if (dim == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: dimension %d is zero", path, i));
    }
    array.dims.push_back(dim);
    if (payload > kMaxIdxPayloadBytes / dim) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: header claims more than %d bytes of data", path,
                          kMaxIdxPayloadBytes));
    }
    payload *= dim;
  }
  const std::string shape = absl::StrJoin(array.dims, "x");

  // Grow as bytes arrive rather than trusting the header with one allocation.
  int64_t have = 0;
  while (have < payload) {
    const int64_t want = std::min(payload - have, kReadChunkBytes * 4);
    array.data.resize(have + want);
    got = ReadUpTo(file.get(), path, array.data.data() + have, want);
    if (!got.ok()) return got.status();
    have += *got;
    if (*got < want) {
      return absl::DataLossError(absl::StrFormat(
          "%s: truncated: header says %s (%d bytes of data), file has %d", path,
          shape, payload, have));
    }
  }

  uint8_t extra;
  got = ReadUpTo(file.get(), path, &extra, 1);
  if (!got.ok()) return got.status();
  if (*got != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: wrong size: bytes after the %d of data that the header (%s) "
        "describes",
        path, payload, shape));
  }
  return array;
}

}  // namespace ps::worker
