#include "server/parameter_client.h"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <thread>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/payload_codec.h"
#include "common/status.h"
#include "proto/parameter_service.pb.h"

namespace ps::server {
namespace internal {

// Shared by a Ticket and the RPCs of its operation; freed with the last of
// them.
struct TicketState {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  int64_t version ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::max();
  int64_t min_clock ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::max();
  int64_t duplicates ABSL_GUARDED_BY(mu) = 0;
  int64_t dropped ABSL_GUARDED_BY(mu) = 0;
  // Pulls: by chunk id, whether it has been written into the tensors.
  std::vector<bool> arrived ABSL_GUARDED_BY(mu);
  // ParameterClientOptions::wait_spin.
  absl::Duration spin;
  // Bumped on every change a waiter may be waiting for, so that a spinning
  // waiter takes the lock only when there is something new to see.
  std::atomic<uint64_t> changes{0};

  explicit TicketState(absl::Duration spin = absl::ZeroDuration())
      : spin(spin) {}

  void MarkArrived(const std::vector<int64_t>& ids) {
    absl::MutexLock l(&mu);
    for (int64_t id : ids) {
      if (id >= static_cast<int64_t>(arrived.size())) arrived.resize(id + 1);
      arrived[id] = true;
    }
    changes.fetch_add(1, std::memory_order_release);
  }
  bool Arrived(int64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return id >= 0 && id < static_cast<int64_t>(arrived.size()) && arrived[id];
  }

  void Add(int n) {
    absl::MutexLock l(&mu);
    pending += n;
  }
  void Complete(const absl::Status& s) {
    absl::MutexLock l(&mu);
    if (!s.ok() && status.ok()) status = s;
    --pending;
    changes.fetch_add(1, std::memory_order_release);
  }

  // Before a blocking wait: polls `ready` (which needs `mu`) each time the
  // state changes, until it holds, `spin` has passed or `deadline` has come.
  template <typename Ready>
  void Spin(Ready ready, absl::Time deadline) {
    if (spin <= absl::ZeroDuration()) return;
    const absl::Time until = std::min(absl::Now() + spin, deadline);
    uint64_t seen = changes.load(std::memory_order_acquire);
    {
      absl::MutexLock l(&mu);
      if (ready()) return;
    }
    while (absl::Now() < until) {
      for (int k = 0; k < 32; ++k) CpuRelax();
      const uint64_t now = changes.load(std::memory_order_acquire);
      if (now == seen) continue;
      seen = now;
      absl::MutexLock l(&mu);
      if (ready()) return;
    }
  }

  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
};

}  // namespace internal

using internal::TicketState;

Ticket::Ticket() : state_(std::make_shared<TicketState>()) {}
Ticket::Ticket(std::shared_ptr<TicketState> state) : state_(std::move(state)) {}

absl::Status Ticket::Wait(absl::Duration timeout) const {
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    return state_->pending == 0;
  };
  const absl::Time deadline = absl::Now() + timeout;
  state_->Spin(done, deadline);
  absl::MutexLock l(&state_->mu);
  if (!state_->mu.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "operation still running after ", absl::FormatDuration(timeout), " (",
        state_->pending, " RPCs in flight)"));
  }
  return state_->status;
}

absl::Status Ticket::WaitForChunks(absl::Span<const int64_t> ids,
                                   absl::Duration timeout) const {
  auto all_arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    for (int64_t id : ids) {
      if (!state_->Arrived(id)) return false;
    }
    return true;
  };
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    return state_->pending == 0 || all_arrived();
  };
  const absl::Time deadline = absl::Now() + timeout;
  state_->Spin(ready, deadline);
  absl::MutexLock l(&state_->mu);
  if (!state_->mu.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "chunks still on the way after ", absl::FormatDuration(timeout), " (",
        state_->pending, " RPCs in flight)"));
  }
  if (all_arrived()) return absl::OkStatus();
  if (!state_->status.ok()) return state_->status;
  return absl::InternalError("the pull ended without all of its chunks");
}

bool Ticket::Done() const {
  absl::MutexLock l(&state_->mu);
  return state_->pending == 0;
}

int64_t Ticket::version() const {
  absl::MutexLock l(&state_->mu);
  return state_->version == std::numeric_limits<int64_t>::max()
             ? 0
             : state_->version;
}
int64_t Ticket::min_clock() const {
  absl::MutexLock l(&state_->mu);
  return state_->min_clock == std::numeric_limits<int64_t>::max()
             ? 0
             : state_->min_clock;
}
int64_t Ticket::duplicates() const {
  absl::MutexLock l(&state_->mu);
  return state_->duplicates;
}
int64_t Ticket::dropped() const {
  absl::MutexLock l(&state_->mu);
  return state_->dropped;
}

namespace {

constexpr char kPushMethod[] = "/ps.ParameterService/Push";
constexpr char kPullMethod[] = "/ps.ParameterService/Pull";
constexpr int kPushChunksField = 6;
constexpr int kPullChunksField = 2;
constexpr int kPushPulledChunksField = 7;  // PushResponse.pulled_chunks

class ClientImpl;

// One RPC with its retries. Owned by shared_ptr copies held by the pending
// gRPC callback or alarm.
struct Call : std::enable_shared_from_this<Call> {
  ClientImpl* client = nullptr;
  std::shared_ptr<TicketState> ticket;
  int shard = 0;
  const char* method = nullptr;
  std::function<grpc::ByteBuffer()> encode;  // again on every attempt
  std::function<absl::Status(const grpc::ByteBuffer&)> on_response;
  // Run once the call has finished (after `ticket` is completed), with its
  // final status.
  std::function<void(const absl::Status&)> after;
  // Shared so that CancelInFlight can hold one while it cancels it.
  std::shared_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  int attempt = 0;
  absl::Time first_start;
  absl::Duration backoff;
  std::shared_ptr<grpc::Alarm> alarm;
};

class ClientImpl final : public ParameterClient {
 public:
  ClientImpl(const ParameterClientOptions& options, std::string job_id,
             int64_t worker_id, const Placement& placement)
      : options_(options),
        job_id_(std::move(job_id)),
        worker_id_(worker_id),
        placement_(placement),
        next_seq_(placement.num_shards),
        pulled_version_(placement.num_shards) {
    for (auto& s : next_seq_) s.store(SeqBase(options.incarnation) + 1);
    for (auto& v : pulled_version_) v.store(0);
    tensor_chunks_.resize(placement_.tensor_elements.size());
    for (const Chunk& c : placement_.chunks) {
      tensor_chunks_[c.tensor_index].push_back(c.chunk_id);
    }
    // Pull groups: each shard's chunks cut into messages of bounded size.
    pull_groups_.resize(placement_.num_shards);
    for (int s = 0; s < placement_.num_shards; ++s) {
      pull_groups_[s] = CutIntoGroups(placement_.shard_chunks[s]);
      // A shard without chunks still answers (its version counts).
      if (pull_groups_[s].empty()) pull_groups_[s].emplace_back();
    }
  }

  // `ids` in order, cut into groups of at most max_request_bytes of weights
  // on the wire (a bigger chunk makes a group of its own).
  std::vector<std::vector<int64_t>> CutIntoGroups(
      const std::vector<int64_t>& ids) const {
    const int64_t elem = DTypeSize(options_.wire_dtype);
    std::vector<std::vector<int64_t>> groups;
    int64_t bytes = 0;
    for (int64_t id : ids) {
      const int64_t b = placement_.chunks[id].num_elements * elem;
      if (groups.empty() || bytes + b > options_.max_request_bytes) {
        groups.emplace_back();
        bytes = 0;
      }
      groups.back().push_back(id);
      bytes += b;
    }
    return groups;
  }

  ~ClientImpl() override {
    std::vector<std::shared_ptr<grpc::ClientContext>> finished;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &in_flight_));
      finished.swap(finished_contexts_);
    }
    if (sender_.joinable()) {
      {
        absl::MutexLock l(&send_mu_);
        send_stop_ = true;
      }
      sender_.join();
    }
  }

  absl::Status Connect() {
    for (int s = 0; s < placement_.num_shards; ++s) {
      std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
      for (int c = 0; c < options_.connections_per_shard; ++c) {
        ChannelOptions copts;
        copts.tls = options_.tls;
        copts.max_message_bytes = options_.max_message_bytes;
        copts.connection_id = c + 1;
        PS_ASSIGN_OR_RETURN(auto channel,
                            MakeChannel(options_.server_addresses[s], copts));
        stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
      }
      stubs_.push_back(std::move(stubs));
    }
    next_stub_ = std::vector<std::atomic<uint32_t>>(placement_.num_shards);
    if (options_.send_thread) sender_ = std::thread([this] { SendLoop(); });
    return absl::OkStatus();
  }

  Ticket PullAll(int64_t clock, int64_t min_version,
                 std::vector<absl::Span<float>> tensors) override;
  Ticket PushTensor(int tensor_index, absl::Span<const float> grad,
                    int64_t clock, int64_t base_version) override {
    return PushTensors({{tensor_index, grad}}, clock, base_version);
  }
  Ticket PushTensors(std::vector<TensorGrad> grads, int64_t clock,
                     int64_t base_version) override;
  Ticket EndStep(int64_t clock, int64_t base_version) override;
  StepTickets EndStepAndPull(
      std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
      int64_t next_clock, int64_t min_version,
      std::vector<absl::Span<float>> tensors,
      const std::vector<int64_t>& already_asked) override;
  StepTickets PushTensorsAndPull(
      std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
      int64_t next_clock, int64_t min_version,
      std::vector<absl::Span<float>> tensors) override;
  const Placement& placement() const override { return placement_; }
  void CancelInFlight() override;

  void Start(std::shared_ptr<Call> call);
  void Done(std::shared_ptr<Call> call, const grpc::Status& status);
  // Starts a call made on the caller's thread: on the send thread if there
  // is one, else at once.
  void Launch(std::shared_ptr<Call> call) {
    if (!options_.send_thread) {
      Start(std::move(call));
      return;
    }
    absl::MutexLock l(&send_mu_);
    send_queue_.push_back(std::move(call));
  }

 private:
  std::shared_ptr<Call> NewCall(const std::shared_ptr<TicketState>& ticket,
                                int shard, const char* method,
                                bool reap = true) {
    if (reap) ReapContexts();
    auto call = std::make_shared<Call>();
    call->client = this;
    call->ticket = ticket;
    call->shard = shard;
    call->method = method;
    call->first_start = absl::Now();
    call->backoff = options_.retry.initial_backoff;
    {
      absl::MutexLock l(&mu_);
      ++in_flight_;
      live_.insert(call.get());
    }
    return call;
  }
  void Finish(const std::shared_ptr<Call>& call, const absl::Status& s) {
    RetireContext(call);
    call->ticket->Complete(s);
    if (call->after) call->after(s);
    absl::MutexLock l(&mu_);
    live_.erase(call.get());
    --in_flight_;
  }
  // A ClientContext destroyed inside gRPC's completion callback (when the
  // callback held the last reference to the call) crashed gRPC 1.51 with a
  // double free in its callback completion queue, so finished contexts are
  // destroyed on the caller's threads instead: on the next call or in the
  // destructor.
  void RetireContext(const std::shared_ptr<Call>& call) {
    absl::MutexLock l(&mu_);
    if (call->context == nullptr) return;
    finished_contexts_.push_back(std::move(call->context));
  }
  // Keeps the newest few, whose callbacks may still be unwinding.
  void ReapContexts() {
    constexpr size_t kKeep = 64;
    std::vector<std::shared_ptr<grpc::ClientContext>> finished;
    absl::MutexLock l(&mu_);
    if (finished_contexts_.size() < 2 * kKeep) return;
    const size_t n = finished_contexts_.size() - kKeep;
    finished.assign(std::make_move_iterator(finished_contexts_.begin()),
                    std::make_move_iterator(finished_contexts_.begin() + n));
    finished_contexts_.erase(finished_contexts_.begin(),
                             finished_contexts_.begin() + n);
    // Destroyed after the lock is released (declaration order).
  }
  // Checks the buffers PullAll / EndStepAndPull write into.
  absl::Status CheckTensors(absl::string_view what,
                            const std::vector<absl::Span<float>>& tensors);
  // Each shard's messages (chunk lists of at most max_request_bytes) for
  // `grads`; borrows fp32 gradient memory.
  // spread > 1: also cut each shard's part into about `spread` messages
  // (whole chunks), so that one step's bytes use every connection.
  absl::StatusOr<std::vector<std::vector<std::vector<ChunkOut>>>> Split(
      absl::string_view what, const std::vector<TensorGrad>& grads,
      int spread = 1);
  // Starts the Pull of one group of a shard's chunks into `tensors`.
  void StartPull(const std::shared_ptr<TicketState>& ticket, int shard,
                 const std::vector<int64_t>& group, int64_t clock,
                 int64_t min_version,
                 const std::vector<absl::Span<float>>& tensors, bool reap);
  // The header of a push to `shard`, taking its next sequence number.
  PushRequest PushHeader(int shard, int64_t clock, int64_t base_version,
                         bool end_of_step);
  Ticket SendPush(int shard, std::vector<ChunkOut> chunks, int64_t clock,
                  int64_t base_version, bool end_of_step,
                  const std::shared_ptr<TicketState>& ticket);
  // One push message to `shard` (counted in `end`) that asks back the
  // weights of `ask` (ids; none: asks nothing) into `tensors` (counted in
  // `pull`, which the caller has Add()ed one for it and one per group of
  // `more`: pulls started once the push is answered). `last`: it ends the
  // step, and its answer sets the shard's pulled version.
  // `end_of_step_call`: the message is part of an EndStepAndPull.
  void SendPushAndPull(int shard, std::vector<ChunkOut> chunks, int64_t clock,
                       int64_t base_version, bool end_of_step_call, bool last,
                       bool ask, std::vector<int64_t> ask_ids,
                       std::vector<std::vector<int64_t>> more,
                       int64_t next_clock, int64_t min_version,
                       const std::vector<absl::Span<float>>& tensors,
                       const std::shared_ptr<TicketState>& end,
                       const std::shared_ptr<TicketState>& pull);

  // The send thread: starts queued calls in order.
  void SendLoop() {
    std::vector<std::shared_ptr<Call>> batch;
    for (;;) {
      {
        absl::MutexLock l(&send_mu_);
        send_mu_.Await(absl::Condition(
            +[](ClientImpl* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu_) {
              return c->send_stop_ || !c->send_queue_.empty();
            },
            this));
        if (send_queue_.empty()) return;
        batch.assign(std::make_move_iterator(send_queue_.begin()),
                     std::make_move_iterator(send_queue_.end()));
        send_queue_.clear();
      }
      for (std::shared_ptr<Call>& call : batch) Start(std::move(call));
      batch.clear();
    }
  }

  const ParameterClientOptions options_;
  const std::string job_id_;
  const int64_t worker_id_;
  const Placement placement_;
  std::vector<std::vector<int64_t>> tensor_chunks_;  // ids, by offset
  std::vector<std::vector<std::vector<int64_t>>> pull_groups_;
  std::vector<std::atomic<uint64_t>> next_seq_;       // per shard
  std::vector<std::atomic<int64_t>> pulled_version_;  // per shard
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs_;
  std::vector<std::atomic<uint32_t>> next_stub_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // The calls counted in in_flight_; their context and alarm change under
  // mu_. While cancelling_ > 0 (CancelInFlight), calls end instead of
  // starting or being retried.
  absl::flat_hash_set<Call*> live_ ABSL_GUARDED_BY(mu_);
  int cancelling_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<grpc::ClientContext>> finished_contexts_
      ABSL_GUARDED_BY(mu_);
  absl::Mutex send_mu_;
  std::deque<std::shared_ptr<Call>> send_queue_ ABSL_GUARDED_BY(send_mu_);
  bool send_stop_ ABSL_GUARDED_BY(send_mu_) = false;
  std::thread sender_;
};

void ClientImpl::Start(std::shared_ptr<Call> call) {
  ++call->attempt;
  RetireContext(call);  // the previous attempt's
  auto context = std::make_shared<grpc::ClientContext>();
  PrepareContext(context.get(), options_.call_timeout, options_.token);
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    cancelled = cancelling_ > 0;
    // (A TryCancel between here and UnaryCall cancels it as it starts.)
    if (!cancelled) call->context = context;
  }
  if (cancelled) {
    Finish(call, absl::CancelledError(
                     absl::StrCat(call->method, " to shard ", call->shard,
                                  ": cancelled (the caller stopped)")));
    return;
  }
  call->request = call->encode();
  call->response.Clear();
  const uint32_t n = next_stub_[call->shard].fetch_add(1);
  grpc::GenericStub* stub =
      stubs_[call->shard][n % stubs_[call->shard].size()].get();
  stub->UnaryCall(context.get(), call->method, grpc::StubOptions(),
                  &call->request, &call->response, [call](grpc::Status status) {
                    call->client->Done(call, status);
                  });
}

void ClientImpl::CancelInFlight() {
  std::vector<std::shared_ptr<grpc::ClientContext>> contexts;
  std::vector<std::shared_ptr<grpc::Alarm>> alarms;
  {
    absl::MutexLock l(&mu_);
    ++cancelling_;
    for (Call* call : live_) {
      if (call->context != nullptr) contexts.push_back(call->context);
      if (call->alarm != nullptr) alarms.push_back(call->alarm);
    }
  }
  // Outside the lock: gRPC may run the calls' callbacks (which take it)
  // before these return. A call that starts or retries meanwhile sees
  // cancelling_ and ends; queued ones end when the send thread starts them.
  for (const auto& context : contexts) context->TryCancel();
  for (const auto& alarm : alarms) alarm->Cancel();
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
  --cancelling_;
}

void ClientImpl::Done(std::shared_ptr<Call> call, const grpc::Status& status) {
  absl::Status s = FromGrpcStatus(status);
  if (s.ok()) {
    s = call->on_response(call->response);
    Finish(call, s);
    return;
  }
  const RetryPolicy& retry = options_.retry;
  const absl::Time next = absl::Now() + call->backoff;
  if (IsRetryable(s) && call->attempt < retry.max_attempts &&
      next - call->first_start < retry.total_deadline) {
    std::shared_ptr<grpc::Alarm> alarm;
    {
      absl::MutexLock l(&mu_);
      if (cancelling_ == 0) {
        alarm = std::make_shared<grpc::Alarm>();
        call->alarm = alarm;
      }
    }
    if (alarm != nullptr) {
      call->backoff =
          std::min(call->backoff * retry.multiplier, retry.max_backoff);
      // (Set outside the lock: gRPC may run the callback before it
      // returns.) Start() ends the call instead if it was cancelled.
      // The callback gives its reference up when it runs: the call holds
      // the alarm, which holds the callback, so keeping it would make a
      // cycle that outlives the call (LeakSanitizer found it).
      alarm->Set(absl::ToChronoTime(next), [call](bool) mutable {
        std::shared_ptr<Call> c = std::move(call);
        c->client->Start(std::move(c));
      });
      return;
    }
  }
  Finish(call,
         Annotate(s, absl::StrCat(call->method, " to shard ", call->shard, " (",
                                  options_.server_addresses[call->shard],
                                  "), attempt ", call->attempt)));
}

// Copies one pulled chunk from the received slices into its tensor.
absl::Status StoreChunk(const Placement& p,
                        const std::vector<absl::Span<float>>& tensors,
                        const ChunkView& c,
                        absl::Span<const absl::string_view> segs) {
  if (c.chunk_id < 0 || c.chunk_id >= static_cast<int64_t>(p.chunks.size())) {
    return absl::InternalError(
        absl::StrCat("server sent unknown chunk ", c.chunk_id));
  }
  const Chunk& chunk = p.chunks[c.chunk_id];
  const DType dtype = c.dtype == DTYPE_UNSPECIFIED ? FLOAT32 : c.dtype;
  const int size = DTypeSize(dtype);
  if (c.num_elements != chunk.num_elements || size == 0 ||
      c.data.size() != static_cast<size_t>(chunk.num_elements) * size) {
    return absl::InternalError(
        absl::StrCat("server sent chunk ", c.chunk_id, " with ", c.num_elements,
                     " elements / ", c.data.size(), " bytes; expected ",
                     chunk.num_elements, " elements"));
  }
  absl::Span<float> out =
      tensors[chunk.tensor_index].subspan(chunk.offset, chunk.num_elements);
  if (size == 4) {
    // Straight from the receive slices into the tensor.
    char* dst = reinterpret_cast<char*>(out.data());
    for (absl::string_view seg : segs) {
      std::memcpy(dst, seg.data(), seg.size());
      dst += seg.size();
    }
    return absl::OkStatus();
  }
  std::string joined;
  for (absl::string_view seg : segs) joined.append(seg.data(), seg.size());
  return WidenToFloat(dtype, joined, out);
}

// Decodes a Pull or Push answer: the header into `header`, the weights it
// carries straight into `tensors`.
// Marks the chunks stored in `pull` once all of them are.
absl::Status DecodeWeights(const grpc::ByteBuffer& buffer, int chunks_field,
                           google::protobuf::MessageLite* header,
                           const Placement& p,
                           const std::vector<absl::Span<float>>& tensors,
                           TicketState& pull) {
  std::vector<grpc::Slice> slices;
  std::vector<int64_t> stored;
  PS_RETURN_IF_ERROR(DecodeSegmented(
      buffer, chunks_field, header, &slices,
      [&](const ChunkView& c, absl::Span<const absl::string_view> segs) {
        PS_RETURN_IF_ERROR(StoreChunk(p, tensors, c, segs));
        stored.push_back(c.chunk_id);
        return absl::OkStatus();
      }));
  pull.MarkArrived(stored);
  return absl::OkStatus();
}

absl::Status ClientImpl::CheckTensors(
    absl::string_view what, const std::vector<absl::Span<float>>& tensors) {
  if (tensors.size() != placement_.tensor_elements.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", tensors.size(), " tensor buffers for a model of ",
        placement_.tensor_elements.size(), " tensors"));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (static_cast<int64_t>(tensors[t].size()) !=
        placement_.tensor_elements[t]) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": tensor ", t, " buffer holds ", tensors[t].size(),
          " floats, the model says ", placement_.tensor_elements[t]));
    }
  }
  return absl::OkStatus();
}

void ClientImpl::StartPull(const std::shared_ptr<TicketState>& ticket,
                           int shard, const std::vector<int64_t>& group,
                           int64_t clock, int64_t min_version,
                           const std::vector<absl::Span<float>>& tensors,
                           bool reap) {
  auto call = NewCall(ticket, shard, kPullMethod, reap);
  PullRequest request;
  request.set_job_id(job_id_);
  request.set_worker_id(worker_id_);
  request.set_clock(clock);
  request.set_min_version(min_version);
  request.set_dtype(options_.wire_dtype);
  for (int64_t id : group) request.add_chunk_ids(id);
  if (group.empty()) request.set_version_only(true);
  call->encode = [bytes = request.SerializeAsString()] {
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
  };
  const Placement* p = &placement_;
  std::atomic<int64_t>* pulled_version = &pulled_version_[shard];
  call->on_response = [p, tensors, ticket,
                       pulled_version](const grpc::ByteBuffer& buffer) {
    PullResponse header;
    PS_RETURN_IF_ERROR(
        DecodeWeights(buffer, kPullChunksField, &header, *p, tensors, *ticket));
    pulled_version->store(header.version());
    absl::MutexLock l(&ticket->mu);
    ticket->version = std::min(ticket->version, header.version());
    ticket->min_clock = std::min(ticket->min_clock, header.min_clock());
    return absl::OkStatus();
  };
  if (reap) {
    Launch(std::move(call));
  } else {
    Start(std::move(call));
  }
}

Ticket ClientImpl::PullAll(int64_t clock, int64_t min_version,
                           std::vector<absl::Span<float>> tensors) {
  auto ticket = std::make_shared<TicketState>(options_.wait_spin);
  if (absl::Status s = CheckTensors("PullAll", tensors); !s.ok()) {
    ticket->status = s;
    return Ticket(ticket);
  }
  int total = 0;
  for (const auto& groups : pull_groups_) total += groups.size();
  ticket->Add(total);
  for (int s = 0; s < placement_.num_shards; ++s) {
    for (const std::vector<int64_t>& group : pull_groups_[s]) {
      StartPull(ticket, s, group, clock, min_version, tensors, true);
    }
  }
  return Ticket(ticket);
}

PushRequest ClientImpl::PushHeader(int shard, int64_t clock,
                                   int64_t base_version, bool end_of_step) {
  PushRequest header;
  header.set_job_id(job_id_);
  header.set_worker_id(worker_id_);
  header.set_seq(next_seq_[shard].fetch_add(1));
  header.set_clock(clock);
  header.set_base_version(base_version == kPulledVersion
                              ? pulled_version_[shard].load()
                              : base_version);
  header.set_end_of_step(end_of_step);
  header.set_chunks_final(options_.chunks_final);
  return header;
}

// Parses a PushResponse without payloads.
absl::StatusOr<PushResponse> ParsePushResponse(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  PushResponse response;
  bool parsed = false;
  if (buffer.Dump(&slices).ok()) {
    if (slices.size() == 1) {
      parsed = response.ParseFromArray(slices[0].begin(),
                                       static_cast<int>(slices[0].size()));
    } else {
      std::string bytes;
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      parsed = response.ParseFromString(bytes);
    }
  }
  if (!parsed) return absl::InternalError("malformed PushResponse");
  return response;
}

void RecordPush(TicketState& ticket, const PushResponse& response) {
  absl::MutexLock l(&ticket.mu);
  ticket.version = std::min(ticket.version, response.version());
  ticket.duplicates += response.duplicate() ? 1 : 0;
  ticket.dropped += response.dropped() ? 1 : 0;
}

Ticket ClientImpl::SendPush(int shard, std::vector<ChunkOut> chunks,
                            int64_t clock, int64_t base_version,
                            bool end_of_step,
                            const std::shared_ptr<TicketState>& ticket) {
  auto call = NewCall(ticket, shard, kPushMethod);
  call->encode = [header = PushHeader(shard, clock, base_version, end_of_step),
                  chunks = std::move(chunks)] {
    return EncodeWithPayloads(header, kPushChunksField, chunks);
  };
  call->on_response = [ticket](const grpc::ByteBuffer& buffer) {
    PS_ASSIGN_OR_RETURN(PushResponse response, ParsePushResponse(buffer));
    RecordPush(*ticket, response);
    return absl::OkStatus();
  };
  Launch(std::move(call));
  return Ticket(ticket);
}

absl::StatusOr<std::vector<std::vector<std::vector<ChunkOut>>>>
ClientImpl::Split(absl::string_view what, const std::vector<TensorGrad>& grads,
                  int spread) {
  const DType dtype = options_.wire_dtype;
  const int size = DTypeSize(dtype);
  // Messages per shard, each at most max_request_bytes of payload, or with
  // `spread`, at most 1/spread of the shard's bytes.
  std::vector<std::vector<std::vector<ChunkOut>>> messages(
      placement_.num_shards);
  std::vector<int64_t> bytes(placement_.num_shards, 0);
  std::vector<int64_t> limit(placement_.num_shards, options_.max_request_bytes);
  // Per grad, the ids of the chunks it covers.
  std::vector<std::vector<int64_t>> covered(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorGrad& g = grads[i];
    const int64_t end = g.offset + static_cast<int64_t>(g.grad.size());
    if (g.tensor_index < 0 ||
        g.tensor_index >= static_cast<int>(tensor_chunks_.size()) ||
        g.offset < 0 || end > placement_.tensor_elements[g.tensor_index] ||
        (g.grad.empty() && placement_.tensor_elements[g.tensor_index] > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": tensor ", g.tensor_index, " with ", g.grad.size(),
          " floats at offset ", g.offset, " does not match the placement"));
    }
    for (int64_t id : tensor_chunks_[g.tensor_index]) {
      const Chunk& c = placement_.chunks[id];
      const int64_t c_end = c.offset + c.num_elements;
      if (c_end <= g.offset || c.offset >= end) continue;
      if (c.offset < g.offset || c_end > end) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": elements [", g.offset, ", ", end, ") of tensor ",
            g.tensor_index, " cut its chunk [", c.offset, ", ", c_end,
            "); parts must be whole chunks"));
      }
      covered[i].push_back(id);
      if (spread > 1) bytes[c.shard] += c.num_elements * size;
    }
  }
  if (spread > 1) {
    for (int s = 0; s < placement_.num_shards; ++s) {
      limit[s] = std::min(
          limit[s], std::max<int64_t>(1, (bytes[s] + spread - 1) / spread));
      bytes[s] = 0;
    }
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorGrad& g = grads[i];
    for (int64_t id : covered[i]) {
      const Chunk& c = placement_.chunks[id];
      const absl::Span<const float> part =
          g.grad.subspan(c.offset - g.offset, c.num_elements);
      ChunkOut out;
      out.chunk_id = id;
      out.dtype = dtype;
      out.num_elements = c.num_elements;
      if (size == 4) {
        out.data = BorrowSlice(absl::string_view(
            reinterpret_cast<const char*>(part.data()), part.size() * 4));
      } else {
        char* data = nullptr;
        out.data = AllocateSlice(part.size() * size, &data);
        NarrowFromFloat(dtype, part, data);
      }
      auto& shard_messages = messages[c.shard];
      const int64_t b = c.num_elements * size;
      if (shard_messages.empty() || bytes[c.shard] + b > limit[c.shard]) {
        shard_messages.emplace_back();
        bytes[c.shard] = 0;
      }
      shard_messages.back().push_back(std::move(out));
      bytes[c.shard] += b;
    }
  }
  return messages;
}

Ticket ClientImpl::PushTensors(std::vector<TensorGrad> grads, int64_t clock,
                               int64_t base_version) {
  auto ticket = std::make_shared<TicketState>(options_.wait_spin);
  absl::StatusOr<std::vector<std::vector<std::vector<ChunkOut>>>> messages =
      Split("PushTensors", grads);
  if (!messages.ok()) {
    ticket->status = messages.status();
    return Ticket(ticket);
  }
  int total = 0;
  for (const auto& m : *messages) total += m.size();
  ticket->Add(total);
  for (int s = 0; s < placement_.num_shards; ++s) {
    for (auto& m : (*messages)[s]) {
      SendPush(s, std::move(m), clock, base_version, false, ticket);
    }
  }
  return Ticket(ticket);
}

Ticket ClientImpl::EndStep(int64_t clock, int64_t base_version) {
  auto ticket = std::make_shared<TicketState>(options_.wait_spin);
  ticket->Add(placement_.num_shards);
  for (int s = 0; s < placement_.num_shards; ++s) {
    SendPush(s, {}, clock, base_version, true, ticket);
  }
  return Ticket(ticket);
}

void ClientImpl::SendPushAndPull(int s, std::vector<ChunkOut> chunks,
                                 int64_t clock, int64_t base_version,
                                 bool end_of_step_call, bool last, bool ask,
                                 std::vector<int64_t> ask_ids,
                                 std::vector<std::vector<int64_t>> more,
                                 int64_t next_clock, int64_t min_version,
                                 const std::vector<absl::Span<float>>& tensors,
                                 const std::shared_ptr<TicketState>& end,
                                 const std::shared_ptr<TicketState>& pull) {
  const Placement* p = &placement_;
  PushRequest header = PushHeader(s, clock, base_version, last);
  const bool ends_step = end_of_step_call;
  if (ask) {
    PullRequest* then = header.mutable_then_pull();
    then->set_clock(next_clock);
    then->set_min_version(min_version);
    then->set_dtype(options_.wire_dtype);
    for (int64_t id : ask_ids) then->add_chunk_ids(id);
    // (No chunk ids would mean all of them.)
    if (ask_ids.empty()) then->set_version_only(true);
  }
  auto call = NewCall(end, s, kPushMethod);
  call->encode = [header = std::move(header), chunks = std::move(chunks)] {
    return EncodeWithPayloads(header, kPushChunksField, chunks);
  };
  // Whether the response carried the weights (a server that predates
  // then_pull ignores it and answers a plain push).
  auto pulled = std::make_shared<std::atomic<bool>>(false);
  std::atomic<int64_t>* pulled_version = &pulled_version_[s];
  call->on_response = [p, tensors, end, pull, pulled, pulled_version, last,
                       ends_step](const grpc::ByteBuffer& buffer) {
    PushResponse response;
    PS_RETURN_IF_ERROR(DecodeWeights(buffer, kPushPulledChunksField, &response,
                                     *p, tensors, *pull));
    RecordPush(*end, response);
    if (response.pulled()) {
      pulled->store(true);
      absl::MutexLock l(&pull->mu);
      pull->min_clock = std::min(pull->min_clock, response.pulled_min_clock());
      // Of an end of step, only the last message's answer gives the
      // weights' version: the earlier messages' answers (ASP/SSP) predate
      // this worker's own end of step, which would count as one version of
      // staleness. PushTensorsAndPull: every answer's.
      if (last || !ends_step) {
        pull->version = std::min(pull->version, response.pulled_version());
      }
      if (last) pulled_version->store(response.pulled_version());
    }
    return absl::OkStatus();
  };
  // Runs on a gRPC callback thread: the follow-up pulls must not reap
  // contexts there.
  call->after = [this, pull, pulled, s, ask, next_clock, min_version, tensors,
                 ids = std::move(ask_ids),
                 more = std::move(more)](const absl::Status& status) {
    if (!status.ok()) {
      if (ask) pull->Complete(status);
      for (size_t g = 0; g < more.size(); ++g) pull->Complete(status);
      return;
    }
    if (ask) {
      if (pulled->load()) {
        pull->Complete(absl::OkStatus());
      } else {
        StartPull(pull, s, ids, next_clock, min_version, tensors, false);
      }
    }
    for (const std::vector<int64_t>& group : more) {
      StartPull(pull, s, group, next_clock, min_version, tensors, false);
    }
  };
  Launch(std::move(call));
}

ParameterClient::StepTickets ClientImpl::EndStepAndPull(
    std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
    int64_t next_clock, int64_t min_version,
    std::vector<absl::Span<float>> tensors,
    const std::vector<int64_t>& already_asked) {
  auto end = std::make_shared<TicketState>(options_.wait_spin);
  auto pull = std::make_shared<TicketState>(options_.wait_spin);
  absl::Status bad = CheckTensors("EndStepAndPull", tensors);
  absl::StatusOr<std::vector<std::vector<std::vector<ChunkOut>>>> messages =
      Split("EndStepAndPull", grads,
            options_.pipeline_step_end ? options_.connections_per_shard : 1);
  const bool per_message = options_.pipeline_step_end;
  if (bad.ok() && !messages.ok()) bad = messages.status();
  if (!bad.ok()) {
    end->status = bad;
    pull->status = bad;
    return {Ticket(end), Ticket(pull)};
  }
  // Per shard: the chunks each push message asks back (`fused`) and the
  // groups pulled once the end of step is acknowledged (`rest`). With
  // pipeline_step_end, every message asks for its own chunks. The last
  // message, which ends the step, asks for its own chunks and then the
  // shard's others, up to one message's worth. Chunks asked for already
  // are left out.
  std::vector<std::vector<std::vector<int64_t>>> fused(placement_.num_shards);
  std::vector<std::vector<std::vector<int64_t>>> rest(placement_.num_shards);
  std::vector<std::vector<bool>> asks(placement_.num_shards);
  int pushes = 0, pulls = 0;
  std::vector<bool> taken(placement_.chunks.size(), false);
  for (int64_t id : already_asked) {
    if (id >= 0 && id < static_cast<int64_t>(taken.size())) taken[id] = true;
  }
  for (int s = 0; s < placement_.num_shards; ++s) {
    std::vector<std::vector<ChunkOut>>& shard_messages = (*messages)[s];
    if (shard_messages.empty()) shard_messages.emplace_back();
    std::vector<std::vector<int64_t>>& f = fused[s];
    f.resize(shard_messages.size());
    for (size_t m = per_message ? 0 : shard_messages.size() - 1;
         m < shard_messages.size(); ++m) {
      for (const ChunkOut& c : shard_messages[m]) {
        if (taken[c.chunk_id]) continue;
        taken[c.chunk_id] = true;
        f[m].push_back(c.chunk_id);
      }
    }
    // The last message asks for its own chunks (they fit in one message, as
    // they fit in its push) and then the shard's others while they fit.
    std::vector<int64_t> ids = f.back();
    for (int64_t id : placement_.shard_chunks[s]) {
      if (!taken[id]) ids.push_back(id);
    }
    std::vector<std::vector<int64_t>> groups = CutIntoGroups(ids);
    if (!groups.empty()) {
      f.back() = std::move(groups[0]);
      rest[s].assign(std::make_move_iterator(groups.begin() + 1),
                     std::make_move_iterator(groups.end()));
    }
    asks[s].resize(shard_messages.size());
    for (size_t m = 0; m < shard_messages.size(); ++m) {
      std::sort(f[m].begin(), f[m].end());
      // A message with nothing left to ask for asks nothing, but the last
      // one always asks (for the version only, if need be): its answer
      // comes once the step has closed and gives the version.
      asks[s][m] = !f[m].empty() || m + 1 == shard_messages.size();
      pulls += asks[s][m] ? 1 : 0;
    }
    pushes += shard_messages.size();
    pulls += rest[s].size();
  }
  end->Add(pushes);
  pull->Add(pulls);
  for (int s = 0; s < placement_.num_shards; ++s) {
    std::vector<std::vector<ChunkOut>>& shard_messages = (*messages)[s];
    for (size_t m = 0; m < shard_messages.size(); ++m) {
      const bool last = m + 1 == shard_messages.size();
      SendPushAndPull(
          s, std::move(shard_messages[m]), clock, base_version, true, last,
          asks[s][m], std::move(fused[s][m]),
          last ? std::move(rest[s]) : std::vector<std::vector<int64_t>>(),
          next_clock, min_version, tensors, end, pull);
    }
  }
  return {Ticket(end), Ticket(pull)};
}

ParameterClient::StepTickets ClientImpl::PushTensorsAndPull(
    std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
    int64_t next_clock, int64_t min_version,
    std::vector<absl::Span<float>> tensors) {
  auto end = std::make_shared<TicketState>(options_.wait_spin);
  auto pull = std::make_shared<TicketState>(options_.wait_spin);
  absl::Status bad = CheckTensors("PushTensorsAndPull", tensors);
  absl::StatusOr<std::vector<std::vector<std::vector<ChunkOut>>>> messages =
      Split("PushTensorsAndPull", grads);
  if (bad.ok() && !messages.ok()) bad = messages.status();
  if (!bad.ok()) {
    end->status = bad;
    pull->status = bad;
    return {Ticket(end), Ticket(pull)};
  }
  int total = 0;
  for (const auto& m : *messages) total += m.size();
  end->Add(total);
  pull->Add(total);
  for (int s = 0; s < placement_.num_shards; ++s) {
    for (std::vector<ChunkOut>& m : (*messages)[s]) {
      std::vector<int64_t> ids;
      for (const ChunkOut& c : m) ids.push_back(c.chunk_id);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      SendPushAndPull(s, std::move(m), clock, base_version, false, false, true,
                      std::move(ids), {}, next_clock, min_version, tensors, end,
                      pull);
    }
  }
  return {Ticket(end), Ticket(pull)};
}

}  // namespace

std::vector<int64_t> ChunkBoundaries(const Placement& placement,
                                     int tensor_index) {
  std::vector<int64_t> out;
  for (const Chunk& c : placement.chunks) {
    if (c.tensor_index == tensor_index && c.offset > 0) {
      out.push_back(c.offset);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> ChunksOverlapping(const Placement& placement,
                                       int tensor_index, int64_t begin,
                                       int64_t end) {
  std::vector<int64_t> out;
  for (const Chunk& c : placement.chunks) {
    if (c.tensor_index == tensor_index && c.offset < end &&
        c.offset + c.num_elements > begin) {
      out.push_back(c.chunk_id);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ParameterClient>> ParameterClient::Create(
    const ParameterClientOptions& options, const std::string& job_id,
    int64_t worker_id, const Placement& placement) {
  if (static_cast<int>(options.server_addresses.size()) !=
      placement.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParameterClient: ", options.server_addresses.size(),
                     " server addresses for a placement on ",
                     placement.num_shards, " shards"));
  }
  if (options.connections_per_shard < 1 || options.max_request_bytes < 4 ||
      DTypeSize(options.wire_dtype) == 0) {
    return absl::InvalidArgumentError(
        "ParameterClient: connections_per_shard >= 1, max_request_bytes >= 4 "
        "and a known wire dtype are required");
  }
  // gRPC 1.51 runs callback RPCs on a process-wide completion queue that
  // is torn down when the last channel goes and rebuilt with the next one;
  // that teardown races with callbacks still draining (a double free in
  // grpc_cq_internal_unref seen when clients come and go in parallel). One
  // channel kept for the life of the process keeps that queue up. Created
  // once, never destroyed on purpose.
  // (volatile: the store stays, so leak checkers see the channel as live.)
  [[maybe_unused]] static std::shared_ptr<
      grpc::Channel>* volatile keep_callback_cq_alive = nullptr;
  static absl::once_flag once;
  absl::call_once(once, [] {
    keep_callback_cq_alive = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  });
  auto client =
      std::make_unique<ClientImpl>(options, job_id, worker_id, placement);
  PS_RETURN_IF_ERROR(client->Connect());
  return client;
}

}  // namespace ps::server
