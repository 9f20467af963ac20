// The ceilings ps_bench sets its push+pull figures against, measured in the
// same process on loopback with the same bytes: a plain TCP socket
// ping-pong, gRPC echoing raw grpc::ByteBuffer slices (no protobuf), and the
// server's SGD apply against memcpy.
#ifndef PS_TOOLS_PS_BENCH_CEILINGS_H_
#define PS_TOOLS_PS_BENCH_CEILINGS_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace ps::bench {

// Round trips of `bytes` each way on one loopback connection; returns
// GB/s counting both directions and round trips per second.
std::pair<double, double> TcpPingPong(int64_t bytes, double seconds);

// Moves `bytes` out and back per step, in pieces of at most `piece` bytes
// and at least one per connection, all in flight at once over
// `connections` channels; GB/s (both directions) and steps per second.
std::pair<double, double> GrpcRawCeiling(int64_t bytes, int connections,
                                         int64_t piece, double seconds);

struct ApplyResult {
  double memcpy_gbps, sgd_gbps, push_gbps;
  // BSP step close (momentum over the whole shard), by apply threads.
  std::vector<std::pair<int, double>> close_gbps;
};

// Server-side apply of `bytes` of fp32: memcpy, the SGD loop, the whole
// shard Push path, and a BSP step close on 1 and the default apply threads.
ApplyResult ApplyBandwidth(int64_t bytes, double seconds);

}  // namespace ps::bench

#endif  // PS_TOOLS_PS_BENCH_CEILINGS_H_
