#include "worker/ps_access.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/spec/model.h"
#include "common/wire/placement.h"
#include "worker/client/parameter_client.h"

namespace ps::worker {
namespace {

// Gradients are coalesced: a tensor's gradient waits in `pending_` until
// the pending ones reach kFlushBytes (so a small bias or output layer rides
// with the next tensor's message), and under BSP whatever is pending at the
// end of the step travels in the end-of-step message itself, whose answer
// brings the next step's weights. With PullWithPushes, every message sent
// during the step also asks back its own chunks' next weights, which the
// shards send once they are applied (BSP: as soon as every worker's
// gradient of them is in; SSP: once the slowest worker is within the
// bound). Not thread-safe (one training loop calls it).
class PsAccess final : public ParameterAccess, public SparseRowAccess {
 public:
  // Big enough that biases and small layers share a message, small enough
  // that a big layer leaves as soon as backward has produced it.
  static constexpr int64_t kFlushBytes = 64 << 10;

  PsAccess(std::unique_ptr<client::ParameterClient> client,
           ConsistencySpec::Model model, PsAccessOptions options)
      : client_(std::move(client)),
        model_(model),
        options_(std::move(options)),
        model_bytes_(ModelBytes(client_->placement())) {}

  absl::StatusOr<int64_t> Pull(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    client::Ticket t =
        client_->PullAll(clock, MinVersion(clock), std::move(tensors));
    PS_RETURN_IF_ERROR(Await(t, absl::StrCat("pull at clock ", clock)));
    return t.version();
  }

  absl::StatusOr<int64_t> PullCurrent(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    client::Ticket t = client_->PullAll(clock, 0, std::move(tensors));
    PS_RETURN_IF_ERROR(Await(t, absl::StrCat("pull at clock ", clock)));
    return t.version();
  }

  absl::Status Push(int64_t clock, int64_t base_version, int index,
                    absl::Span<const float> grad) override {
    return PushPart(clock, base_version, index, 0, grad);
  }

  std::vector<int64_t> PartBoundaries(int index) const override {
    return ChunkBoundaries(client_->placement(), index);
  }

  void PullWithPushes(std::vector<absl::Span<float>> tensors) override {
    pull_into_ = std::move(tensors);
  }

  absl::Status PushPart(int64_t clock, int64_t base_version, int index,
                        int64_t offset, absl::Span<const float> grad) override {
    base_version_ = base_version;
    const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
    pending_.push_back({index, grad, offset});
    pending_bytes_ += bytes;
    step_bytes_ += bytes;
    // Whatever is pending goes once it is big enough, unless the rest of the
    // step's gradients is small: then the end of step (right after backward)
    // takes it along in the same message.
    if (pending_bytes_ >= kFlushBytes &&
        model_bytes_ - step_bytes_ >= kFlushBytes) {
      SendPending(clock);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Finish(int64_t clock) override {
    if (!pending_.empty()) SendPending(clock);
    Step step = TakeStep(clock);
    absl::StatusOr<int64_t> staleness =
        AwaitStep(step, client_->EndStep(clock, base_version_));
    // The weights the step's pushes asked back (unused: no next step).
    for (const client::Ticket& t : step.pulls) {
      (void)Await(t, absl::StrCat("pull at clock ", clock + 1));
    }
    absl::Status rows = AwaitRows(step);
    if (staleness.ok() && !rows.ok()) return rows;
    return staleness;
  }

  absl::StatusOr<StepEnd> FinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    return StartFinishAndPull(clock, std::move(tensors))->Wait();
  }

  std::unique_ptr<StepEndInProgress> StartFinishAndPull(
      int64_t clock, std::vector<absl::Span<float>> tensors) override {
    std::vector<client::TensorGrad> last;
    if (model_ == ConsistencySpec::BSP) {
      // The pending gradients ride with the end of step (BSP reports no
      // staleness, so the end's version need not be told apart).
      last = TakePending();
    } else if (!pending_.empty()) {
      // ASP/SSP: sent on their own, so that the staleness they saw is not
      // mixed up with the version the end of step itself advances; without
      // a pull, so that the end of step asks for their chunks and its answer
      // gives the version that includes this worker's step.
      pushes_.push_back(
          client_->PushTensors(TakePending(), clock, base_version_));
    }
    Step step = TakeStep(clock);
    client::ParameterClient::StepTickets t = client_->EndStepAndPull(
        std::move(last), clock, base_version_, clock + 1, MinVersion(clock + 1),
        tensors, step.asked);
    step.end = t.end;
    step.end_pull = t.pull;
    return std::make_unique<InProgress>(this, std::move(step),
                                        std::move(tensors));
  }

  PendingStepEnd StartStepEnd(int64_t clock, int64_t base_version,
                              std::vector<absl::Span<const float>> grads,
                              std::vector<absl::Span<float>> tensors) override {
    base_version_ = base_version;
    std::vector<client::TensorGrad> all;
    for (size_t i = 0; i < grads.size(); ++i) {
      all.push_back({static_cast<int>(i), grads[i]});
    }
    client::ParameterClient::StepTickets t =
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

  PendingStepEnd StartRowsStepEnd(
      int64_t clock, int64_t base_version,
      std::vector<absl::Span<const float>> grads,
      std::vector<client::SparsePush> rows,
      std::vector<client::SparsePull> next,
      std::vector<absl::Span<float>> tensors) override {
    // The rows first: their answers bring the rows the step after next
    // computes on.
    client::ParameterClient::StepTickets r;
    if (!next.empty()) {
      r = client_->PushRowsAndPull(std::move(rows), clock, base_version,
                                   clock + 1, MinVersion(clock + 1), next);
    } else if (!rows.empty()) {
      r.end = client_->PushRows(std::move(rows), clock, base_version);
    }
    PendingStepEnd dense =
        StartStepEnd(clock, base_version, std::move(grads), std::move(tensors));
    // (Tickets not sent are done and OK.)
    return [this, r, clock, next = std::move(next),
            dense = std::move(dense)]() -> absl::StatusOr<StepEnd> {
      absl::StatusOr<StepEnd> end = dense();
      absl::Status push =
          Await(r.end, absl::StrCat("rows push at clock ", clock));
      // A push refused as too stale (counted by the shard) is no error.
      if (!end.ok() || (!push.ok() && !absl::IsAborted(push))) {
        (void)Await(r.pull, absl::StrCat("rows pull at clock ", clock + 1));
        return !end.ok() ? end.status() : push;
      }
      PS_RETURN_IF_ERROR(AwaitRowPull({r.pull, next}, clock));
      return end;
    };
  }

  absl::StatusOr<int64_t> PullRows(
      int64_t clock, std::vector<client::SparsePull> pulls) override {
    client::Ticket t =
        client_->PullRows(clock, MinVersion(clock), std::move(pulls));
    PS_RETURN_IF_ERROR(Await(t, absl::StrCat("rows pull at clock ", clock)));
    return t.version();
  }

  // ParameterAccess's one-table calls (worker/sparse_step.h), as PullRows
  // and PushRows of that table.
  absl::Status PullSparse(int64_t clock, int table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<float> rows) override {
    return PullRows(clock, {{.table = table, .keys = keys, .rows = rows}})
        .status();
  }
  absl::Status PushSparse(int64_t clock, int64_t base_version, int table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads) override {
    return PushRows(clock, base_version,
                    {{.table = table, .keys = keys, .grads = grads}});
  }

  absl::Status PushRows(int64_t clock, int64_t base_version,
                        std::vector<client::SparsePush> grads) override {
    base_version_ = base_version;
    pushes_.push_back(client_->PushRows(std::move(grads), clock, base_version));
    return absl::OkStatus();
  }

  absl::Status PushRowsAndPull(int64_t clock, int64_t base_version,
                               std::vector<client::SparsePush> grads,
                               std::vector<client::SparsePull> next) override {
    base_version_ = base_version;
    client::ParameterClient::StepTickets t =
        client_->PushRowsAndPull(std::move(grads), clock, base_version,
                                 clock + 1, MinVersion(clock + 1), next);
    pushes_.push_back(t.end);
    row_pulls_.push_back({t.pull, std::move(next)});
    return absl::OkStatus();
  }

 private:
  // One step's calls: its pushes, the weights they ask back (`pulls`, by
  // chunk in `pull_of`), and its end of step with the rest of the weights.
  // Rows a push asked back, and their keys (pulled again if it was
  // refused).
  struct RowPull {
    client::Ticket ticket;
    std::vector<client::SparsePull> keys;
  };

  struct Step {
    std::vector<RowPull> row_pulls;
    int64_t clock = 0;
    int64_t base_version = 0;
    std::vector<client::Ticket> pushes;
    std::vector<client::Ticket> pulls;
    std::vector<int> pull_of;    // by chunk id: index into pulls, or -1
    std::vector<int64_t> asked;  // chunk ids asked back by `pulls`
    client::Ticket end;
    client::Ticket end_pull;
  };

  // An end of step on its way: the weights can be awaited chunk by chunk.
  class InProgress final : public StepEndInProgress {
   public:
    InProgress(PsAccess* access, Step step,
               std::vector<absl::Span<float>> tensors)
        : access_(access),
          step_(std::move(step)),
          tensors_(std::move(tensors)) {}

    absl::Status AwaitWeights(int index, int64_t begin, int64_t end) override {
      if (result_.has_value()) return result_->status();
      // The chunks by the call that brings them.
      std::vector<std::vector<int64_t>> by_pull(step_.pulls.size() + 1);
      for (int64_t id : ChunksOverlapping(access_->client_->placement(), index,
                                          begin, end)) {
        const int k = id < static_cast<int64_t>(step_.pull_of.size())
                          ? step_.pull_of[id]
                          : -1;
        by_pull[k < 0 ? step_.pulls.size() : k].push_back(id);
      }
      for (size_t k = 0; k < by_pull.size(); ++k) {
        if (by_pull[k].empty()) continue;
        const client::Ticket& t =
            k < step_.pulls.size() ? step_.pulls[k] : step_.end_pull;
        absl::Status s = access_->Await(
            [&](absl::Duration d) { return t.WaitForChunks(by_pull[k], d); },
            [&] { return t.Done(); },
            absl::StrCat("pull at clock ", step_.clock + 1));
        // Refused as too stale, or failed: Wait() pulls again or reports.
        if (!s.ok()) return Wait().status();
      }
      return absl::OkStatus();
    }

    absl::StatusOr<StepEnd> Wait() override {
      if (!result_.has_value())
        result_ = access_->AwaitStepEnd(step_, tensors_);
      return *result_;
    }

   private:
    PsAccess* const access_;
    const Step step_;
    const std::vector<absl::Span<float>> tensors_;
    std::optional<absl::StatusOr<StepEnd>> result_;
  };

  // Sends the pending gradients; under PullWithPushes, asking back their
  // chunks' next weights.
  void SendPending(int64_t clock) {
    std::vector<client::TensorGrad> grads = TakePending();
    if (pull_into_.empty()) {
      pushes_.push_back(
          client_->PushTensors(std::move(grads), clock, base_version_));
      return;
    }
    const Placement& p = client_->placement();
    if (pull_of_.empty()) pull_of_.assign(p.chunks.size(), -1);
    for (const client::TensorGrad& g : grads) {
      for (int64_t id :
           ChunksOverlapping(p, g.tensor_index, g.offset,
                             g.offset + static_cast<int64_t>(g.grad.size()))) {
        pull_of_[id] = static_cast<int>(pulls_.size());
        asked_.push_back(id);
      }
    }
    client::ParameterClient::StepTickets t = client_->PushTensorsAndPull(
        std::move(grads), clock, base_version_, clock + 1,
        MinVersion(clock + 1), pull_into_);
    pushes_.push_back(t.end);
    pulls_.push_back(t.pull);
  }

  // The step's calls so far, handed over; the next step starts empty.
  Step TakeStep(int64_t clock) {
    Step step;
    step.clock = clock;
    step.base_version = base_version_;
    step.pushes = std::move(pushes_);
    step.pulls = std::move(pulls_);
    step.pull_of = std::move(pull_of_);
    step.asked = std::move(asked_);
    step.row_pulls = std::move(row_pulls_);
    row_pulls_.clear();
    pushes_.clear();
    pulls_.clear();
    pull_of_.clear();
    asked_.clear();
    step_bytes_ = 0;
    return step;
  }

  // Waits for a step's end and the next weights (FinishAndPull's result).
  absl::StatusOr<StepEnd> AwaitStepEnd(
      const Step& step, const std::vector<absl::Span<float>>& tensors) {
    const std::string what = absl::StrCat("pull at clock ", step.clock + 1);
    StepEnd end;
    absl::StatusOr<int64_t> staleness = AwaitStep(step, step.end);
    absl::Status pulled;
    bool refused = false;  // a push (and so its pull) refused as too stale
    for (const client::Ticket& t : step.pulls) {
      // (Awaited even after an error: their buffers are the caller's.)
      absl::Status s = Await(t, what);
      if (absl::IsAborted(s)) {
        refused = true;
      } else if (pulled.ok()) {
        pulled = s;
      }
    }
    if (!staleness.ok()) {
      (void)Await(step.end_pull, what);
      return staleness.status();
    }
    end.staleness = *staleness;
    if (!pulled.ok()) {
      (void)Await(step.end_pull, what);
      return pulled;
    }
    if (absl::Status rows = AwaitRows(step); !rows.ok()) {
      (void)Await(step.end_pull, what);
      return rows;
    }
    // A refused push left its chunks without new weights: all pulled again.
    // (The end of step always asks, for the version only if nothing is
    // left, so its answer gives the version.)
    PS_ASSIGN_OR_RETURN(end.version, AwaitNextWeights(step.clock, step.end_pull,
                                                      refused, tensors));
    return end;
  }

  // The weights of clock + 1 that an end of step's `pull` brings; pulled on
  // their own when the end (`rejected`) or the pull was refused as too
  // stale (ASP max_staleness), which leaves the shard's answer without them.
  absl::StatusOr<int64_t> AwaitNextWeights(
      int64_t clock, const client::Ticket& pull, bool rejected,
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

  std::vector<client::TensorGrad> TakePending() {
    std::vector<client::TensorGrad> out = std::move(pending_);
    pending_.clear();
    pending_bytes_ = 0;
    return out;
  }

  // Waits for the rows the step's pushes asked back; those of a push
  // refused as too stale (ABORTED) are pulled on their own.
  absl::Status AwaitRows(const Step& step) {
    absl::Status first;
    for (const RowPull& r : step.row_pulls) {
      absl::Status s = AwaitRowPull(r, step.clock);
      if (first.ok()) first = s;
    }
    return first;
  }

  // Waits for rows a push of step `clock` asked back; those of a push
  // refused as too stale (ABORTED: a failed push fails its rows' pull) are
  // pulled on their own.
  absl::Status AwaitRowPull(const RowPull& r, int64_t clock) {
    absl::Status s =
        Await(r.ticket, absl::StrCat("rows pull at clock ", clock + 1));
    if (absl::IsAborted(s)) s = PullRows(clock + 1, r.keys).status();
    return s;
  }

  // Waits for a step's pushes and its end: the staleness the pushes saw.
  absl::StatusOr<int64_t> AwaitStep(const Step& step,
                                    const client::Ticket& end) {
    int64_t staleness = 0;
    absl::Status first_error;
    for (const client::Ticket& t : step.pushes) {
      absl::Status s = Await(t, absl::StrCat("push at clock ", step.clock));
      if (absl::IsAborted(s)) continue;  // ASP: too stale, rejected and counted
      if (!s.ok() && first_error.ok()) first_error = s;
      if (s.ok())
        staleness = std::max(staleness, t.version() - step.base_version);
    }
    absl::Status s = Await(end, absl::StrCat("end of step ", step.clock));
    PS_RETURN_IF_ERROR(first_error);
    if (!s.ok() && !absl::IsAborted(s)) return s;
    return staleness;
  }

  absl::Status Await(const client::Ticket& t, const std::string& what) {
    return Await([&](absl::Duration d) { return t.Wait(d); },
                 [&] { return t.Done(); }, what);
  }

  // Waits in short slices (`wait`; `done`: whether the call has ended, so
  // that its own DEADLINE_EXCEEDED is told from a slice's) so a stop
  // request is seen quickly.
  absl::Status Await(const std::function<absl::Status(absl::Duration)>& wait,
                     const std::function<bool()>& done,
                     const std::string& what) {
    const absl::Time deadline = absl::Now() + options_.retry_deadline;
    for (;;) {
      absl::Status s = wait(absl::Milliseconds(200));
      if (!absl::IsDeadlineExceeded(s) || done()) {
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

  std::unique_ptr<client::ParameterClient> client_;
  const ConsistencySpec::Model model_;
  const PsAccessOptions options_;
  std::vector<client::TensorGrad> pending_;
  int64_t pending_bytes_ = 0;
  // The whole model's gradient bytes, and this step's pushed so far.
  const int64_t model_bytes_;
  int64_t step_bytes_ = 0;
  int64_t base_version_ = 0;
  // PullWithPushes: where pushes' answers put the next step's weights.
  std::vector<absl::Span<float>> pull_into_;
  // The open step's calls (Step).
  std::vector<client::Ticket> pushes_;
  std::vector<client::Ticket> pulls_;
  std::vector<int> pull_of_;
  std::vector<int64_t> asked_;
  std::vector<RowPull> row_pulls_;
};

}  // namespace

std::unique_ptr<ParameterAccess> NewPsAccess(
    std::unique_ptr<client::ParameterClient> client,
    ConsistencySpec::Model model, const PsAccessOptions& options) {
  return std::make_unique<PsAccess>(std::move(client), model, options);
}

int ConnectionsPerShard(const JobSpec& spec, const Placement& placement,
                        int64_t max_request_bytes) {
  constexpr int kDefault = 2;
  if (spec.consistency().model() != ConsistencySpec::ASP ||
      !spec.consistency().overlap_communication()) {
    return kDefault;
  }
  for (int64_t bytes : placement.shard_bytes) {
    if (bytes > max_request_bytes) return kDefault;
  }
  return 1;
}

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
  client::ParameterClientOptions co;
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
  co.wait_spin = options.wait_spin;
  co.sparse_tables.assign(a.spec().model().sparse_tables().begin(),
                          a.spec().model().sparse_tables().end());
  co.pipeline_step_end = a.spec().consistency().model() != ConsistencySpec::BSP;
  co.connections_per_shard =
      ConnectionsPerShard(a.spec(), placement, co.max_request_bytes);
  PS_ASSIGN_OR_RETURN(auto client,
                      client::ParameterClient::Create(
                          co, a.job_id(), options.member_id, placement));
  return NewPsAccess(std::move(client), a.spec().consistency().model(),
                     options);
}

}  // namespace ps::worker
