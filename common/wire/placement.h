// Where every parameter lives: tensors cut into chunks of bounded size, the
// chunks spread over shards with bytes balanced. A pure function of (tensors,
// number of shards, chunk size), so every process computes the same answer
// without talking.
#ifndef PS_COMMON_WIRE_PLACEMENT_H_
#define PS_COMMON_WIRE_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace ps {

inline constexpr int64_t kDefaultChunkBytes = 256 * 1024;

// A contiguous range of one tensor's (row-major, fp32) elements.
struct Chunk {
  int64_t chunk_id = 0;  // dense, 0..num_chunks-1, in tensor order
  int tensor_index = 0;
  int64_t offset = 0;  // first element within the tensor
  int64_t num_elements = 0;
  int shard = 0;
};

struct Placement {
  int num_shards = 0;
  std::vector<Chunk> chunks;                       // index = chunk_id
  std::vector<std::vector<int64_t>> shard_chunks;  // chunk ids, ascending
  std::vector<int64_t> shard_bytes;
  std::vector<int64_t> tensor_elements;  // per tensor
};

// Cuts each tensor into ceil(bytes / chunk_bytes) chunks of nearly equal size
// (they differ by at most one element) and assigns them largest first to the
// least-loaded shard (ties: lowest shard index). The heaviest shard holds at
// most one chunk more than the mean. Fails on no shards, a chunk size under
// 4 bytes, or a tensor with a negative or overflowing shape.
absl::StatusOr<Placement> ComputePlacement(
    const std::vector<TensorSpec>& tensors, int num_shards,
    int64_t chunk_bytes);

// The element offsets inside tensor `tensor_index` where its chunks after
// the first start (ascending; empty for a one-chunk tensor or an index the
// placement does not have). A part of a tensor pushed on its own must start
// and end at these offsets (or at the tensor's start and end).
std::vector<int64_t> ChunkBoundaries(const Placement& placement,
                                     int tensor_index);

// The ids (ascending) of tensor `tensor_index`'s chunks that hold any of the
// elements [begin, end); empty when begin >= end.
std::vector<int64_t> ChunksOverlapping(const Placement& placement,
                                       int tensor_index, int64_t begin,
                                       int64_t end);

// Replicated shards (JobSpec.replication): the servers (indices into a
// job's server list) of shard `shard`'s backups, replicas 1 .. factor-1:
// servers shard+1, ..., shard+factor-1 (mod num_servers), so that no
// server holds two replicas of one shard (factor <= num_servers).
std::vector<int> BackupServers(int shard, int num_servers, int factor);

}  // namespace ps

#endif  // PS_COMMON_WIRE_PLACEMENT_H_
