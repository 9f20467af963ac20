// The straggler policy (JobSpec.straggler_policy): each worker's step rate,
// and which workers are stragglers. A worker is one when its rate stays
// below slow_ratio x the median rate of the job's active, unfinished
// workers while the median clock advances window_steps. The rate comes from
// the worker's own compute time when every worker reports it recently (in
// BSP every clock moves at the slowest worker's pace, so clocks alone cannot
// tell who is slow), else from the clocks in its heartbeats over the rate
// window.
//
// Functions over a job's state (job_state.h), no lock of their own: the
// caller holds the job table's lock. Acting on a verdict (the event, the
// eviction) is the liveness unit's (job_liveness.h).
#ifndef PS_SERVER_COORDINATOR_STRAGGLER_POLICY_H_
#define PS_SERVER_COORDINATOR_STRAGGLER_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"

namespace ps::coordinator {

// A clock from a heartbeat at `now`: keeps the samples of the last
// `window_ms` (and at least two).
void RecordClockSample(WorkerRuntime& rt, int64_t clock, int64_t now,
                       int64_t window_ms);

// A metric point from the worker: compute_ms > 0 updates its busy time
// (an EWMA); other points are ignored.
void ObserveComputeTime(WorkerRuntime& rt, const MetricPoint& p, int64_t now);

// Steps per second: from the busy time when `use_busy`, else from the clock
// samples if they span at least half the window and the newest is within
// it; nullopt when not measured yet.
std::optional<double> StepRate(const WorkerRuntime& rt, int64_t now,
                               int64_t window_ms, bool use_busy);

struct Straggler {
  int64_t member_id = 0;
  int rank = 0;
  std::string why;  // "step rate 0.50/s below 0.50 x the median ..."
};

// Applies the job's policy at `now`: updates each active, unfinished
// worker's tracking (WorkerRuntime::below_since_median_clock, flagged) and
// returns the workers flagged in this call, in slot order. None while the
// policy is off (slow_ratio <= 0), fewer than two workers are measured
// together, or any of them has no rate yet. A worker is flagged once per
// slow spell; it is flagged again only after it has caught up.
std::vector<Straggler> DetectStragglers(Job& job, int64_t now,
                                        int64_t window_ms);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_STRAGGLER_POLICY_H_
