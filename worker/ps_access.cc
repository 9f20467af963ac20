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

// Gradients are coalesced: a tensor's gradient waits in `pending_` until
// the pending ones reach kFlushBytes (so a small bias or output layer rides
// with the next tensor's message), and under BSP whatever is pending at the
// end of the step travels in the end-of-step message itself, whose answer
// brings the next step's weights. Not thread-safe (one training loop calls
// it).
class PsAccess final : public ParameterAccess {
 public:
  // Big enough that biases and small layers share a message, small enough
  // that a big layer leaves as soon as backward has produced it.
  static constexpr int64_t kFlushBytes = 64 << 10;

  PsAccess(std::unique_ptr<server::ParameterClient> client,
           ConsistencySpec::Model model, PsAccessOptions options)
      : client_(std::move(client)),
        model_(model),
        options_(std::move(options)),
        model_bytes_(ModelBytes(client_->placement())) {}

  absl::StatusOr<int64_t> Pull(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    server::Ticket t =
        client_->PullAll(clock, MinVersion(clock), std::move(tensors));
    PS_RETURN_IF_ERROR(Await(t, absl::StrCat("pull at clock ", clock)));
    return t.version();
  }

  absl::Status Push(int64_t clock, int64_t base_version, int index,
                    absl::Span<const float> grad) override {
    base_version_ = base_version;
    const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
    pending_.push_back({index, grad});
    pending_bytes_ += bytes;
    step_bytes_ += bytes;
    // Whatever is pending goes once it is big enough, unless the rest of the
    // step's gradients is small: then the end of step (right after backward)
    // takes it along in the same message.
    if (pending_bytes_ >= kFlushBytes &&
        model_bytes_ - step_bytes_ >= kFlushBytes) {
      pushes_.push_back(
          client_->PushTensors(TakePending(), clock, base_version));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Finish(int64_t clock) override {
    if (!pending_.empty()) {
      pushes_.push_back(
          client_->PushTensors(TakePending(), clock, base_version_));
    }
    return AwaitStep(clock, client_->EndStep(clock, base_version_));
  }

  absl::StatusOr<StepEnd> FinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    std::vector<server::TensorGrad> last;
    if (model_ == ConsistencySpec::BSP) {
      // The pending gradients ride with the end of step (BSP reports no
      // staleness, so the end's version need not be told apart).
      last = TakePending();
    } else if (!pending_.empty()) {
      // ASP/SSP: sent on their own, so that the staleness they saw is not
      // mixed up with the version the end of step itself advances.
      pushes_.push_back(
          client_->PushTensors(TakePending(), clock, base_version_));
    }
    server::ParameterClient::StepTickets t =
        client_->EndStepAndPull(std::move(last), clock, base_version_,
                                clock + 1, MinVersion(clock + 1), tensors);
    StepEnd end;
    absl::StatusOr<int64_t> staleness = AwaitStep(clock, t.end);
    if (!staleness.ok()) {
      // Await the pull too: its buffers are the caller's.
      (void)Await(t.pull, absl::StrCat("pull at clock ", clock + 1));
      return staleness.status();
    }
    end.staleness = *staleness;
    PS_ASSIGN_OR_RETURN(end.version,
                        AwaitNextWeights(clock, t.pull, false, tensors));
    return end;
  }

  PendingStepEnd StartStepEnd(int64_t clock, int64_t base_version,
                              std::vector<absl::Span<const float>> grads,
                              std::vector<absl::Span<float>> tensors) override {
    base_version_ = base_version;
    std::vector<server::TensorGrad> all;
    for (size_t i = 0; i < grads.size(); ++i) {
      all.push_back({static_cast<int>(i), grads[i]});
    }
    server::ParameterClient::StepTickets t =
        client_->EndStepAndPull(std::move(all), clock, base_version, clock + 1,
                                MinVersion(clock + 1), tensors);
    return [this, t, clock, base_version,
            tensors = std::move(tensors)]() -> absl::StatusOr<StepEnd> {
      StepEnd end;
      absl::Status s = Await(t.end, absl::StrCat("end of step ", clock));
      if (!s.ok() && !absl::IsAborted(s)) {
        (void)Await(t.pull, absl::StrCat("pull at clock ", clock + 1));
        return s;
      }
      // The pushes' staleness: versions others applied since base_version.
      if (s.ok())
        end.staleness = std::max<int64_t>(0, t.end.version() - base_version);
      PS_ASSIGN_OR_RETURN(
          end.version,
          AwaitNextWeights(clock, t.pull, absl::IsAborted(s), tensors));
      return end;
    };
  }

  void CancelCalls() override { client_->CancelInFlight(); }

 private:
  // The weights of clock + 1 that an end of step's `pull` brings; pulled on
  // their own when the end (`rejected`) or the pull was refused as too
  // stale (ASP max_staleness), which leaves the shard's answer without them.
  absl::StatusOr<int64_t> AwaitNextWeights(
      int64_t clock, const server::Ticket& pull, bool rejected,
      const std::vector<absl::Span<float>>& tensors) {
    absl::Status s = Await(pull, absl::StrCat("pull at clock ", clock + 1));
    if (rejected || absl::IsAborted(s)) return Pull(clock + 1, tensors);
    PS_RETURN_IF_ERROR(s);
    return pull.version();
  }

  static int64_t ModelBytes(const Placement& placement) {
    int64_t n = 0;
    for (int64_t e : placement.tensor_elements) n += e;
    return n * static_cast<int64_t>(sizeof(float));
  }

  int64_t MinVersion(int64_t clock) const {
    return model_ == ConsistencySpec::BSP ? clock : 0;
  }

  std::vector<server::TensorGrad> TakePending() {
    std::vector<server::TensorGrad> out = std::move(pending_);
    pending_.clear();
    pending_bytes_ = 0;
    return out;
  }

  // Waits for the step's pushes and its end: the staleness the pushes saw.
  absl::StatusOr<int64_t> AwaitStep(int64_t clock, const server::Ticket& end) {
    step_bytes_ = 0;
    int64_t staleness = 0;
    absl::Status first_error;
    for (const server::Ticket& t : pushes_) {
      absl::Status s = Await(t, absl::StrCat("push at clock ", clock));
      if (absl::IsAborted(s)) continue;  // ASP: too stale, rejected and counted
      if (!s.ok() && first_error.ok()) first_error = s;
      if (s.ok()) staleness = std::max(staleness, t.version() - base_version_);
    }
    pushes_.clear();
    absl::Status s = Await(end, absl::StrCat("end of step ", clock));
    PS_RETURN_IF_ERROR(first_error);
    if (!s.ok() && !absl::IsAborted(s)) return s;
    return staleness;
  }

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
  std::vector<server::TensorGrad> pending_;
  int64_t pending_bytes_ = 0;
  // The whole model's gradient bytes, and this step's pushed so far.
  const int64_t model_bytes_;
  int64_t step_bytes_ = 0;
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
  co.send_thread = true;
  co.retry.max_attempts = std::numeric_limits<int>::max();
  co.retry.max_backoff = absl::Seconds(1);
  co.retry.total_deadline = options.retry_deadline;
  co.incarnation = a.incarnation();
  co.pipeline_step_end = a.spec().consistency().model() != ConsistencySpec::BSP;
  PS_ASSIGN_OR_RETURN(auto client,
                      server::ParameterClient::Create(
                          co, a.job_id(), options.member_id, placement));
  return std::unique_ptr<ParameterAccess>(
      new PsAccess(std::move(client), a.spec().consistency().model(), options));
}

}  // namespace ps::worker
