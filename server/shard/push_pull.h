// The arguments and results of a shard's pushes and pulls (ShardStore::Push
// and ::Pull in server/shard/shard_store.h, which describes what they mean),
// in a header of their own so that the shard's units and its tables use
// them without the store.
#ifndef PS_SERVER_SHARD_PUSH_PULL_H_
#define PS_SERVER_SHARD_PUSH_PULL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "proto/parameter_service.pb.h"

namespace ps::server {

// One chunk of a push: num_elements little-endian `dtype` values, either
// contiguous in `data` or, when they arrived split over several receive
// buffers, the concatenation of `segments` (then `data` is unused). With
// `indices` (ChunkPayload.indices: num_elements little-endian uint32
// offsets inside the chunk, strictly ascending), a sparse update of the
// chunk: value i belongs to element indices[i], the others are zero. The
// bytes only have to live for the duration of the Push call.
struct PushChunk {
  int64_t chunk_id = 0;
  DType dtype = FLOAT32;
  int64_t num_elements = 0;
  absl::string_view data;
  std::vector<absl::string_view> segments;
  absl::string_view indices;
};

struct PushArgs {
  absl::string_view job_id;
  // The job's shard the push is for (PushRequest.shard); -1: unset, the
  // one shard of the job the store holds.
  int shard = -1;
  int64_t worker_id = 0;
  uint64_t seq = 0;
  int64_t clock = 0;
  int64_t base_version = 0;
  bool end_of_step = false;
  // BSP: these chunks' gradients of the step are complete from this worker
  // (see "BSP chunks applied as they complete" in shard_store.h).
  bool chunks_final = false;
  std::vector<PushChunk> chunks;
  // Sparse rows' gradients: keys and rows, unique keys, one per table
  // (PushRequest.sparse; views that live for the Push call).
  std::vector<SparseRowsView> sparse;
};

struct PushResult {
  int64_t version = 0;
  bool duplicate = false;
  bool dropped = false;
};

struct PullArgs {
  absl::string_view job_id;
  int shard = -1;  // as PushArgs::shard
  int64_t worker_id = 0;
  int64_t clock = 0;
  int64_t min_version = 0;
  std::vector<int64_t> chunk_ids;  // empty: every chunk of the shard
  // > 0: first wait until this worker's pushes numbered up to after_seq
  // have all landed (the pull that answers an end of step must see the
  // step's earlier pushes, which may still be in flight on other streams).
  uint64_t after_seq = 0;
  // BSP: wait for the step itself to close (the job's version), not for the
  // chunks only (see "BSP chunks applied as they complete"): the answer to
  // an end of step, after which the worker's next pushes must find the
  // step closed.
  bool whole_step = false;
  // Hand no chunks to the sink (the version only).
  bool version_only = false;
  // Sparse rows to read: keys only (PullRequest.sparse; views that live for
  // the Pull call). The answer's SparseRows i is sparse[i]'s.
  std::vector<SparseRowsView> sparse;
  // No dense chunks (chunk_ids must be empty).
  bool sparse_only = false;
};

struct PullResult {
  int64_t version = 0;
  int64_t min_clock = 0;
};

// Keeps a pulled chunk's weights alive: published weights are immutable
// (an update writes a new buffer), so a pull may send them without copying
// as long as it holds this reference.
using WeightsRef = std::shared_ptr<const void>;

// Receives one chunk's weights during a pull, called under that chunk's lock:
// keep `ref` (zero copy) or copy the span out, and return quickly.
using ChunkSink =
    absl::FunctionRef<void(const Chunk& chunk, absl::Span<const float> weights,
                           const WeightsRef& ref)>;

// Receives the rows of a pull's sparse[index]: returns where to write
// num_rows rows of `dim` little-endian `dtype` values (num_rows x dim x
// DTypeSize(dtype) bytes), which the table then fills. Called once per
// SparseRows of the request, from the thread of the Pull call, with no lock
// held.
using SparseSink = absl::FunctionRef<char*(size_t index, DType dtype,
                                           int32_t dim, int64_t num_rows)>;

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_PUSH_PULL_H_
