// The apply paths of an admitted push (push_validation.h): ASP/SSP apply it
// to every table at once; BSP stages it on every table, applying parts
// early where every worker's gradient of them is complete, and its end of
// step may close the step (bsp_step.h).
#ifndef PS_SERVER_SHARD_PUSH_APPLY_H_
#define PS_SERVER_SHARD_PUSH_APPLY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/shard/job.h"
#include "server/shard/push_pull.h"
#include "server/shard/push_validation.h"

namespace ps::server {

// BSP: the parts each table applied early (index as Job::tables; empty
// for ASP/SSP).
using AppliedEarly = std::vector<std::vector<int>>;

// Applies (ASP/SSP: Table::ApplyNow with admission.rate) or stages (BSP:
// Table::Stage) the push on every table under job.apply_mu (shared), then
// counts it: pushes, bytes in, staleness, apply time (ASP/SSP), and parts
// dropped as too late. Returns the parts applied early. INVALID_ARGUMENT if
// a table's deferred NaN/Inf check refused the push: nothing changed, its
// number is used up and it counts as rejected.
absl::StatusOr<AppliedEarly> ApplyPush(Job& job, const PushArgs& args,
                                       const Admission& admission,
                                       PreparedPush& prepared)
    ABSL_LOCKS_EXCLUDED(job.apply_mu, job.mu);

// The end of an applied push, under job.mu: records the parts applied
// early (waking the pulls waiting for them), finishes the push's number,
// and counts an end of step (ASP/SSP: the version moves on; BSP: EndBspStep,
// which may put the step to close into `take`). Sets result->version.
absl::Status FinishPush(Job& job, const PushArgs& args, absl::Time deadline,
                        const AppliedEarly& applied_early, PushResult* result,
                        std::vector<int64_t>* take) ABSL_LOCKS_EXCLUDED(job.mu);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_PUSH_APPLY_H_
