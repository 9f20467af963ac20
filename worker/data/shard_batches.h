// A worker's training batches of streamed data, addressed by (data shard,
// epoch, batch index within the shard's epoch): batch i of shard k in
// epoch e holds examples [i * batch_size, (i + 1) * batch_size) of the
// shard's stream for that epoch (batch_reader.h: a pure function of the
// data, the options and the ShardSpec). Reading batches in order keeps one
// reader open per shard; any other batch reopens the shard's reader at
// ShardSpec::start_example = i * batch_size, so whoever holds the address
// of a batch (a survivor continuing another worker's shard) gets exactly
// its examples.
//
// A shard whose stream ends before batch i (its length is learnt when a
// read comes back short; the last, partial batch is dropped) continues in
// the next epoch: with n full batches per pass, batch i of epoch e is batch
// i % n of epoch e + i / n.
#ifndef PS_WORKER_DATA_SHARD_BATCHES_H_
#define PS_WORKER_DATA_SHARD_BATCHES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/batch.h"
#include "worker/data/batch_reader.h"

namespace ps::worker::data {

// Not thread-safe: one thread reads.
class ShardBatches {
 public:
  using Opener = std::function<absl::StatusOr<std::unique_ptr<BatchReader>>(
      const ShardSpec& spec)>;

  // `open` makes the reader of a ShardSpec (num_shards is filled in).
  ShardBatches(Opener open, int num_shards, int batch_size);

  // Batch `index` of `shard` in `epoch`, always batch_size examples.
  // INVALID_ARGUMENT for a shard outside [0, num_shards) or a negative
  // epoch or index; FAILED_PRECONDITION when the shard holds fewer than
  // batch_size examples; the readers' errors (bad lines past the limit
  // among them) unchanged.
  absl::StatusOr<Batch> BatchAt(int shard, int64_t epoch, int64_t index);

  // Bad lines seen so far: per shard the most any of its readers has
  // counted (a line read again in a later epoch counts once), summed over
  // the shards; and the first samples ("path:line: reason").
  int64_t bad_lines() const;
  const std::vector<std::string>& bad_line_samples() const { return samples_; }

 private:
  struct Open {
    std::unique_ptr<BatchReader> reader;
    int64_t epoch = 0;
  };
  struct Shard {
    Open open;
    int64_t full_batches = -1;  // per pass; -1 until the stream's end is seen
    int64_t bad_lines = 0;
  };

  void NoteStats(Shard& s);

  const Opener open_;
  const int num_shards_;
  const int batch_size_;
  std::map<int, Shard> shards_;
  std::vector<std::string> samples_;
};

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_SHARD_BATCHES_H_
