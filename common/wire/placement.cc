#include "common/wire/placement.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spec/model.h"

namespace ps {

absl::StatusOr<Placement> ComputePlacement(
    const std::vector<TensorSpec>& tensors, int num_shards,
    int64_t chunk_bytes) {
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: need at least one shard, got ", num_shards));
  }
  if (chunk_bytes < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: chunk_bytes must be at least 4, got ", chunk_bytes));
  }
  const int64_t chunk_elements = chunk_bytes / 4;
  Placement p;
  p.num_shards = num_shards;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int64_t n = NumElements(tensors[t]);
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: tensor '", tensors[t].name(),
                       "' has an invalid shape ", ShapeString(tensors[t])));
    }
    p.tensor_elements.push_back(n);
    if (n == 0) continue;
    const int64_t pieces = (n + chunk_elements - 1) / chunk_elements;
    const int64_t base = n / pieces;
    const int64_t extra = n % pieces;
    int64_t offset = 0;
    for (int64_t i = 0; i < pieces; ++i) {
      Chunk c;
      c.chunk_id = static_cast<int64_t>(p.chunks.size());
      c.tensor_index = static_cast<int>(t);
      c.offset = offset;
      c.num_elements = base + (i < extra ? 1 : 0);
      offset += c.num_elements;
      p.chunks.push_back(c);
    }
  }

  std::vector<int64_t> order(p.chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return p.chunks[a].num_elements > p.chunks[b].num_elements;
  });
  p.shard_bytes.assign(num_shards, 0);
  p.shard_chunks.assign(num_shards, {});
  for (int64_t id : order) {
    const int shard = static_cast<int>(
        std::min_element(p.shard_bytes.begin(), p.shard_bytes.end()) -
        p.shard_bytes.begin());
    p.chunks[id].shard = shard;
    p.shard_bytes[shard] += p.chunks[id].num_elements * 4;
    p.shard_chunks[shard].push_back(id);
  }
  for (auto& ids : p.shard_chunks) std::sort(ids.begin(), ids.end());
  return p;
}

std::vector<int64_t> ChunkBoundaries(const Placement& placement,
                                     int tensor_index) {
  std::vector<int64_t> out;
  for (const Chunk& c : placement.chunks) {
    if (c.tensor_index == tensor_index && c.offset > 0) {
      out.push_back(c.offset);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> ChunksOverlapping(const Placement& placement,
                                       int tensor_index, int64_t begin,
                                       int64_t end) {
  std::vector<int64_t> out;
  for (const Chunk& c : placement.chunks) {
    if (c.tensor_index == tensor_index && c.offset < end &&
        c.offset + c.num_elements > begin) {
      out.push_back(c.chunk_id);
    }
  }
  return out;
}

std::vector<int> BackupServers(int shard, int num_servers, int factor) {
  std::vector<int> out;
  for (int j = 1; j < factor && j < num_servers; ++j) {
    out.push_back((shard + j) % num_servers);
  }
  return out;
}

}  // namespace ps
