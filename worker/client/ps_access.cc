#include "worker/client/ps_access.h"

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

namespace ps::client {
namespace {

// Gradients are coalesced: a tensor's gradient waits in `pending_` until
// the pending ones reach kFlushBytes (so a small bias or output layer rides
// with the next tensor's message), and under BSP whatever is pending at the
// end of the step travels in the end-of-step message itself, whose answer
// brings the next step's weights. When pushes name next_weights, every
// message sent during the step also asks back its own chunks' next weights,
// which the shards send once they are applied (BSP: as soon as every worker's
// gradient of them is in; SSP: once the slowest worker is within the
// bound). Not thread-safe (one training loop calls it), but for
// SetServerAddresses.
class PsAccessImpl final : public PsAccess {
 public:
  // Big enough that biases and small layers share a message, small enough
  // that a big layer leaves as soon as backward has produced it.
  static constexpr int64_t kFlushBytes = 64 << 10;

  PsAccessImpl(std::unique_ptr<ParameterClient> client,
               ConsistencySpec::Model model, PsAccessOptions options)
      : client_(std::move(client)),
        model_(model),
        options_(std::move(options)),
        model_bytes_(ModelBytes(client_->placement())) {}

  Handle Pull(PullArgs r) override {
    const int64_t min_version = r.current ? 0 : MinVersion(r.clock);
    const bool dense = !r.tensors.empty();
    Ticket weights, rows;  // (a call not made is over and OK)
    if (dense) {
      weights = client_->PullAll(r.clock, min_version, std::move(r.tensors));
    }
    if (!r.rows.empty()) {
      rows = client_->PullRows(r.clock, min_version, std::move(r.rows));
    }
    return Handle::Deferred([this, weights, rows, dense,
                             clock = r.clock]() -> absl::StatusOr<CallResult> {
      absl::Status w = Await(weights, absl::StrCat("pull at clock ", clock));
      absl::Status k = Await(rows, absl::StrCat("rows pull at clock ", clock));
      PS_RETURN_IF_ERROR(w);
      PS_RETURN_IF_ERROR(k);
      return CallResult{.version = dense ? weights.version() : rows.version()};
    });
  }

  absl::Status Push(StepArgs r) override {
    base_version_ = r.base_version;
    pull_into_ = std::move(r.next_weights);
    for (const TensorGrad& g : r.dense) PushPart(r.clock, g);
    if (!r.next_rows.empty()) {
      ParameterClient::StepTickets t = client_->PushRowsAndPull(
          std::move(r.rows), r.clock, r.base_version, r.clock + 1,
          MinVersion(r.clock + 1), r.next_rows);
      pushes_.push_back(t.end);
      row_pulls_.push_back({t.pull, std::move(r.next_rows)});
    } else if (!r.rows.empty()) {
      pushes_.push_back(
          client_->PushRows(std::move(r.rows), r.clock, r.base_version));
    }
    return absl::OkStatus();
  }

  Handle EndStep(StepArgs r) override {
    const bool carries =
        !r.dense.empty() || !r.rows.empty() || !r.next_rows.empty();
    if (r.next_weights.empty()) {
      // The job's last step: what it carries is pushed, then the step ends.
      const int64_t clock = r.clock;
      base_version_ = r.base_version;
      if (carries) {
        if (absl::Status s = Push(std::move(r)); !s.ok()) return Handle(s);
      }
      return FinishStep(clock);
    }
    if (carries) return EndStepWithGradients(std::move(r));
    return EndStepAndPull(r.clock, r.base_version, std::move(r.next_weights));
  }

  std::vector<int64_t> PartBoundaries(int index) const override {
    return ChunkBoundaries(client_->placement(), index);
  }

  void CancelCalls() override { client_->CancelInFlight(); }

  absl::Status SetServerAddresses(
      const std::vector<std::string>& addresses) override {
    return client_->SetServerAddresses(addresses);
  }

 private:
  // One step's calls: its pushes, the weights they ask back (`pulls`, by
  // chunk in `pull_of`), and its end of step with the rest of the weights.
  // Rows a push asked back, and their keys (pulled again if it was
  // refused).
  struct RowPull {
    Ticket ticket;
    std::vector<SparsePull> keys;
  };

  struct Step {
    std::vector<RowPull> row_pulls;
    int64_t clock = 0;
    int64_t base_version = 0;
    std::vector<Ticket> pushes;
    std::vector<Ticket> pulls;
    std::vector<int> pull_of;    // by chunk id: index into pulls, or -1
    std::vector<int64_t> asked;  // chunk ids asked back by `pulls`
    Ticket end;
    Ticket end_pull;
  };

  // An end of step on its way: the weights can be awaited chunk by chunk.
  class InProgress final : public Handle::Call {
   public:
    InProgress(PsAccessImpl* access, Step step,
               std::vector<absl::Span<float>> tensors)
        : access_(access),
          step_(std::move(step)),
          tensors_(std::move(tensors)) {}

    absl::Status AwaitPart(int index, int64_t begin, int64_t end) override {
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
        const Ticket& t =
            k < step_.pulls.size() ? step_.pulls[k] : step_.end_pull;
        // Refused as too stale, or failed: the Handle's Wait() pulls again
        // or reports.
        PS_RETURN_IF_ERROR(access_->Await(
            [&](absl::Duration d) { return t.WaitForChunks(by_pull[k], d); },
            [&] { return t.Done(); },
            absl::StrCat("pull at clock ", step_.clock + 1)));
      }
      return absl::OkStatus();
    }

    absl::StatusOr<CallResult> Wait() override {
      return access_->AwaitStepEnd(step_, tensors_);
    }

   private:
    PsAccessImpl* const access_;
    const Step step_;
    const std::vector<absl::Span<float>> tensors_;
  };

  // Adds part of a gradient to the pending ones; whatever is pending goes
  // once it is big enough, unless the rest of the step's gradients is
  // small: then the end of step (right after backward) takes it along in
  // the same message.
  void PushPart(int64_t clock, const TensorGrad& g) {
    const int64_t bytes = static_cast<int64_t>(g.grad.size() * sizeof(float));
    pending_.push_back(g);
    pending_bytes_ += bytes;
    step_bytes_ += bytes;
    if (pending_bytes_ >= kFlushBytes &&
        model_bytes_ - step_bytes_ >= kFlushBytes) {
      SendPending(clock);
    }
  }

  // The last step's end: nothing asked back for a next step.
  Handle FinishStep(int64_t clock) {
    if (!pending_.empty()) SendPending(clock);
    Step step = TakeStep(clock);
    Ticket end = client_->EndStep(clock, base_version_);
    return Handle::Deferred(
        [this, step = std::move(step), end]() -> absl::StatusOr<CallResult> {
          absl::StatusOr<int64_t> staleness = AwaitStep(step, end);
          // The weights the step's pushes asked back (unused: no next step).
          for (const Ticket& t : step.pulls) {
            (void)Await(t, absl::StrCat("pull at clock ", step.clock + 1));
          }
          absl::Status rows = AwaitRows(step);
          PS_RETURN_IF_ERROR(staleness.status());
          PS_RETURN_IF_ERROR(rows);
          return CallResult{.staleness = *staleness};
        });
  }

  // Ends the step and pulls the next step's weights into `tensors`, the
  // gradients pushed before it acknowledged.
  Handle EndStepAndPull(int64_t clock, int64_t base_version,
                        std::vector<absl::Span<float>> tensors) {
    base_version_ = base_version;
    std::vector<TensorGrad> last;
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
    ParameterClient::StepTickets t = client_->EndStepAndPull(
        std::move(last), clock, base_version_, clock + 1, MinVersion(clock + 1),
        tensors, step.asked);
    step.end = t.end;
    step.end_pull = t.pull;
    return Handle(std::make_unique<InProgress>(this, std::move(step),
                                               std::move(tensors)));
  }

  // An end of step that carries the step's gradients (ASP with
  // overlap_communication: all of them at once, after the step computed):
  // the rows first, whose answers bring the rows the step after next
  // computes on, then the dense gradients with the end of step, whose
  // answer brings the next weights.
  Handle EndStepWithGradients(StepArgs r) {
    const int64_t clock = r.clock, base_version = r.base_version;
    base_version_ = base_version;
    ParameterClient::StepTickets rows;  // (tickets not sent are over, OK)
    const bool rows_sent = !r.next_rows.empty() || !r.rows.empty();
    if (!r.next_rows.empty()) {
      rows = client_->PushRowsAndPull(std::move(r.rows), clock, base_version,
                                      clock + 1, MinVersion(clock + 1),
                                      r.next_rows);
    } else if (!r.rows.empty()) {
      rows.end = client_->PushRows(std::move(r.rows), clock, base_version);
    }
    // Gradients pushed before in the step travel with these.
    std::vector<TensorGrad> all = TakePending();
    all.insert(all.end(), r.dense.begin(), r.dense.end());
    Step earlier = TakeStep(clock);
    const bool earlier_sent =
        !earlier.pushes.empty() || !earlier.row_pulls.empty();
    ParameterClient::StepTickets t =
        client_->EndStepAndPull(std::move(all), clock, base_version, clock + 1,
                                MinVersion(clock + 1), r.next_weights);
    return Handle::Deferred(
        [this, t, rows, rows_sent, clock, base_version, earlier_sent,
         earlier = std::move(earlier), next = std::move(r.next_rows),
         tensors = std::move(r.next_weights)]() -> absl::StatusOr<CallResult> {
          // (Calls not made are not waited for: this is every overlapped
          // step's path.)
          absl::StatusOr<int64_t> before = int64_t{0};
          if (earlier_sent) {
            before = AwaitStep(earlier, Ticket());
            absl::Status asked = AwaitRows(earlier);
            if (before.ok() && !asked.ok()) before = asked;
          }
          absl::StatusOr<CallResult> end =
              AwaitEndWithGradients(t, clock, base_version, tensors);
          if (!rows_sent) {
            if (!end.ok() || !before.ok()) {
              return !end.ok() ? end.status() : before.status();
            }
            end->staleness = std::max(end->staleness, *before);
            return end;
          }
          absl::Status push =
              Await(rows.end, absl::StrCat("rows push at clock ", clock));
          // A push refused as too stale (counted by the shard) is no error.
          if (!end.ok() || !before.ok() ||
              (!push.ok() && !absl::IsAborted(push))) {
            (void)Await(rows.pull,
                        absl::StrCat("rows pull at clock ", clock + 1));
            if (!end.ok()) return end.status();
            return !before.ok() ? before.status() : push;
          }
          PS_RETURN_IF_ERROR(AwaitRowPull({rows.pull, next}, clock));
          end->staleness = std::max(end->staleness, *before);
          return end;
        });
  }

  // The end of a step that carried its gradients, and the next weights.
  absl::StatusOr<CallResult> AwaitEndWithGradients(
      const ParameterClient::StepTickets& t, int64_t clock,
      int64_t base_version, const std::vector<absl::Span<float>>& tensors) {
    CallResult end;
    absl::Status s = Await(t.end, absl::StrCat("end of step ", clock));
    if (!s.ok() && !absl::IsAborted(s)) {
      (void)Await(t.pull, absl::StrCat("pull at clock ", clock + 1));
      return s;
    }
    // The pushes' staleness: versions others applied since base_version.
    if (s.ok()) {
      end.staleness = std::max<int64_t>(0, t.end.version() - base_version);
    }
    PS_ASSIGN_OR_RETURN(
        end.version,
        AwaitNextWeights(clock, t.pull, absl::IsAborted(s), tensors));
    return end;
  }

  // Sends the pending gradients; when the pushes named next_weights, asking
  // back their chunks' next weights.
  void SendPending(int64_t clock) {
    std::vector<TensorGrad> grads = TakePending();
    if (pull_into_.empty()) {
      pushes_.push_back(
          client_->PushTensors(std::move(grads), clock, base_version_));
      return;
    }
    const Placement& p = client_->placement();
    if (pull_of_.empty()) pull_of_.assign(p.chunks.size(), -1);
    for (const TensorGrad& g : grads) {
      for (int64_t id :
           ChunksOverlapping(p, g.tensor_index, g.offset,
                             g.offset + static_cast<int64_t>(g.grad.size()))) {
        pull_of_[id] = static_cast<int>(pulls_.size());
        asked_.push_back(id);
      }
    }
    ParameterClient::StepTickets t = client_->PushTensorsAndPull(
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

  // Waits for a step's end and the next weights (EndStepAndPull's result).
  absl::StatusOr<CallResult> AwaitStepEnd(
      const Step& step, const std::vector<absl::Span<float>>& tensors) {
    const std::string what = absl::StrCat("pull at clock ", step.clock + 1);
    CallResult end;
    absl::StatusOr<int64_t> staleness = AwaitStep(step, step.end);
    absl::Status pulled;
    bool refused = false;  // a push (and so its pull) refused as too stale
    for (const Ticket& t : step.pulls) {
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
      int64_t clock, const Ticket& pull, bool rejected,
      const std::vector<absl::Span<float>>& tensors) {
    absl::Status s = Await(pull, absl::StrCat("pull at clock ", clock + 1));
    if (rejected || absl::IsAborted(s)) {
      PullArgs again;
      again.clock = clock + 1;
      again.tensors = tensors;
      PS_ASSIGN_OR_RETURN(const CallResult pulled, Pull(again).Wait());
      return pulled.version;
    }
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

  std::vector<TensorGrad> TakePending() {
    std::vector<TensorGrad> out = std::move(pending_);
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
    if (absl::IsAborted(s)) {
      PullArgs again;
      again.clock = clock + 1;
      again.rows = r.keys;
      s = Pull(again).Wait().status();
    }
    return s;
  }

  // Waits for a step's pushes and its end: the staleness the pushes saw.
  absl::StatusOr<int64_t> AwaitStep(const Step& step, const Ticket& end) {
    int64_t staleness = 0;
    absl::Status first_error;
    for (const Ticket& t : step.pushes) {
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

  absl::Status Await(const Ticket& t, const std::string& what) {
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

  std::unique_ptr<ParameterClient> client_;
  const ConsistencySpec::Model model_;
  const PsAccessOptions options_;
  std::vector<TensorGrad> pending_;
  int64_t pending_bytes_ = 0;
  // The whole model's gradient bytes, and this step's pushed so far.
  const int64_t model_bytes_;
  int64_t step_bytes_ = 0;
  int64_t base_version_ = 0;
  // Where the pushes' answers put the next step's weights (the last
  // Push's next_weights; empty: nowhere).
  std::vector<absl::Span<float>> pull_into_;
  // The open step's calls (Step).
  std::vector<Ticket> pushes_;
  std::vector<Ticket> pulls_;
  std::vector<int> pull_of_;
  std::vector<int64_t> asked_;
  std::vector<RowPull> row_pulls_;
};

}  // namespace

std::unique_ptr<PsAccess> NewPsAccess(std::unique_ptr<ParameterClient> client,
                                      ConsistencySpec::Model model,
                                      const PsAccessOptions& options) {
  return std::make_unique<PsAccessImpl>(std::move(client), model, options);
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

absl::StatusOr<std::unique_ptr<PsAccess>> CreatePsAccess(
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
  ParameterClientOptions co;
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
  if (a.spec().compression().wire_dtype() != DTYPE_UNSPECIFIED) {
    co.wire_dtype = a.spec().compression().wire_dtype();
  }
  if (a.spec().compression().kind() == CompressionSpec::TOPK) {
    co.topk_ratio = a.spec().compression().ratio();
    co.compression_counters = options.compression_counters;
  }
  co.sparse_tables.assign(a.spec().model().sparse_tables().begin(),
                          a.spec().model().sparse_tables().end());
  co.pipeline_step_end = a.spec().consistency().model() != ConsistencySpec::BSP;
  co.connections_per_shard =
      ConnectionsPerShard(a.spec(), placement, co.max_request_bytes);
  PS_ASSIGN_OR_RETURN(
      auto client,
      ParameterClient::Create(co, a.job_id(), options.member_id, placement));
  return NewPsAccess(std::move(client), a.spec().consistency().model(),
                     options);
}

}  // namespace ps::client
