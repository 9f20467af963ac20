// The interface every reader offers the training loop: one data shard of one
// epoch as a stream of batches, resumable at an example position.
#ifndef PS_WORKER_DATA_BATCH_READER_H_
#define PS_WORKER_DATA_BATCH_READER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/batch.h"

namespace ps::worker::data {

// Which part of the data a reader streams. A shard's examples, and their
// order, are a pure function of (the data, the reader's options, shard,
// num_shards, epoch), so any worker can take over any shard: a survivor that
// continues a dead worker's shard k opens it with start_example = the number
// of examples the dead worker had consumed from it, and gets exactly the
// examples it would have got next. The rule that assigns examples to shards
// belongs to each reader (text_reader.h, idx_batch_reader.h).
struct ShardSpec {
  int shard = 0;
  int num_shards = 1;
  int64_t epoch = 0;          // changes the shuffled order, not the shard
  int64_t start_example = 0;  // examples of the shard's stream to skip
};

absl::Status ValidateShardSpec(const ShardSpec& spec);

// What a reader has seen so far. Lines and bad lines count everything read,
// the skipped prefix of a resumed shard included.
struct ReaderStats {
  int64_t lines = 0;      // records read (text lines; IDX examples)
  int64_t examples = 0;   // good records, skipped ones included
  int64_t bad_lines = 0;  // records rejected (lines - examples)
  int64_t bytes = 0;      // uncompressed bytes read from the files
  // "path:line: reason" for the first bad lines (a bounded number of them).
  std::vector<std::string> bad_line_samples;
};

// One shard of one epoch. Not thread-safe: one thread calls Next (the
// prefetch thread).
class BatchReader {
 public:
  virtual ~BatchReader() = default;

  const BatchSchema& schema() const { return schema_; }

  // The next at most `max_examples` (> 0) examples of the shard, fewer only
  // at its end; a batch of size 0 once the shard is exhausted (and on every
  // later call). Errors: INVALID_ARGUMENT when bad lines pass the configured
  // fraction (naming the count and the first bad lines) or max_examples < 1,
  // DATA_LOSS for a corrupt or truncated file, others from the file system.
  // After an error the reader is unusable.
  virtual absl::StatusOr<Batch> Next(int max_examples) = 0;

  // The shard position of the next example Next would return (examples
  // skipped through ShardSpec::start_example included). A shard shorter than
  // start_example ends at once; position() then drops to its length.
  virtual int64_t position() const = 0;

  virtual ReaderStats stats() const = 0;

 protected:
  explicit BatchReader(BatchSchema schema) : schema_(std::move(schema)) {}

 private:
  BatchSchema schema_;
};

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_BATCH_READER_H_
