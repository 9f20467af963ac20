#include "tools/data/output_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps::data_tools {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 22;

class PlainFile : public OutputFile {
 public:
  PlainFile(FILE* file, std::string path)
      : file_(file), path_(std::move(path)), buffer_(kBufferBytes, '\0') {
    setvbuf(file_, buffer_.data(), _IOFBF, buffer_.size());
  }
  ~PlainFile() override {
    if (file_ != nullptr) fclose(file_);
  }

  absl::Status Write(absl::string_view bytes) override {
    if (fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
      return absl::ErrnoToStatus(errno, absl::StrCat("writing ", path_));
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    FILE* file = file_;
    file_ = nullptr;
    if (fclose(file) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("closing ", path_));
    }
    return absl::OkStatus();
  }

 private:
  FILE* file_;
  const std::string path_;
  std::string buffer_;
};

class GzipFile : public OutputFile {
 public:
  GzipFile(gzFile file, std::string path)
      : file_(file), path_(std::move(path)) {}
  ~GzipFile() override {
    if (file_ != nullptr) gzclose(file_);
  }

  absl::Status Write(absl::string_view bytes) override {
    if (bytes.empty()) return absl::OkStatus();
    if (gzwrite(file_, bytes.data(), static_cast<unsigned>(bytes.size())) !=
        static_cast<int>(bytes.size())) {
      int errnum = Z_OK;
      const char* text = gzerror(file_, &errnum);
      return absl::InternalError(absl::StrCat(
          "writing ", path_, ": ", errnum == Z_ERRNO ? strerror(errno) : text));
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    gzFile file = file_;
    file_ = nullptr;
    const int rc = gzclose(file);
    if (rc != Z_OK) {
      return absl::InternalError(absl::StrCat(
          "closing ", path_, ": zlib error ", rc,
          rc == Z_ERRNO ? absl::StrCat(" (", strerror(errno), ")") : ""));
    }
    return absl::OkStatus();
  }

 private:
  gzFile file_;
  const std::string path_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(
    const std::string& path, int gzip_level) {
  if (gzip_level < 0 || gzip_level > 9) {
    return absl::InvalidArgumentError(
        absl::StrCat("gzip level must be in [0, 9], got ", gzip_level));
  }
  if (gzip_level == 0) {
    FILE* file = fopen(path.c_str(), "wb");
    if (file == nullptr) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
    }
    return std::unique_ptr<OutputFile>(std::make_unique<PlainFile>(file, path));
  }
  errno = 0;
  gzFile file = gzopen(path.c_str(), absl::StrCat("wb", gzip_level).c_str());
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno != 0 ? errno : ENOMEM,
                               absl::StrCat("cannot create ", path));
  }
  gzbuffer(file, kBufferBytes);
  return std::unique_ptr<OutputFile>(std::make_unique<GzipFile>(file, path));
}

absl::Status WriteTextFile(const std::string& path, absl::string_view text) {
  absl::StatusOr<std::unique_ptr<OutputFile>> file =
      OutputFile::Create(path, 0);
  if (!file.ok()) return file.status();
  absl::Status written = (*file)->Write(text);
  absl::Status closed = (*file)->Close();
  return written.ok() ? closed : written;
}

}  // namespace ps::data_tools
