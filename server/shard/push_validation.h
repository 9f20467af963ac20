// Push validation: whether a push may go to the job's tables, in the order
// the checks run.
//   1. CheckPushHeader, no lock: the sequence number, its incarnation, the
//      clock and base version.
//   2. PrepareTables: every table checks its part of the payload.
//   3. AdmitPush, under the job's mutex: membership, retries (sequence
//      numbers, server/shard/seq_tracker.h), the consistency model's
//      bounds (BSP step, ASP staleness), and the update's learning rate.
// A push refused at any of them leaves the tables unchanged and counts as
// rejected (except where said).
#ifndef PS_SERVER_SHARD_PUSH_VALIDATION_H_
#define PS_SERVER_SHARD_PUSH_VALIDATION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/platform/clock.h"
#include "server/shard/job.h"
#include "server/shard/push_pull.h"
#include "server/shard/table.h"

namespace ps::server {

// A push's gradient for each of the job's tables (index as Job::tables).
using PreparedPush = std::vector<std::unique_ptr<PreparedGradient>>;

// INVALID_ARGUMENT for seq 0 of its incarnation or a negative clock or
// base version; UNAVAILABLE (not counted) for a push of another
// incarnation of the job, which the worker retries until it is restarted.
absl::Status CheckPushHeader(Job& job, const PushArgs& args);

// The checks of a pull's sparse rows before its tables': sparse_only
// without chunk ids, CheckSparseRows (common/wire/sparse_rows.h); `has_sink`:
// the caller can take rows. INVALID_ARGUMENT.
absl::Status CheckSparsePull(const Job& job, const PullArgs& args,
                             bool has_sink);

// CheckSparseRows on the push's sparse rows (common/wire/sparse_rows.h: tables,
// keys against rows, unique keys), then Table::Prepare on every table with
// `apply_now` for ASP/SSP. On an error
// the push's sequence number is used up, so that a BSP end of step does
// not wait for it.
absl::StatusOr<PreparedPush> PrepareTables(Job& job, const PushArgs& args);

// What AdmitPush decided.
struct Admission {
  enum class Outcome {
    kApply,      // apply (ASP/SSP) or stage (BSP); the seq is in flight
    kDuplicate,  // a retry of a push done or in flight: acknowledged only
    kDropped,    // BSP: too late for its step; acknowledged and counted
  };
  Outcome outcome = Outcome::kApply;
  // ASP/SSP: the rate of the update.
  UpdateRate rate;
  // Versions between the push's base and the job's.
  int64_t staleness = 0;
  // BSP: the active workers whose final gradients complete a chunk early
  // (StageRequest::early_workers); empty: nothing applies early.
  std::vector<int64_t> early_workers;
  // kDuplicate of a BSP end of step whose first attempt is no longer in
  // flight: it may have timed out waiting for the earlier pushes, its end
  // of step not counted (bsp_step.h EndBspStep with retry).
  bool retry_end_of_step = false;
};

// Admits the push: sets result->version (and ->duplicate / ->dropped), and
// for kApply marks the sequence number in flight and the worker's last
// push time (by `clock`). Errors: FAILED_PRECONDITION (not an active member),
// UNAVAILABLE (not counted, the seq stays unused: a push of the next BSP
// step while the open step's chunks are all applied but the step has not
// closed), OUT_OF_RANGE (base version or BSP clock from the future),
// ABORTED (ASP push staler than max_staleness).
absl::StatusOr<Admission> AdmitPush(Job& job, const PushArgs& args,
                                    const Clock& clock, PushResult* result)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_PUSH_VALIDATION_H_
