#include "worker/ps_access.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model.h"
#include "common/placement.h"
#include "common/status.h"
#include "server/parameter_client.h"

namespace ps::worker {
namespace {

class PsAccess final : public ParameterAccess {
 public:
  PsAccess(std::unique_ptr<server::ParameterClient> client,
           ConsistencySpec::Model model, PsAccessOptions options)
      : client_(std::move(client)),
        model_(model),
        options_(std::move(options)) {}

  absl::StatusOr<int64_t> Pull(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    const int64_t min_version = model_ == ConsistencySpec::BSP ? clock : 0;
    server::Ticket t = client_->PullAll(clock, min_version, std::move(tensors));
    PS_RETURN_IF_ERROR(Await(t, absl::StrCat("pull at clock ", clock)));
    return t.version();
  }

  absl::Status Push(int64_t clock, int64_t base_version, int index,
                    absl::Span<const float> grad) override {
    base_version_ = base_version;
    pushes_.push_back(client_->PushTensor(index, grad, clock, base_version));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Finish(int64_t clock) override {
    server::Ticket end = client_->EndStep(clock, base_version_);
    int64_t staleness = 0;
    absl::Status first_error;
    for (const server::Ticket& t : pushes_) {
      absl::Status s = Await(t, absl::StrCat("push at clock ", clock));
      if (absl::IsAborted(s)) continue;  // ASP: too stale, rejected and counted
      if (!s.ok() && first_error.ok()) first_error = s;
      if (s.ok()) staleness = std::max(staleness, t.version() - base_version_);
    }
    pushes_.clear();
    PS_RETURN_IF_ERROR(first_error);
    absl::Status s = Await(end, absl::StrCat("end of step ", clock));
    if (!s.ok() && !absl::IsAborted(s)) return s;
    return staleness;
  }

 private:
  // Waits in short slices so a stop request is seen quickly.
  absl::Status Await(const server::Ticket& t, const std::string& what) {
    const absl::Time deadline = absl::Now() + options_.retry_deadline;
    for (;;) {
      absl::Status s = t.Wait(absl::Milliseconds(200));
      if (!absl::IsDeadlineExceeded(s) || t.Done()) {
        return Annotate(s, what);
      }
      if (options_.stop != nullptr && options_.stop->load()) {
        return absl::CancelledError(absl::StrCat(what, ": stopped"));
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(
            absl::StrCat(what, ": no answer from the parameter servers within ",
                         absl::FormatDuration(options_.retry_deadline)));
      }
    }
  }

  std::unique_ptr<server::ParameterClient> client_;
  const ConsistencySpec::Model model_;
  const PsAccessOptions options_;
  std::vector<server::Ticket> pushes_;
  int64_t base_version_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterAccess>> CreatePsAccess(
    const WorkerAssignment& a, const PsAccessOptions& options) {
  if (a.server_addresses().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", a.job_id(), " has no parameter servers"));
  }
  PS_ASSIGN_OR_RETURN(std::vector<TensorSpec> tensors,
                      ExpandModel(a.spec().model()));
  const int64_t chunk =
      a.spec().chunk_bytes() > 0 ? a.spec().chunk_bytes() : kDefaultChunkBytes;
  PS_ASSIGN_OR_RETURN(
      Placement placement,
      ComputePlacement(tensors, a.server_addresses_size(), chunk));
  server::ParameterClientOptions co;
  co.server_addresses.assign(a.server_addresses().begin(),
                             a.server_addresses().end());
  co.token = options.token;
  co.tls = options.tls;
  // A shard that is down (killed, restarting from its checkpoint) is retried
  // for the whole retry_deadline, not for the default 5 attempts (under a
  // second), so that the workers stall and resume instead of failing.
  co.retry.max_attempts = std::numeric_limits<int>::max();
  co.retry.max_backoff = absl::Seconds(1);
  co.retry.total_deadline = options.retry_deadline;
  co.incarnation = a.incarnation();
  PS_ASSIGN_OR_RETURN(auto client,
                      server::ParameterClient::Create(
                          co, a.job_id(), options.member_id, placement));
  return std::unique_ptr<ParameterAccess>(
      new PsAccess(std::move(client), a.spec().consistency().model(), options));
}

}  // namespace ps::worker
