#include "worker/data/text_count.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/data/bad_lines.h"
#include "worker/data/batch.h"
#include "worker/data/line_reader.h"

namespace ps::worker::data {
namespace {

// Parsed examples held before the scratch batch is emptied.
constexpr int kScratchExamples = 4096;

// One pass's state: the counts, the bad lines and the scratch batch the
// parser fills.
class ShardCounter {
 public:
  ShardCounter(const TextReaderOptions& options,
               std::unique_ptr<LineParser> parser, int num_shards)
      : options_(options),
        parser_(std::move(parser)),
        builder_(parser_->schema()),
        bad_(options.bad_lines, parser_->name()),
        counts_(static_cast<size_t>(num_shards), 0) {}

  // Counts the lines of `reader` (file `path`), line i for shard
  // `shard`, or for shard i % num_shards when `shard` is -1.
  absl::Status CountLines(const std::string& path, LineReader& reader,
                          int shard) {
    const int64_t n = static_cast<int64_t>(counts_.size());
    Line line;
    for (;;) {
      absl::StatusOr<bool> got = reader.Next(&line);
      if (!got.ok()) return got.status();
      if (!*got) break;
      bad_.AddLine();
      absl::Status parsed =
          line.too_long
              ? absl::InvalidArgumentError(absl::StrCat(
                    "line longer than ", options_.line_reader.max_line_bytes,
                    " bytes (max_line_bytes)"))
              : parser_->Parse(line.text, &builder_);
      if (parsed.ok()) {
        ++counts_[static_cast<size_t>(shard >= 0 ? shard : line.index % n)];
        if (builder_.size() >= kScratchExamples) builder_.Reset(0);
        continue;
      }
      if (absl::IsResourceExhausted(parsed)) return parsed;
      bad_.AddBad();
      if (bad_.WantsSample()) {
        bad_.AddSample(absl::StrCat(Location(path, reader, line.index), ": ",
                                    parsed.message()));
      }
      if (absl::Status s = bad_.Check(/*at_end=*/false); !s.ok()) return s;
    }
    bytes_ += reader.bytes_read();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<int64_t>> Finish(ReaderStats* stats) {
    if (stats != nullptr) {
      stats->lines += bad_.lines();
      stats->bad_lines += bad_.bad();
      stats->examples += bad_.lines() - bad_.bad();
      stats->bytes += bytes_;
      for (const std::string& s : bad_.samples()) {
        stats->bad_line_samples.push_back(s);
      }
    }
    if (absl::Status s = bad_.Check(/*at_end=*/true); !s.ok()) return s;
    return counts_;
  }

 private:
  // "path:line" of line `index` of `reader`'s range.
  static std::string Location(const std::string& path, LineReader& reader,
                              int64_t index) {
    int64_t before = 0;
    if (!reader.interleaved() && reader.range_begin() > 0) {
      absl::StatusOr<int64_t> n = CountLinesBefore(path, reader.range_begin());
      if (!n.ok()) {
        return absl::StrCat(path, ": line ", index + 1, " after byte ",
                            reader.range_begin());
      }
      before = *n;
    }
    return absl::StrCat(path, ":", before + index + 1);
  }

  const TextReaderOptions& options_;
  const std::unique_ptr<LineParser> parser_;
  BatchBuilder builder_;
  BadLineCounter bad_;
  std::vector<int64_t> counts_;
  int64_t bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> CountTextShardExamples(
    const TextReaderOptions& options, std::unique_ptr<LineParser> parser,
    int num_shards, ReaderStats* stats) {
  if (parser == nullptr) return absl::InvalidArgumentError("no line parser");
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be positive, got ", num_shards));
  }
  if (options.files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(parser->name(), ": no input files"));
  }
  if (options.shard_rule != ShardRule::kWithinFiles) {
    return absl::InvalidArgumentError(
        "counting in one pass needs ShardRule::kWithinFiles");
  }
  if (absl::Status s = ValidateBadLinePolicy(options.bad_lines); !s.ok()) {
    return s;
  }
  ShardCounter counter(options, std::move(parser), num_shards);
  for (const std::string& path : options.files) {
    absl::StatusOr<std::unique_ptr<LineReader>> first =
        LineReader::Open(path, 0, num_shards, options.line_reader);
    if (!first.ok()) return first.status();
    if ((*first)->interleaved() && num_shards > 1) {
      // Every line once, dealt as the shards' readers deal them.
      first->reset();
      absl::StatusOr<std::unique_ptr<LineReader>> all =
          LineReader::Open(path, 0, 1, options.line_reader);
      if (!all.ok()) return all.status();
      if (absl::Status s = counter.CountLines(path, **all, -1); !s.ok()) {
        return s;
      }
      continue;
    }
    for (int shard = 0; shard < num_shards; ++shard) {
      std::unique_ptr<LineReader> reader;
      if (shard == 0) {
        reader = *std::move(first);
      } else {
        absl::StatusOr<std::unique_ptr<LineReader>> r =
            LineReader::Open(path, shard, num_shards, options.line_reader);
        if (!r.ok()) return r.status();
        reader = *std::move(r);
      }
      if (absl::Status s = counter.CountLines(path, *reader, shard); !s.ok()) {
        return s;
      }
    }
  }
  return counter.Finish(stats);
}

}  // namespace ps::worker::data
