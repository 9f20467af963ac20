#include "worker/data/line_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps::worker::data {
namespace {

// zlib's own input buffer (its default of 8 KiB means many small reads).
constexpr unsigned kGzBufferBytes = 1 << 18;

// Where bytes come from: a plain file descriptor or zlib on top of one.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `size` bytes into `out`; 0 at the end of the file.
  virtual absl::StatusOr<int64_t> Read(char* out, int64_t size) = 0;
};

class FdSource : public ByteSource {
 public:
  FdSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  FdSource(const FdSource&) = delete;
  FdSource& operator=(const FdSource&) = delete;
  ~FdSource() override { close(fd_); }

  absl::StatusOr<int64_t> Read(char* out, int64_t size) override {
    for (;;) {
      const ssize_t n = read(fd_, out, static_cast<size_t>(size));
      if (n >= 0) return static_cast<int64_t>(n);
      if (errno != EINTR) {
        return absl::ErrnoToStatus(errno, absl::StrCat("reading ", path_));
      }
    }
  }

 private:
  const int fd_;
  const std::string path_;
};

class GzipSource : public ByteSource {
 public:
  GzipSource(gzFile file, std::string path)
      : file_(file), path_(std::move(path)) {}
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;
  ~GzipSource() override { gzclose(file_); }

  absl::StatusOr<int64_t> Read(char* out, int64_t size) override {
    const unsigned want = static_cast<unsigned>(
        std::min<int64_t>(size, std::numeric_limits<int>::max()));
    const int n = gzread(file_, out, want);
    int errnum = Z_OK;
    const char* text = gzerror(file_, &errnum);
    if (n < 0 || (errnum != Z_OK && errnum != Z_BUF_ERROR)) {
      if (errnum == Z_ERRNO) {
        return absl::ErrnoToStatus(errno, absl::StrCat("reading ", path_));
      }
      return absl::DataLossError(absl::StrCat(
          path_, ": corrupt gzip stream: ", text != nullptr ? text : "?"));
    }
    // zlib reports a stream cut short (no end marker or trailer) not as an
    // error but as an early end of file with Z_BUF_ERROR pending.
    if (n == 0 && errnum == Z_BUF_ERROR) {
      return absl::DataLossError(
          absl::StrCat(path_, ": truncated gzip stream (ends early)"));
    }
    return static_cast<int64_t>(n);
  }

 private:
  gzFile file_;
  const std::string path_;
};

class LineReaderImpl : public LineReader {
 public:
  LineReaderImpl(std::unique_ptr<ByteSource> source,
                 const LineReaderOptions& options, bool interleaved, int shard,
                 int num_shards)
      : source_(std::move(source)),
        options_(options),
        interleaved_(interleaved),
        shard_(shard),
        num_shards_(num_shards),
        buffer_(static_cast<size_t>(options.block_bytes)) {}

  // Byte-range mode: the reader's source is positioned at `start` (one byte
  // before the range, or 0); lines starting at or after `end` are not ours.
  absl::Status SkipToRange(int64_t start, int64_t range_begin, int64_t end) {
    buffer_offset_ = start;
    range_end_ = end;
    if (range_begin > 0) {
      // Drop the line that holds byte range_begin - 1: it started in an
      // earlier range (or ends right there, if that byte is its newline).
      RawLine raw;
      absl::StatusOr<bool> got = NextRaw(&raw);
      if (!got.ok()) return got.status();
    }
    range_begin_ = buffer_offset_ + static_cast<int64_t>(pos_);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(Line* line) override {
    for (;;) {
      if (done_) return false;
      RawLine raw;
      absl::StatusOr<bool> got = NextRaw(&raw);
      if (!got.ok()) return got.status();
      if (!*got || raw.start >= range_end_) {
        done_ = true;
        return false;
      }
      const int64_t index = next_index_++;
      if (interleaved_ && index % num_shards_ != shard_) continue;
      line->text = raw.text;
      line->index = index;
      line->too_long = raw.too_long;
      return true;
    }
  }

  bool interleaved() const override { return interleaved_; }
  int64_t range_begin() const override { return range_begin_; }
  int64_t bytes_read() const override { return bytes_read_; }

 private:
  struct RawLine {
    absl::string_view text;
    int64_t start = 0;  // file offset of its first byte
    bool too_long = false;
  };

  // The file's next line, whatever its shard.
  absl::StatusOr<bool> NextRaw(RawLine* raw) {
    for (;;) {
      const size_t have = end_ - pos_;
      const char* begin = buffer_.data() + pos_;
      const void* newline = have > 0 ? memchr(begin, '\n', have) : nullptr;
      if (newline != nullptr) {
        const size_t length = static_cast<const char*>(newline) - begin;
        Emit(begin, length, raw);
        pos_ += length + 1;
        return true;
      }
      if (eof_) {
        if (have == 0 && !discarding_) return false;
        Emit(begin, have, raw);
        pos_ = end_;
        return true;
      }
      if (!discarding_ &&
          static_cast<int64_t>(have) > options_.max_line_bytes) {
        // Keep counting the line but not its bytes.
        discarding_ = true;
        discard_start_ = buffer_offset_ + static_cast<int64_t>(pos_);
      }
      if (discarding_) pos_ = end_;
      absl::Status refilled = Refill();
      if (!refilled.ok()) return refilled;
    }
  }

  void Emit(const char* begin, size_t length, RawLine* raw) {
    if (discarding_) {
      raw->text = absl::string_view();
      raw->start = discard_start_;
      raw->too_long = true;
      discarding_ = false;
      return;
    }
    if (length > 0 && begin[length - 1] == '\r') --length;
    raw->text = absl::string_view(begin, length);
    raw->start = buffer_offset_ + static_cast<int64_t>(pos_);
    raw->too_long = static_cast<int64_t>(length) > options_.max_line_bytes;
    if (raw->too_long) raw->text = absl::string_view();
  }

  // Moves the unread bytes to the front, grows the buffer if they fill it
  // (a line longer than a block), and reads more.
  absl::Status Refill() {
    if (pos_ > 0) {
      const size_t have = end_ - pos_;
      if (have > 0) memmove(buffer_.data(), buffer_.data() + pos_, have);
      buffer_offset_ += static_cast<int64_t>(pos_);
      pos_ = 0;
      end_ = have;
    }
    if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    absl::StatusOr<int64_t> n = source_->Read(
        buffer_.data() + end_, static_cast<int64_t>(buffer_.size() - end_));
    if (!n.ok()) return n.status();
    if (*n == 0) eof_ = true;
    end_ += static_cast<size_t>(*n);
    bytes_read_ += *n;
    return absl::OkStatus();
  }

  const std::unique_ptr<ByteSource> source_;
  const LineReaderOptions options_;
  const bool interleaved_;
  const int shard_;
  const int num_shards_;
  std::vector<char> buffer_;
  size_t pos_ = 0;             // next unread byte of buffer_
  size_t end_ = 0;             // end of the valid bytes of buffer_
  int64_t buffer_offset_ = 0;  // file offset of buffer_[0]
  int64_t range_begin_ = 0;
  int64_t range_end_ = std::numeric_limits<int64_t>::max();
  int64_t next_index_ = 0;
  int64_t bytes_read_ = 0;
  bool eof_ = false;
  bool done_ = false;
  bool discarding_ = false;  // inside a line longer than max_line_bytes
  int64_t discard_start_ = 0;
};

absl::StatusOr<int> OpenFile(const std::string& path) {
  for (;;) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno != EINTR) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(
    const std::string& path, int shard, int num_shards,
    const LineReaderOptions& options) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad shard ", shard, " of ", num_shards, " for ", path));
  }
  if (options.block_bytes < 1 || options.max_line_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_bytes (", options.block_bytes, ") and max_line_bytes (",
        options.max_line_bytes, ") must be positive"));
  }
  absl::StatusOr<int> fd = OpenFile(path);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (fstat(*fd, &st) != 0) {
    const int error = errno;
    close(*fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot stat ", path));
  }
  if (S_ISDIR(st.st_mode)) {
    close(*fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory"));
  }
  const bool seekable = S_ISREG(st.st_mode);
  unsigned char magic[2] = {0, 0};
  bool gzip = false;
  if (seekable) {
    gzip = pread(*fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  } else {
    // A pipe: zlib looks at the first bytes itself and reads plain text
    // through ("transparent" mode) when they are not gzip's magic.
    gzip = true;
  }

  if (gzip) {
    gzFile file = gzdopen(*fd, "rb");
    if (file == nullptr) {
      close(*fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": zlib could not allocate its state"));
    }
    gzbuffer(file, kGzBufferBytes);
    auto reader = std::make_unique<LineReaderImpl>(
        std::make_unique<GzipSource>(file, path), options,
        /*interleaved=*/true, shard, num_shards);
    return std::unique_ptr<LineReader>(std::move(reader));
  }

  const int64_t size = st.st_size;
  const auto cut = [&](int k) {
    return static_cast<int64_t>(static_cast<__int128>(size) * k / num_shards);
  };
  const int64_t begin = cut(shard);
  const int64_t end = cut(shard + 1);
  const int64_t start = begin > 0 ? begin - 1 : 0;
  if (lseek(*fd, start, SEEK_SET) != start) {
    const int error = errno;
    close(*fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot seek in ", path));
  }
  auto reader = std::make_unique<LineReaderImpl>(
      std::make_unique<FdSource>(*fd, path), options, /*interleaved=*/false,
      shard, num_shards);
  absl::Status skipped = reader->SkipToRange(start, begin, end);
  if (!skipped.ok()) return skipped;
  return std::unique_ptr<LineReader>(std::move(reader));
}

absl::StatusOr<int64_t> CountLinesBefore(const std::string& path,
                                         int64_t offset) {
  if (offset <= 0) return 0;
  absl::StatusOr<int> fd = OpenFile(path);
  if (!fd.ok()) return fd.status();
  FdSource source(*fd, path);
  std::vector<char> block(1 << 20);
  int64_t done = 0;
  int64_t lines = 0;
  while (done < offset) {
    absl::StatusOr<int64_t> n = source.Read(
        block.data(), std::min<int64_t>(offset - done, block.size()));
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    lines += std::count(block.data(), block.data() + *n, '\n');
    done += *n;
  }
  return lines;
}

}  // namespace ps::worker::data
