// Counts the good examples of each data shard of text files in one pass
// over the data: what OpenTextReader's shards (ShardRule::kWithinFiles)
// would stream, without a reader per shard. A plain file is read range by
// range (its shards' byte ranges, line_reader.h: together once); a gzip
// file, whose shards interleave line by line, is decompressed once and its
// line i counted for shard i % num_shards, where a reader per shard would
// decompress it num_shards times.
#ifndef PS_WORKER_DATA_TEXT_COUNT_H_
#define PS_WORKER_DATA_TEXT_COUNT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/batch_reader.h"
#include "worker/data/line_parser.h"
#include "worker/data/text_reader.h"

namespace ps::worker::data {

// The good examples of shards 0..num_shards-1 of `options.files` (in
// order; shuffling changes no count, so shuffle_buffer and seed are not
// used). `stats` (may be null) gets the lines, bad lines, uncompressed
// bytes read and the first bad lines' samples ("path:line: reason") over
// all shards. Bad lines are judged by options.bad_lines over the whole
// pass: INVALID_ARGUMENT once they pass it, naming the count and the first
// bad lines. INVALID_ARGUMENT also for num_shards < 1, no files, no parser
// or kWholeFiles; the files' errors as OpenTextReader and LineReader give
// them.
absl::StatusOr<std::vector<int64_t>> CountTextShardExamples(
    const TextReaderOptions& options, std::unique_ptr<LineParser> parser,
    int num_shards, ReaderStats* stats);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_TEXT_COUNT_H_
