// The shard store's log: one line on stderr per event a reader of the
// server's log needs (job set up, restored, refused checkpoints).
#ifndef PS_SERVER_SHARD_SHARD_LOG_H_
#define PS_SERVER_SHARD_SHARD_LOG_H_

#include <cstdio>
#include <string>

namespace ps::server {

inline void ShardLog(const std::string& line) {
  std::fprintf(stderr, "[ps_server] %s\n", line.c_str());
}

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SHARD_LOG_H_
