#include "worker/client/parameter_client.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "worker/client/call_engine.h"
#include "worker/client/dense_codec.h"
#include "worker/client/grpc_transport.h"
#include "worker/client/sparse_codec.h"

namespace ps::client {
namespace {

// The dense operations: each plans its messages (DenseCodec) and hands them
// to the engine, which owns retries, cancellation and the send thread.
class ClientImpl final : public ParameterClient {
 public:
  ClientImpl(const ParameterClientOptions& options, const std::string& job_id,
             int64_t worker_id, const Placement& placement,
             std::unique_ptr<Transport> transport, const Clock* clock,
             std::unique_ptr<ChunkCompressor> compressor)
      : options_(options),
        session_(job_id, worker_id, placement.num_shards, options.incarnation),
        compressor_(std::move(compressor)),
        codec_(placement,
               {options.wire_dtype, options.max_request_bytes,
                options.chunks_final},
               &session_, compressor_.get()),
        sparse_(options.sparse_tables, placement.num_shards,
                options.max_request_bytes, &session_),
        engine_(std::move(transport), {options.retry, options.send_thread},
                clock) {}

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
  Ticket PullRows(int64_t clock, int64_t min_version,
                  std::vector<SparsePull> pulls) override;
  Ticket PushRows(std::vector<SparsePush> grads, int64_t clock,
                  int64_t base_version) override;
  StepTickets PushRowsAndPull(std::vector<SparsePush> grads, int64_t clock,
                              int64_t base_version, int64_t next_clock,
                              int64_t min_version,
                              std::vector<SparsePull> next) override;
  const Placement& placement() const override { return codec_.placement(); }
  absl::Status SetServerAddresses(
      const std::vector<std::string>& addresses) override {
    if (static_cast<int>(addresses.size()) != num_shards()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ParameterClient: ", addresses.size(),
          " server addresses for a placement on ", num_shards(), " shards"));
    }
    return engine_.SetAddresses(addresses);
  }
  void CancelInFlight() override { engine_.CancelInFlight(); }

 private:
  // EndStepAndPull's plan for one shard: per push message, the chunks it
  // asks back (`fused`) and whether it asks at all, and the groups pulled
  // once the end of step is acknowledged (`rest`).
  struct ShardStepPlan {
    std::vector<std::vector<int64_t>> fused;
    std::vector<bool> asks;
    std::vector<std::vector<int64_t>> rest;
  };
  ShardStepPlan PlanStepEnd(int shard,
                            std::vector<std::vector<ChunkOut>>& shard_messages,
                            std::vector<bool>& taken) const;

  // Pipelined, the messages each shard's part of a step end is cut into:
  // about connections_per_shard in flight in all, so one per shard once
  // there are as many shards. A message more per shard then buys no overlap
  // (the shards' messages overlap already) and costs a whole RPC's CPU on
  // both sides, plus, under ASP/SSP, a hand-off to the server's wait pool
  // when the last message's answer must wait for the step's other pushes
  // (docs/performance/ps-bench.md, "Throughput").
  int StepSpread() const {
    const int shards = std::max(1, num_shards());
    return std::max(1, (options_.connections_per_shard + shards - 1) / shards);
  }

  std::shared_ptr<TicketState> NewTicket() const {
    return std::make_shared<TicketState>(options_.wait_spin);
  }
  int num_shards() const { return codec_.placement().num_shards; }

  const ParameterClientOptions options_;
  Session session_;
  // Null without compression; the codec's.
  const std::unique_ptr<ChunkCompressor> compressor_;
  const DenseCodec codec_;
  const SparseCodec sparse_;
  // Last: destroyed first, waiting for the calls in flight, whose messages
  // use the members above.
  CallEngine engine_;
};

Ticket ClientImpl::PullAll(int64_t clock, int64_t min_version,
                           std::vector<absl::Span<float>> tensors) {
  auto ticket = NewTicket();
  if (absl::Status s = codec_.CheckTensors("PullAll", tensors); !s.ok()) {
    ticket->Fail(s);
    return Ticket(ticket);
  }
  int total = 0;
  for (const auto& groups : codec_.pull_groups()) total += groups.size();
  ticket->Add(total);
  for (int s = 0; s < num_shards(); ++s) {
    for (const std::vector<int64_t>& group : codec_.pull_groups()[s]) {
      engine_.Send(
          ticket, s, Rpc::kPull,
          codec_.PullMessage(ticket, s, group, clock, min_version, tensors),
          Origin::kCaller);
    }
  }
  return Ticket(ticket);
}

Ticket ClientImpl::PushTensors(std::vector<TensorGrad> grads, int64_t clock,
                               int64_t base_version) {
  auto ticket = NewTicket();
  absl::StatusOr<ShardMessages> messages = codec_.Split("PushTensors", grads);
  if (!messages.ok()) {
    ticket->Fail(messages.status());
    return Ticket(ticket);
  }
  int total = 0;
  for (const auto& m : *messages) total += m.size();
  ticket->Add(total);
  for (int s = 0; s < num_shards(); ++s) {
    for (auto& m : (*messages)[s]) {
      engine_.Send(ticket, s, Rpc::kPush,
                   codec_.PushMessage(ticket, s, std::move(m), clock,
                                      base_version, false),
                   Origin::kCaller);
    }
  }
  return Ticket(ticket);
}

Ticket ClientImpl::EndStep(int64_t clock, int64_t base_version) {
  auto ticket = NewTicket();
  ticket->Add(num_shards());
  for (int s = 0; s < num_shards(); ++s) {
    engine_.Send(ticket, s, Rpc::kPush,
                 codec_.PushMessage(ticket, s, {}, clock, base_version, true),
                 Origin::kCaller);
  }
  return Ticket(ticket);
}

// With pipeline_step_end, every message asks for its own chunks. The last
// message, which ends the step, asks for its own chunks and then the shard's
// others, up to one message's worth. Chunks asked for already (`taken`) are
// left out.
ClientImpl::ShardStepPlan ClientImpl::PlanStepEnd(
    int shard, std::vector<std::vector<ChunkOut>>& shard_messages,
    std::vector<bool>& taken) const {
  const bool per_message = options_.pipeline_step_end;
  ShardStepPlan plan;
  if (shard_messages.empty()) shard_messages.emplace_back();
  std::vector<std::vector<int64_t>>& f = plan.fused;
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
  for (int64_t id : codec_.placement().shard_chunks[shard]) {
    if (!taken[id]) ids.push_back(id);
  }
  std::vector<std::vector<int64_t>> groups = codec_.CutIntoGroups(ids);
  if (!groups.empty()) {
    f.back() = std::move(groups[0]);
    plan.rest.assign(std::make_move_iterator(groups.begin() + 1),
                     std::make_move_iterator(groups.end()));
  }
  plan.asks.resize(shard_messages.size());
  for (size_t m = 0; m < shard_messages.size(); ++m) {
    std::sort(f[m].begin(), f[m].end());
    // A message with nothing left to ask for asks nothing, but the last
    // one always asks (for the version only, if need be): its answer
    // comes once the step has closed and gives the version.
    plan.asks[m] = !f[m].empty() || m + 1 == shard_messages.size();
  }
  return plan;
}

ParameterClient::StepTickets ClientImpl::EndStepAndPull(
    std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
    int64_t next_clock, int64_t min_version,
    std::vector<absl::Span<float>> tensors,
    const std::vector<int64_t>& already_asked) {
  auto end = NewTicket();
  auto pull = NewTicket();
  absl::Status bad = codec_.CheckTensors("EndStepAndPull", tensors);
  absl::StatusOr<ShardMessages> messages = codec_.Split(
      "EndStepAndPull", grads, options_.pipeline_step_end ? StepSpread() : 1);
  if (bad.ok() && !messages.ok()) bad = messages.status();
  if (!bad.ok()) {
    end->Fail(bad);
    pull->Fail(bad);
    return {Ticket(end), Ticket(pull)};
  }
  std::vector<ShardStepPlan> plans;
  plans.reserve(num_shards());
  int pushes = 0, pulls = 0;
  std::vector<bool> taken(codec_.placement().chunks.size(), false);
  for (int64_t id : already_asked) {
    if (id >= 0 && id < static_cast<int64_t>(taken.size())) taken[id] = true;
  }
  for (int s = 0; s < num_shards(); ++s) {
    plans.push_back(PlanStepEnd(s, (*messages)[s], taken));
    pushes += (*messages)[s].size();
    pulls += std::count(plans[s].asks.begin(), plans[s].asks.end(), true);
    pulls += plans[s].rest.size();
  }
  end->Add(pushes);
  pull->Add(pulls);
  for (int s = 0; s < num_shards(); ++s) {
    std::vector<std::vector<ChunkOut>>& shard_messages = (*messages)[s];
    for (size_t m = 0; m < shard_messages.size(); ++m) {
      PushAndPull a;
      a.shard = s;
      a.chunks = std::move(shard_messages[m]);
      a.clock = clock;
      a.base_version = base_version;
      a.end_of_step_call = true;
      a.last = m + 1 == shard_messages.size();
      a.ask = plans[s].asks[m];
      a.ask_ids = std::move(plans[s].fused[m]);
      if (a.last) a.more = std::move(plans[s].rest);
      a.next_clock = next_clock;
      a.min_version = min_version;
      a.tensors = tensors;
      a.end = end;
      a.pull = pull;
      engine_.Send(end, s, Rpc::kPush,
                   codec_.PushAndPullMessage(std::move(a), &engine_),
                   Origin::kCaller);
    }
  }
  return {Ticket(end), Ticket(pull)};
}

ParameterClient::StepTickets ClientImpl::PushTensorsAndPull(
    std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
    int64_t next_clock, int64_t min_version,
    std::vector<absl::Span<float>> tensors) {
  auto end = NewTicket();
  auto pull = NewTicket();
  absl::Status bad = codec_.CheckTensors("PushTensorsAndPull", tensors);
  absl::StatusOr<ShardMessages> messages =
      codec_.Split("PushTensorsAndPull", grads);
  if (bad.ok() && !messages.ok()) bad = messages.status();
  if (!bad.ok()) {
    end->Fail(bad);
    pull->Fail(bad);
    return {Ticket(end), Ticket(pull)};
  }
  int total = 0;
  for (const auto& m : *messages) total += m.size();
  end->Add(total);
  pull->Add(total);
  for (int s = 0; s < num_shards(); ++s) {
    for (std::vector<ChunkOut>& m : (*messages)[s]) {
      std::vector<int64_t> ids;
      for (const ChunkOut& c : m) ids.push_back(c.chunk_id);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      PushAndPull a;
      a.shard = s;
      a.chunks = std::move(m);
      a.clock = clock;
      a.base_version = base_version;
      a.ask = true;
      a.ask_ids = std::move(ids);
      a.next_clock = next_clock;
      a.min_version = min_version;
      a.tensors = tensors;
      a.end = end;
      a.pull = pull;
      engine_.Send(end, s, Rpc::kPush,
                   codec_.PushAndPullMessage(std::move(a), &engine_),
                   Origin::kCaller);
    }
  }
  return {Ticket(end), Ticket(pull)};
}

Ticket ClientImpl::PullRows(int64_t clock, int64_t min_version,
                            std::vector<SparsePull> pulls) {
  auto ticket = NewTicket();
  absl::StatusOr<SparsePullPlan> plan =
      sparse_.PlanPull("PullRows", std::move(pulls));
  if (!plan.ok()) {
    ticket->Fail(plan.status());
    return Ticket(ticket);
  }
  int total = 0;
  for (const auto& m : plan->messages) total += m.size();
  ticket->Add(total);
  for (int s = 0; s < num_shards(); ++s) {
    for (SparseMessage& m : plan->messages[s]) {
      engine_.Send(ticket, s, Rpc::kPull,
                   sparse_.PullMessage(ticket, s, std::move(m), clock,
                                       min_version, plan->target),
                   Origin::kCaller);
    }
  }
  return Ticket(ticket);
}

Ticket ClientImpl::PushRows(std::vector<SparsePush> grads, int64_t clock,
                            int64_t base_version) {
  return PushRowsAndPull(std::move(grads), clock, base_version, 0, 0, {}).end;
}

// Message i to a shard carries its push's i-th message and its pull's i-th
// (in then_pull): as many messages as the longer of the two.
ParameterClient::StepTickets ClientImpl::PushRowsAndPull(
    std::vector<SparsePush> grads, int64_t clock, int64_t base_version,
    int64_t next_clock, int64_t min_version, std::vector<SparsePull> next) {
  auto end = NewTicket();
  auto pull = NewTicket();
  absl::StatusOr<SparseShardMessages> pushes =
      sparse_.PlanPush("PushRows", grads);
  absl::StatusOr<SparsePullPlan> pulls =
      sparse_.PlanPull("PushRowsAndPull", std::move(next));
  absl::Status bad = pushes.ok() ? pulls.status() : pushes.status();
  if (!bad.ok()) {
    end->Fail(bad);
    pull->Fail(bad);
    return {Ticket(end), Ticket(pull)};
  }
  int messages = 0, asks = 0;
  for (int s = 0; s < num_shards(); ++s) {
    messages += std::max((*pushes)[s].size(), pulls->messages[s].size());
    asks += pulls->messages[s].size();
  }
  end->Add(messages);
  pull->Add(asks);
  for (int s = 0; s < num_shards(); ++s) {
    std::vector<SparseMessage>& push = (*pushes)[s];
    std::vector<SparseMessage>& ask = pulls->messages[s];
    for (size_t m = 0; m < std::max(push.size(), ask.size()); ++m) {
      SparseCodec::ThenPull then;
      if (m < ask.size()) {
        then.pull = pull;
        then.ask = std::move(ask[m]);
        then.clock = next_clock;
        then.min_version = min_version;
        then.target = pulls->target;
      }
      engine_.Send(
          end, s, Rpc::kPush,
          sparse_.PushMessage(
              end, s, m < push.size() ? std::move(push[m]) : SparseMessage{},
              clock, base_version, std::move(then), &engine_),
          Origin::kCaller);
    }
  }
  return {Ticket(end), Ticket(pull)};
}

absl::Status CheckOptions(const ParameterClientOptions& options,
                          int num_shards) {
  for (const SparseTableSpec& t : options.sparse_tables) {
    if (t.dim() < 1 || t.dim() > 65536 || DTypeSize(t.dtype()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ParameterClient: sparse table ", t.name(), " has dim ",
                       t.dim(), " and dtype ", t.dtype(),
                       "; dim in [1, 65536] and a known dtype "
                       "are required"));
    }
  }
  if (!options.sparse_tables.empty() &&
      (num_shards < 1 || num_shards > kMaxKeyShards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParameterClient: sparse tables over ", num_shards,
                     " shards (1 to ", kMaxKeyShards, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const ParameterClientOptions& options) {
  if (options.connections_per_shard < 1 || options.max_request_bytes < 4 ||
      DTypeSize(options.wire_dtype) == 0) {
    return absl::InvalidArgumentError(
        "ParameterClient: connections_per_shard >= 1, max_request_bytes >= 4 "
        "and a known wire dtype are required");
  }
  if (!(options.topk_ratio >= 0 && options.topk_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParameterClient: topk_ratio ", options.topk_ratio,
                     " outside [0, 1] (0: no compression)"));
  }
  return absl::OkStatus();
}

}  // namespace

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
  PS_RETURN_IF_ERROR(CheckOptions(options));
  GrpcTransportOptions t;
  t.server_addresses = options.server_addresses;
  t.token = options.token;
  t.tls = options.tls;
  t.max_message_bytes = options.max_message_bytes;
  t.connections_per_shard = options.connections_per_shard;
  t.call_timeout = options.call_timeout;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                      NewGrpcTransport(t));
  return CreateWithTransport(options, job_id, worker_id, placement,
                             std::move(transport));
}

absl::StatusOr<std::unique_ptr<ParameterClient>>
ParameterClient::CreateWithTransport(const ParameterClientOptions& options,
                                     const std::string& job_id,
                                     int64_t worker_id,
                                     const Placement& placement,
                                     std::unique_ptr<Transport> transport,
                                     const Clock* clock) {
  if (transport == nullptr || transport->num_shards() != placement.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParameterClient: a transport to ",
        transport == nullptr ? 0 : transport->num_shards(),
        " shards for a placement on ", placement.num_shards, " shards"));
  }
  PS_RETURN_IF_ERROR(CheckOptions(options));
  PS_RETURN_IF_ERROR(CheckOptions(options, placement.num_shards));
  std::unique_ptr<ChunkCompressor> compressor;
  if (options.topk_ratio > 0) {
    PS_ASSIGN_OR_RETURN(compressor,
                        ChunkCompressor::Create(placement, options.topk_ratio,
                                                options.wire_dtype,
                                                options.compression_counters));
  }
  return std::unique_ptr<ParameterClient>(
      new ClientImpl(options, job_id, worker_id, placement,
                     std::move(transport), clock, std::move(compressor)));
}

// The defaults, for implementations without sparse tables (fakes).
namespace {
absl::Status NoSparse(absl::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat(what, ": this parameter client has no sparse tables"));
}
}  // namespace

Ticket ParameterClient::PullRows(int64_t, int64_t, std::vector<SparsePull>) {
  auto ticket = std::make_shared<TicketState>();
  ticket->Fail(NoSparse("PullRows"));
  return Ticket(ticket);
}

Ticket ParameterClient::PushRows(std::vector<SparsePush>, int64_t, int64_t) {
  auto ticket = std::make_shared<TicketState>();
  ticket->Fail(NoSparse("PushRows"));
  return Ticket(ticket);
}

ParameterClient::StepTickets ParameterClient::PushRowsAndPull(
    std::vector<SparsePush>, int64_t, int64_t, int64_t, int64_t,
    std::vector<SparsePull>) {
  auto end = std::make_shared<TicketState>();
  auto pull = std::make_shared<TicketState>();
  end->Fail(NoSparse("PushRowsAndPull"));
  pull->Fail(NoSparse("PushRowsAndPull"));
  return {Ticket(end), Ticket(pull)};
}

}  // namespace ps::client
