// Shard checkpoints on disk, stored per tensor range rather than per shard
// layout so that a job checkpointed on N shards restores onto M.
//
// Layout: <dir>/ckpt-v<version>-s<shard>-of-<num_shards>.psckpt, one file
// per shard and version, written atomically (WriteFileAtomically: temp
// file, fsync, rename, fsync of the directory). A file holds the job id, the
// job spec, the version and, per chunk, the tensor name, element offset,
// weights, optimizer slots and a CRC32 of the record; a trailing CRC32
// covers the header. A job with sparse tables adds, before the trailer, a
// section marked "PSSPARSE" with one record per table (name, row floats,
// keys, step counts and values, and a CRC32 of the record); files without
// it read as before.
//
// Thread-compatible free functions over a FileSystem (not owned): callers
// serialise writers of one dir.
#ifndef PS_COMMON_WIRE_CHECKPOINT_H_
#define PS_COMMON_WIRE_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/platform/file_system.h"
#include "proto/config.pb.h"

namespace ps {

// One contiguous range of one tensor with its optimizer state.
struct CheckpointRange {
  std::string tensor_name;
  int64_t offset = 0;  // first element within the tensor
  std::vector<float> weights;
  std::vector<float> slot1;  // empty if the optimizer has none
  std::vector<float> slot2;
  int64_t steps = 0;
};

// The rows of one sparse table on one shard (server/shard/sparse_table.h):
// row i is keys[i], its steps[i] (lazy Adam's count) and row_floats values
// (the weights, then the optimizer slots) at values[i * row_floats].
struct CheckpointSparseTable {
  std::string name;
  int32_t row_floats = 0;
  std::vector<uint64_t> keys;
  std::vector<uint32_t> steps;
  std::vector<float> values;
};

struct CheckpointData {
  std::string job_id;
  JobSpec spec;
  int64_t version = 0;
  int shard_index = 0;
  int num_shards = 1;
  std::vector<CheckpointRange> ranges;
  // Stored by key, so that a restore onto another number of shards
  // re-places each row (common/wire/key_placement.h).
  std::vector<CheckpointSparseTable> sparse_tables;
};

// Writes `data` into `dir` (created if missing) and deletes this shard's
// older files beyond the newest `keep`. Returns the path. On an I/O failure,
// INTERNAL (PERMISSION_DENIED when refused) naming the file and the system
// error; the temp file is removed and the checkpoints written before stay
// as they were.
absl::StatusOr<std::string> WriteCheckpoint(FileSystem* fs,
                                            const std::string& dir,
                                            const CheckpointData& data,
                                            int keep);

// The bytes of `data` as WriteCheckpoint writes them, and back (`name`
// names the bytes in errors, as ReadCheckpoint's path does): a checkpoint
// sent instead of written (a replicated shard's state transfer).
std::string EncodeCheckpoint(const CheckpointData& data);
absl::StatusOr<CheckpointData> DecodeCheckpoint(const std::string& contents,
                                                const std::string& name);

// Reads and verifies one file. DATA_LOSS names the file and what is wrong
// (bad magic, truncated, checksum mismatch of chunk i).
absl::StatusOr<CheckpointData> ReadCheckpoint(FileSystem* fs,
                                              const std::string& path);

// The files of one checkpoint: one per shard of one layout. Under BSP all
// shards checkpoint at the same versions; under ASP/SSP each shard counts its
// own, so a set may also be "mixed": the i-th newest file of every shard.
struct CheckpointSet {
  int64_t version = 0;  // the lowest version among the files
  int num_shards = 0;
  bool mixed = false;
  std::vector<std::string> paths;  // index = shard; all present
};

// Restore candidates in `dir`: the complete same-version sets, and for each
// layout the mixed sets (every shard's newest file, then every shard's
// second newest, ...) where they differ from those; ordered by version,
// newest first (ties: same-version sets first, then more shards). An absent
// dir yields an empty list.
std::vector<CheckpointSet> ListCheckpointSets(FileSystem* fs,
                                              const std::string& dir);

// The files shard `shard` of a `num_shards` layout wrote itself, each as a
// one-file set (paths = {that file}), newest first. A server with its own
// data directory sees only these; in the same layout they restore its
// chunks without the other shards' files.
std::vector<CheckpointSet> ListOwnCheckpoints(FileSystem* fs,
                                              const std::string& dir,
                                              int num_shards, int shard);

}  // namespace ps

#endif  // PS_COMMON_WIRE_CHECKPOINT_H_
