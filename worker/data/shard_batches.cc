#include "worker/data/shard_batches.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::worker::data {
namespace {
constexpr size_t kMaxSamples = 20;
}  // namespace

ShardBatches::ShardBatches(Opener open, int num_shards, int batch_size)
    : open_(std::move(open)),
      num_shards_(num_shards),
      batch_size_(batch_size) {}

void ShardBatches::NoteStats(Shard& s) {
  if (s.open.reader == nullptr) return;
  const ReaderStats stats = s.open.reader->stats();
  if (stats.bad_lines <= s.bad_lines) return;
  s.bad_lines = stats.bad_lines;
  for (const std::string& sample : stats.bad_line_samples) {
    if (samples_.size() >= kMaxSamples) break;
    if (std::find(samples_.begin(), samples_.end(), sample) == samples_.end())
      samples_.push_back(sample);
  }
}

int64_t ShardBatches::bad_lines() const {
  int64_t n = 0;
  for (const auto& [k, s] : shards_) n += s.bad_lines;
  return n;
}

absl::StatusOr<Batch> ShardBatches::BatchAt(int shard, int64_t epoch,
                                            int64_t index) {
  if (shard < 0 || shard >= num_shards_ || epoch < 0 || index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no batch ", index, " of data shard ", shard, " of ",
                     num_shards_, " in epoch ", epoch));
  }
  Shard& s = shards_[shard];
  // At most twice: a short read teaches the shard's length, then the
  // address wraps into a later epoch.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (s.full_batches == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data shard ", shard, " of ", num_shards_, " holds fewer than ",
          batch_size_, " examples (one batch)"));
    }
    if (s.full_batches > 0) {
      epoch += index / s.full_batches;
      index %= s.full_batches;
    }
    const int64_t start = index * batch_size_;
    if (s.open.reader == nullptr || s.open.epoch != epoch ||
        s.open.reader->position() != start) {
      NoteStats(s);
      absl::StatusOr<std::unique_ptr<BatchReader>> reader =
          open_({.shard = shard,
                 .num_shards = num_shards_,
                 .epoch = epoch,
                 .start_example = start});
      if (!reader.ok()) return reader.status();
      s.open = {std::move(*reader), epoch};
    }
    absl::StatusOr<Batch> b = s.open.reader->Next(batch_size_);
    NoteStats(s);
    if (!b.ok()) return b.status();
    if (b->size == batch_size_) return b;
    // The stream ended inside this batch: its length is now known.
    s.full_batches = s.open.reader->position() / batch_size_;
    s.open.reader.reset();
  }
  return absl::InternalError(
      absl::StrCat("batch ", index, " of data shard ", shard, " not found"));
}

}  // namespace ps::worker::data
