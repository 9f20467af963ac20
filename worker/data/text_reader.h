// Streams examples from text files (Criteo TSV, libsvm, MovieLens ratings:
// any LineParser) as batches: one data shard of one epoch, read in blocks
// (never a whole file), .gz read transparently, optionally shuffled within a
// bounded buffer, bad lines counted and reported with file:line.
//
// The shard rule (which lines shard k of n streams):
//   ShardRule::kWithinFiles (the default): every file is split among the
//     shards as line_reader.h says (byte ranges of a plain file; every n-th
//     line of a gzip file), and the shard reads its part of each file in the
//     order of `files`;
//   ShardRule::kWholeFiles: file i belongs to shard i % n whole (for data in
//     many files, e.g. Criteo's day_0.gz .. day_23.gz: no shard decompresses
//     another's files). Shards differ in size by up to a file.
// The shard's stream is its lines in that order, passed through a shuffle
// buffer of `shuffle_buffer` lines when that is above 1: the buffer fills,
// then each step emits a uniformly chosen line of it and puts the next input
// line in its place (TensorFlow's Dataset.shuffle). Its random numbers come
// from (seed, epoch, shard) alone, so the stream is a pure function of the
// data, the options and the ShardSpec. A line comes out at most
// `shuffle_buffer` places before its place in file order (it may stay in the
// buffer longer), and memory holds that many lines (a generated Criteo line
// takes about 580 bytes there: 10^5 lines added 58 MB of peak RSS).
// Bad lines are dropped from the stream after shuffling; the good ones are
// numbered 0, 1, ... and ShardSpec::start_example = n resumes at the n-th by
// re-reading and parsing the n before it (time proportional to n; nothing
// else is needed to continue another worker's shard exactly).
#ifndef PS_WORKER_DATA_TEXT_READER_H_
#define PS_WORKER_DATA_TEXT_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/bad_lines.h"
#include "worker/data/batch_reader.h"
#include "worker/data/line_parser.h"
#include "worker/data/line_reader.h"

namespace ps::worker::data {

enum class ShardRule { kWithinFiles, kWholeFiles };

struct TextReaderOptions {
  std::vector<std::string> files;  // read in this order
  ShardRule shard_rule = ShardRule::kWithinFiles;
  // Lines held for shuffling; 0 or 1 keeps file order.
  int64_t shuffle_buffer = 0;
  uint64_t seed = 0;
  BadLinePolicy bad_lines;
  LineReaderOptions line_reader;
};

// Checks the options and that every file exists and is readable (NOT_FOUND
// or another errno status naming it), then returns a reader of shard
// `shard` that opens the files one at a time as it reaches them.
// INVALID_ARGUMENT for no files, a negative shuffle_buffer, a bad policy or
// ShardSpec.
absl::StatusOr<std::unique_ptr<BatchReader>> OpenTextReader(
    const TextReaderOptions& options, std::unique_ptr<LineParser> parser,
    const ShardSpec& shard);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_TEXT_READER_H_
