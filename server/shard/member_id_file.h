// A server's member id kept in its data directory, so that a shard that
// restarts -- on another port, or another host sharing the directory --
// registers under the identity the coordinator's jobs know it by
// (JobRecord.server_members) and takes its own place again.
#ifndef PS_SERVER_SHARD_MEMBER_ID_FILE_H_
#define PS_SERVER_SHARD_MEMBER_ID_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/platform/file_system.h"

namespace ps::server {

// <data_dir>/member_id.
std::string MemberIdPath(const std::string& data_dir);

// The id kept in `data_dir`: 0 when `data_dir` is empty or holds none yet.
// INVALID_ARGUMENT (naming the file) when the file holds no positive
// integer; the file system's error when it cannot be read.
absl::StatusOr<int64_t> LoadMemberId(FileSystem* fs,
                                     const std::string& data_dir);

// Keeps `id` (> 0) in `data_dir`, atomically; a no-op for an empty
// `data_dir` or an id already kept there.
absl::Status SaveMemberId(FileSystem* fs, const std::string& data_dir,
                          int64_t id);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_MEMBER_ID_FILE_H_
