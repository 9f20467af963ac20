// The text of ExplainJob: why a job is (not) moving, in one screen, from
// the job's record, what the coordinator knows of its workers, and each
// shard's own status.
#ifndef PS_SERVER_COORDINATOR_EXPLAIN_H_
#define PS_SERVER_COORDINATOR_EXPLAIN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator_service.pb.h"
#include "proto/parameter_service.pb.h"

namespace ps::coordinator {

struct ExplainInput {
  struct Worker {
    int64_t last_heartbeat_ms = 0;
    std::optional<double> steps_per_sec;  // unknown until measured
  };
  JobRecord record;                   // slot clocks filled in
  std::map<int64_t, Worker> workers;  // by member id, active workers
  // The same workers as they registered (BLAS core, GEMM probe); a worker
  // missing here shows "-".
  std::map<int64_t, Member> members;
  // One per shard in shard order (an error: the shard did not answer);
  // empty when the job is not running.
  std::vector<absl::StatusOr<ShardStatus>> shards;
  std::vector<JobEvent> recent_events;
  int64_t now_ms = 0;
  int64_t heartbeat_interval_ms = 1000;
};

// Lines: the job's state and reason; progress; the consistency bound in
// force; each shard (version, the step it holds and for which workers,
// blocked pulls, push counts) or UNREACHABLE; each worker (rank, member,
// clock, last heartbeat, step rate, GEMM probe and BLAS core, data shards,
// state, steps behind); recent events; and a "diagnosis:" line naming what
// blocks the job, or slows it (a running worker whose GEMM probe is under
// half the fastest one's).
std::string FormatExplanation(const ExplainInput& in);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_EXPLAIN_H_
