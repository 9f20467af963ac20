// Membership and heartbeats as seen by jobs. The member table itself
// (who is registered, who is ALIVE) is Membership's (membership.h); this
// unit turns heartbeats and member changes into a running job's state:
//  - a worker's heartbeat: its clock, and the assignment it gets back;
//  - a server that registers: the job's shards it serves are checked, and
//    a shard whose server came back at another address is served from
//    there (workers get the new address with the rollback that follows);
//  - failure detection on every Tick: workers silent past the job's
//    heartbeat timeout are evicted (never within the grace period after a
//    coordinator restart: their heartbeats stopped because it was down); a
//    shard that is down is waited for up to server_wait_timeout_ms (then
//    the job FAILS); under BSP without backup workers a worker behind the
//    others whose clock has not moved for the barrier timeout is evicted;
//    stragglers (straggler_policy.h) become events and, if the policy says
//    so, evictions.
//
// Functions over jobs under the JobTable's lock.
#ifndef PS_SERVER_COORDINATOR_JOB_LIVENESS_H_
#define PS_SERVER_COORDINATOR_JOB_LIVENESS_H_

#include <cstdint>

#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

struct LivenessOptions {
  // A running job whose shard is down this long FAILS.
  int64_t server_wait_timeout_ms = 120000;
  // Step rates for straggler detection are measured over this window.
  int64_t rate_window_ms = 10000;
  // No worker is evicted for silence, a barrier or slowness before this
  // time (a restarted coordinator's grace period; 0: none).
  int64_t grace_until_ms = 0;
};

// A heartbeat from a worker of `job` carrying its clock (steps completed)
// of the job's current incarnation. A clock outside 0..MaxStep is ignored
// (a peer bug must not become the job's step).
void ObserveClock(JobTable& table, Job& job, WorkerRuntime& rt, int64_t clock,
                  int64_t now, int64_t rate_window_ms)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// The assignment for a heartbeat from a registered, ALIVE worker: TRAIN for
// the running job where it holds an active slot (its clock observed if the
// request names that job and incarnation), STOP for the job it reports when
// it holds no such slot, IDLE otherwise.
void AnswerHeartbeat(JobTable& table, const HeartbeatRequest& request,
                     int64_t now, int64_t rate_window_ms, WorkerAssignment* a)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// A server registered (new, restarted, or after a coordinator restart):
// each running job's shards it serves are checked by the next reconcile.
// A shard whose server registered from another address (event
// "server_moved"), or that a server restarted at its address without its
// identity took over, is recorded at the new address and member id.
void CheckShardsServedBy(JobTable& table, const Member& server,
                         const Membership& members, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// The failure detection of one Tick for a RUNNING job (see above). Leaves
// the job RUNNING, or FAILED / SUCCEEDED by the evictions.
void CheckRunningJob(JobTable& table, Job& job, const Membership& members,
                     int64_t now, const LivenessOptions& options,
                     WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_JOB_LIVENESS_H_
