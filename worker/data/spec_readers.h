// The readers a job's DataSpec (proto/config.proto) names: the text
// format's parser with the spec's options, the bad-line policy, and a count
// of the training examples per data shard for sizing an epoch.
#ifndef PS_WORKER_DATA_SPEC_READERS_H_
#define PS_WORKER_DATA_SPEC_READERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "worker/data/batch_reader.h"
#include "worker/data/line_parser.h"
#include "worker/data/text_reader.h"

namespace ps::worker::data {

// The parser of `d.format()` with `d`'s options. INVALID_ARGUMENT for IDX
// (not a text format) and the formats' own option errors.
absl::StatusOr<std::unique_ptr<LineParser>> ParserForSpec(const DataSpec& d);

// max_bad_line_fraction (unset: 0.001) and min_bad_lines (unset: 10).
BadLinePolicy BadLinePolicyForSpec(const DataSpec& d);

// A reader of shard `shard` of `files` (d.train_files or d.test_files) in
// d's format, shuffled with d.shuffle_buffer under `seed`.
absl::StatusOr<std::unique_ptr<BatchReader>> OpenSpecReader(
    const DataSpec& d, const std::vector<std::string>& files, uint64_t seed,
    const ShardSpec& shard);

// Good examples in each of the `num_shards` data shards of d.train_files:
// one streaming pass over the data (text_count.h: a gzip file is
// decompressed once). `stats` (may be null) gets the lines and bad lines
// over all shards, and the first bad lines' samples. The readers' errors,
// among them INVALID_ARGUMENT once bad lines pass the spec's limit over
// the whole pass.
absl::StatusOr<std::vector<int64_t>> CountShardExamples(const DataSpec& d,
                                                        int num_shards,
                                                        ReaderStats* stats);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_SPEC_READERS_H_
