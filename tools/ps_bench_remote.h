// ps_bench against running ps_servers (--servers): connecting to them, and
// setting a job up on them with its shards' replicas (--replication).
#ifndef PS_TOOLS_PS_BENCH_REMOTE_H_
#define PS_TOOLS_PS_BENCH_REMOTE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/parameter_service.pb.h"
#include "server/coordinator/shard_client.h"

namespace ps::bench {

struct RemoteServers {
  std::vector<std::string> addresses;  // index = shard index
  std::string token;
  int replication = 1;  // replicas of each shard
  std::unique_ptr<coordinator::ShardClient> shards;
};

// The servers of `servers` (comma-separated host:port), each reachable
// within 5 s, with the cluster token of `token_file` or `env_token`.
// INVALID_ARGUMENT for a bad list or a factor outside [1, servers].
absl::StatusOr<std::unique_ptr<RemoteServers>> ConnectRemote(
    const std::string& servers, const std::string& token_file,
    const char* env_token, int replication);

// Sets `setup` (its shard_index the shard) up on the shard's servers: its
// backups first (BackupServers, common/wire/placement.h), then its primary
// naming them.
absl::Status SetUpRemoteShard(RemoteServers& remote, SetupJobRequest setup);

}  // namespace ps::bench

#endif  // PS_TOOLS_PS_BENCH_REMOTE_H_
