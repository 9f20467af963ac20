// Streams the lines of one text file, plain or gzip-compressed, in blocks:
// memory stays bounded by the block and the longest line, whatever the file's
// size. A file is gzip if it starts with gzip's magic bytes (1f 8b), whatever
// its name; zlib reads it, concatenated members included.
//
// Sharding within a file (shard k of n):
//   a plain regular file is cut into n byte ranges [size*k/n, size*(k+1)/n);
//     shard k owns the lines whose first byte lies in range k. It reads only
//     its range (plus the end of its last line), so n workers read the file
//     once between them;
//   a gzip file (or a pipe, or anything that cannot seek) is dealt line by
//     line: shard k owns lines k, k + n, k + 2n, ... Every shard decompresses
//     the whole file and skips the lines of the others (a newline search).
// Either way the shards are disjoint, cover every line, and depend only on
// the file and (k, n).
//
// Line endings: "\n" or "\r\n" (stripped). A last line without a newline is
// a line; a file ending in a newline has no empty line after it.
#ifndef PS_WORKER_DATA_LINE_READER_H_
#define PS_WORKER_DATA_LINE_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::worker::data {

struct LineReaderOptions {
  // Bytes asked of the file (or of zlib) per read.
  int64_t block_bytes = int64_t{1} << 20;
  // A longer line is returned with too_long set and its text dropped, so one
  // broken file (say a binary blob with no newline) cannot exhaust memory.
  int64_t max_line_bytes = int64_t{1} << 20;
};

struct Line {
  // Without its line ending. Valid until the next call to Next().
  absl::string_view text;
  // 0-based, counting every line from the start of the reader's range (see
  // LineReader::range_begin), including lines of other shards skipped in a
  // gzip file. The line's number in the file is
  // CountLinesBefore(path, range_begin()) + index + 1.
  int64_t index = 0;
  bool too_long = false;  // then `text` is empty
};

// One shard's lines of one file. Not thread-safe.
class LineReader {
 public:
  // Opens `path` and positions it at shard `shard`'s first line.
  // INVALID_ARGUMENT for a bad (shard, num_shards) or options, or a
  // directory; NOT_FOUND or another errno status if the file cannot be
  // opened. (A corrupt gzip stream shows in Next.)
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(
      const std::string& path, int shard, int num_shards,
      const LineReaderOptions& options = {});

  virtual ~LineReader() = default;

  // The shard's next line into *line; false once there are no more.
  // DATA_LOSS (naming the file) for a corrupt or truncated gzip stream;
  // another status for a read error.
  virtual absl::StatusOr<bool> Next(Line* line) = 0;

  // Whether the file is gzip (dealt line by line) rather than byte ranges.
  virtual bool interleaved() const = 0;
  // The byte offset of the range's first line in a plain file; 0 when
  // interleaved.
  virtual int64_t range_begin() const = 0;
  // Uncompressed bytes read so far.
  virtual int64_t bytes_read() const = 0;
};

// The number of "\n" in bytes [0, offset) of the plain file at `path`: a
// one-off pass to turn a byte-range shard's line index into a line number,
// made only when a bad line is reported.
absl::StatusOr<int64_t> CountLinesBefore(const std::string& path,
                                         int64_t offset);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_LINE_READER_H_
