#include "worker/data/batch_reader.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps::worker::data {

absl::Status ValidateShardSpec(const ShardSpec& spec) {
  if (spec.num_shards < 1 || spec.shard < 0 || spec.shard >= spec.num_shards ||
      spec.epoch < 0 || spec.start_example < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad shard spec: shard ", spec.shard, " of ", spec.num_shards,
        ", epoch ", spec.epoch, ", start_example ", spec.start_example,
        " (need 0 <= shard < num_shards, epoch >= 0, start_example >= 0)"));
  }
  return absl::OkStatus();
}

}  // namespace ps::worker::data
