// Metric intake: the points workers report (ReportMetrics), the summary a
// job's record keeps of them (step, epoch, losses, accuracy, throughput,
// staleness), a worker's share marked done, and the series as GetMetrics
// returns it (without the points a rollback superseded).
//
// Functions over a job's state; those that take the JobTable need its lock.
#ifndef PS_SERVER_COORDINATOR_METRIC_INTAKE_H_
#define PS_SERVER_COORDINATOR_METRIC_INTAKE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/coordinator_service.pb.h"
#include "server/coordinator/job_state.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/write_batch.h"

namespace ps::coordinator {

// Zeroes the record's summary fields (before replaying a stored series).
void ResetSummary(Job& job);

// Folds one point into the record's summary: the same on the live path and
// when replaying the store after a restart. Only points of the job's
// current incarnation move the step and the epoch.
void ApplyPoint(Job& job, const MetricPoint& p);

// The job's throughput counts active workers only: drops the member's.
void ForgetThroughput(Job& job, int64_t member_id);

// The request's points as they are stored: member id set, time_ms (if 0)
// the time since the job started. INVALID_ARGUMENT naming points[i] for a
// name outside 1..64 characters or a step outside 0..MaxStep.
absl::StatusOr<std::vector<MetricPoint>> StampPoints(
    const Job& job, const ReportMetricsRequest& request, int64_t now);

// ReportMetrics under the table's lock: stores the points (queued in
// `writes`), feeds the sender's compute time to the straggler policy, and
// with request.done marks its share finished (every active worker done:
// SUCCEEDED). Returns whether the job ended. FAILED_PRECONDITION when the
// member never held a rank in the job; INVALID_ARGUMENT as StampPoints
// (nothing is stored then).
absl::StatusOr<bool> IntakeMetrics(JobTable& table, Job& job,
                                   const ReportMetricsRequest& request,
                                   WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// When every active worker is done: the job SUCCEEDS (`reason`) once its
// last evaluation is of the final model, or when it has nothing to
// evaluate (text data without test files). Otherwise the evaluator's slot
// is opened again (done = false at its own clock, a new membership epoch;
// event "final_evaluation"): the worker, now told others_done, evaluates
// the final model and reports done once more. Asked once per membership
// epoch: a second done without that evaluation ends the job all the same
// (event "no_final_evaluation"). Returns whether the job ended.
bool FinishIfAllDone(JobTable& table, Job& job, absl::string_view reason,
                     WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu());

// The points GetMetrics returns, in the order reported: those named (all when
// none is), and unless request.include_superseded, none of an incarnation at a
// step after the lowest restart step of the rollbacks that followed it
// (those steps were computed again). Long series come thinned
// (metric_series.h): a merged point goes by its mean step.
std::vector<MetricPoint> SelectPoints(const Job& job,
                                      const GetMetricsRequest& request);

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_METRIC_INTAKE_H_
