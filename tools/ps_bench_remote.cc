#include "tools/ps_bench_remote.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "common/wire/placement.h"

namespace ps::bench {

absl::StatusOr<std::unique_ptr<RemoteServers>> ConnectRemote(
    const std::string& servers, const std::string& token_file,
    const char* env_token, int replication) {
  auto remote = std::make_unique<RemoteServers>();
  remote->addresses = absl::StrSplit(servers, ',', absl::SkipWhitespace());
  if (remote->addresses.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--servers: no host:port in \"", servers, "\""));
  }
  absl::StatusOr<std::string> token = ReadClusterToken(token_file, env_token);
  if (!token.ok()) return token.status();
  remote->token = *token;
  const int n = static_cast<int>(remote->addresses.size());
  if (replication < 1 || replication > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replication=", replication, ": must be in [1, ", n,
                     "] (the servers: no two replicas of a shard on one)"));
  }
  remote->replication = replication;
  // A wrong address fails here, at once, not as a case's error.
  for (const std::string& address : remote->addresses) {
    if (!CanConnect(address, absl::Seconds(5))) {
      return absl::UnavailableError(absl::StrCat(
          "--servers: cannot connect to ", address, " within 5 s"));
    }
  }
  coordinator::GrpcShardClientOptions shard_options;
  shard_options.token = remote->token;
  remote->shards = coordinator::MakeGrpcShardClient(shard_options);
  return remote;
}

absl::Status SetUpRemoteShard(RemoteServers& remote, SetupJobRequest setup) {
  const int shard = setup.shard_index();
  const int n = static_cast<int>(remote.addresses.size());
  setup.mutable_spec()->mutable_replication()->set_factor(remote.replication);
  if (remote.replication > 1) {
    setup.set_replica_epoch(1);
    setup.set_replica_role(SetupJobRequest::BACKUP);
    for (int b : BackupServers(shard, n, remote.replication)) {
      absl::Status st =
          remote.shards->SetupJob(remote.addresses[b], setup).status();
      if (!st.ok()) return st;
      setup.add_backup_addresses(remote.addresses[b]);
    }
    setup.set_replica_role(SetupJobRequest::PRIMARY);
  }
  return remote.shards->SetupJob(remote.addresses[shard], setup).status();
}

}  // namespace ps::bench
