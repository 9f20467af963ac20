// Setting a job up on a shard: the checks of a SetupJobRequest, a new job's
// state with its tables, and its metrics.
#ifndef PS_SERVER_SHARD_JOB_SETUP_H_
#define PS_SERVER_SHARD_JOB_SETUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/platform/metrics.h"
#include "proto/config.pb.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/job.h"

namespace ps::server {

// Checks what needs no state: the job id (a directory name: letters,
// digits, '-', '_', '.', not starting with '.'), the shard index and the
// spec. Returns the normalised spec; INVALID_ARGUMENT naming the field.
absl::StatusOr<JobSpec> CheckSetupRequest(const SetupJobRequest& request);

// A new job's state for `request` (checked, with `spec` its normalised
// spec): the placement and the tables holding this shard's part of the
// model, freshly initialised; not restored, no members, version 0.
// INVALID_ARGUMENT for an incarnation out of range.
absl::StatusOr<std::shared_ptr<Job>> NewJob(const SetupJobRequest& request,
                                            const JobSpec& spec);

// Registers the job's series (labels job, shard) in `registry` and points
// job.metrics at them.
void RegisterJobMetrics(MetricsRegistry& registry, Job& job);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_JOB_SETUP_H_
