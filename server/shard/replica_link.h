// A primary's link to a backup in another ps_server: ParameterService's
// Replicate over gRPC, with the cluster's TLS settings and token.
#ifndef PS_SERVER_SHARD_REPLICA_LINK_H_
#define PS_SERVER_SHARD_REPLICA_LINK_H_

#include <string>

#include "common/platform/rpc.h"
#include "server/shard/replicated_shard.h"

namespace ps::server {

// Links to backups at their addresses (host:port). The channel is made at
// the first Send; a TLS file that cannot be read fails every Send.
ReplicaLinkFactory GrpcReplicaLinks(ChannelOptions options, std::string token);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_REPLICA_LINK_H_
