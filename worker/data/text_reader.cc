#include "worker/data/text_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/data/bad_lines.h"
#include "worker/data/batch.h"
#include "worker/data/line_reader.h"
#include "worker/data/random.h"

namespace ps::worker::data {
namespace {

// Examples parsed per scratch batch while skipping to start_example.
constexpr int kSkipBatch = 1024;

// A line in the shuffle buffer, with where it came from.
struct BufferedLine {
  std::string text;
  int file = 0;
  int64_t index = 0;  // Line::index
  bool too_long = false;
};

// A line on its way to the parser: a view into the file's block or into the
// shuffle buffer, valid until the next line is pulled.
struct LineRef {
  absl::string_view text;
  int file = 0;
  int64_t index = 0;
  bool too_long = false;
};

class TextReader : public BatchReader {
 public:
  TextReader(const TextReaderOptions& options,
             std::unique_ptr<LineParser> parser, const ShardSpec& spec)
      : BatchReader(parser->schema()),
        options_(options),
        parser_(std::move(parser)),
        spec_(spec),
        builder_(parser_->schema()),
        counter_(options.bad_lines, parser_->name()),
        rng_(HashWords(options.seed, static_cast<uint64_t>(spec.epoch),
                       static_cast<uint64_t>(spec.shard))),
        files_(options.files.size()) {}

  absl::StatusOr<Batch> Next(int max_examples) override {
    if (!error_.ok()) return error_;
    if (max_examples < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_examples must be positive, got ", max_examples));
    }
    absl::Status status = SkipToStart();
    if (status.ok()) {
      builder_.Reset(position_);
      status = Fill(&builder_, max_examples);
    }
    if (!status.ok()) {
      error_ = status;
      return status;
    }
    return builder_.Take();
  }

  int64_t position() const override {
    return skipped_ ? position_ : spec_.start_example;
  }

  ReaderStats stats() const override {
    ReaderStats stats;
    stats.lines = counter_.lines();
    stats.bad_lines = counter_.bad();
    stats.examples = stats.lines - stats.bad_lines;
    stats.bytes =
        bytes_done_ + (reader_ != nullptr ? reader_->bytes_read() : 0);
    stats.bad_line_samples = counter_.samples();
    return stats;
  }

 private:
  // Where a file's shard part starts, for line numbers in messages.
  struct FileState {
    bool interleaved = false;
    int64_t range_begin = 0;
    int64_t lines_before = -1;  // lines before range_begin, once counted
  };

  absl::Status SkipToStart() {
    if (skipped_) return absl::OkStatus();
    while (position_ < spec_.start_example) {
      skip_builder_.Reset(position_);
      const int64_t want =
          std::min<int64_t>(kSkipBatch, spec_.start_example - position_);
      absl::Status status = Fill(&skip_builder_, static_cast<int>(want));
      if (!status.ok()) return status;
      if (skip_builder_.size() == 0) break;  // the shard is shorter
    }
    skipped_ = true;
    return absl::OkStatus();
  }

  // Parses lines into *builder until it holds max_examples or the shard
  // ends.
  absl::Status Fill(BatchBuilder* builder, int max_examples) {
    while (builder->size() < max_examples) {
      LineRef line;
      absl::StatusOr<bool> got = NextLine(&line);
      if (!got.ok()) return got.status();
      if (!*got) return at_end_ ? absl::OkStatus() : End();
      counter_.AddLine();
      if (line.too_long) {
        absl::Status bad =
            Bad(line, absl::StrCat("line longer than ",
                                   options_.line_reader.max_line_bytes,
                                   " bytes (max_line_bytes)"));
        if (!bad.ok()) return bad;
        continue;
      }
      absl::Status parsed = parser_->Parse(line.text, builder);
      if (parsed.ok()) {
        ++position_;
        continue;
      }
      if (absl::IsResourceExhausted(parsed)) return parsed;
      absl::Status bad = Bad(line, parsed.message());
      if (!bad.ok()) return bad;
    }
    return absl::OkStatus();
  }

  absl::Status End() {
    at_end_ = true;
    return counter_.Check(/*at_end=*/true);
  }

  absl::Status Bad(const LineRef& line, absl::string_view reason) {
    counter_.AddBad();
    if (counter_.WantsSample()) {
      counter_.AddSample(absl::StrCat(Location(line), ": ", reason));
    }
    return counter_.Check(/*at_end=*/false);
  }

  // "path:line", counting the lines before a byte range once per file.
  std::string Location(const LineRef& line) {
    const std::string& path = options_.files[line.file];
    FileState& file = files_[line.file];
    if (file.lines_before < 0) {
      if (file.interleaved || file.range_begin == 0) {
        file.lines_before = 0;
      } else {
        absl::StatusOr<int64_t> before =
            CountLinesBefore(path, file.range_begin);
        if (!before.ok()) {
          return absl::StrCat(path, ": line ", line.index + 1, " after byte ",
                              file.range_begin);
        }
        file.lines_before = *before;
      }
    }
    return absl::StrCat(path, ":", file.lines_before + line.index + 1);
  }

  // The shard's next line after shuffling.
  absl::StatusOr<bool> NextLine(LineRef* out) {
    if (options_.shuffle_buffer <= 1) return ReadLine(out);
    if (!buffer_filled_) {
      buffer_filled_ = true;
      buffer_.reserve(static_cast<size_t>(options_.shuffle_buffer));
      while (static_cast<int64_t>(buffer_.size()) < options_.shuffle_buffer) {
        LineRef line;
        absl::StatusOr<bool> got = ReadLine(&line);
        if (!got.ok()) return got.status();
        if (!*got) break;
        buffer_.emplace_back();
        Store(line, &buffer_.back());
      }
    }
    if (buffer_.empty()) return false;
    const size_t j = static_cast<size_t>(rng_.Below(buffer_.size()));
    std::swap(buffer_[j], current_);
    LineRef line;
    absl::StatusOr<bool> got = ReadLine(&line);
    if (!got.ok()) return got.status();
    if (*got) {
      Store(line, &buffer_[j]);
    } else {
      if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    out->text = current_.text;
    out->file = current_.file;
    out->index = current_.index;
    out->too_long = current_.too_long;
    return true;
  }

  static void Store(const LineRef& line, BufferedLine* slot) {
    slot->text.assign(line.text.data(), line.text.size());
    slot->file = line.file;
    slot->index = line.index;
    slot->too_long = line.too_long;
  }

  // The shard's next line in file order.
  absl::StatusOr<bool> ReadLine(LineRef* out) {
    for (;;) {
      if (reader_ == nullptr) {
        if (next_file_ >= static_cast<int>(options_.files.size())) return false;
        const int file = next_file_++;
        const bool whole = options_.shard_rule == ShardRule::kWholeFiles;
        if (whole && file % spec_.num_shards != spec_.shard) continue;
        absl::StatusOr<std::unique_ptr<LineReader>> reader = LineReader::Open(
            options_.files[file], whole ? 0 : spec_.shard,
            whole ? 1 : spec_.num_shards, options_.line_reader);
        if (!reader.ok()) return reader.status();
        reader_ = *std::move(reader);
        reader_file_ = file;
        files_[file].interleaved = reader_->interleaved();
        files_[file].range_begin = reader_->range_begin();
      }
      Line line;
      absl::StatusOr<bool> got = reader_->Next(&line);
      if (!got.ok()) return got.status();
      if (*got) {
        out->text = line.text;
        out->file = reader_file_;
        out->index = line.index;
        out->too_long = line.too_long;
        return true;
      }
      bytes_done_ += reader_->bytes_read();
      reader_.reset();
    }
  }

  const TextReaderOptions options_;
  const std::unique_ptr<LineParser> parser_;
  const ShardSpec spec_;
  BatchBuilder builder_;
  BatchBuilder skip_builder_{parser_->schema()};
  BadLineCounter counter_;
  SplitMix64 rng_;
  std::vector<FileState> files_;
  std::unique_ptr<LineReader> reader_;
  int reader_file_ = 0;
  int next_file_ = 0;
  int64_t bytes_done_ = 0;
  std::vector<BufferedLine> buffer_;
  BufferedLine current_;
  bool buffer_filled_ = false;
  bool at_end_ = false;
  bool skipped_ = false;  // start_example reached (or the shard's end)
  int64_t position_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchReader>> OpenTextReader(
    const TextReaderOptions& options, std::unique_ptr<LineParser> parser,
    const ShardSpec& shard) {
  if (parser == nullptr) {
    return absl::InvalidArgumentError("no line parser");
  }
  if (options.files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(parser->name(), ": no input files"));
  }
  if (options.shuffle_buffer < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shuffle_buffer must be >= 0, got ", options.shuffle_buffer));
  }
  absl::Status status = ValidateShardSpec(shard);
  if (!status.ok()) return status;
  status = ValidateBadLinePolicy(options.bad_lines);
  if (!status.ok()) return status;
  for (const std::string& path : options.files) {
    if (access(path.c_str(), R_OK) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
    }
  }
  return std::unique_ptr<BatchReader>(
      std::make_unique<TextReader>(options, std::move(parser), shard));
}

}  // namespace ps::worker::data
