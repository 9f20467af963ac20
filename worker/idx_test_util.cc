#include "worker/idx_test_util.h"

#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps::worker::testing {
namespace {

void AppendBigEndian32(uint32_t value, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

}  // namespace

std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     absl::string_view payload) {
  std::string bytes;
  AppendBigEndian32(magic, &bytes);
  for (uint32_t dim : dims) AppendBigEndian32(dim, &bytes);
  bytes.append(payload.data(), payload.size());
  return bytes;
}

std::string Gzip(absl::string_view bytes) {
  z_stream stream{};
  // windowBits 15 + 16: a gzip header and trailer, as gzopen expects.
  deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
               Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&stream, bytes.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

absl::Status WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string TempPath(absl::string_view name) {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", counter++, "_", name);
}

}  // namespace ps::worker::testing
