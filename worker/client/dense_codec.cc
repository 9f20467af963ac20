#include "worker/client/dense_codec.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "proto/parameter_service.pb.h"

namespace ps::client {
namespace {

constexpr int kPushChunksField = 6;
constexpr int kPullChunksField = 2;
constexpr int kPushPulledChunksField = 7;  // PushResponse.pulled_chunks

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
  ticket.RecordPush(response.version(), response.duplicate(),
                    response.dropped());
}

class PullMessageImpl final : public Message {
 public:
  PullMessageImpl(std::string request, const Placement* placement,
                  std::vector<absl::Span<float>> tensors,
                  std::shared_ptr<TicketState> ticket, Session* session,
                  int shard)
      : request_(std::move(request)),
        placement_(placement),
        tensors_(std::move(tensors)),
        ticket_(std::move(ticket)),
        session_(session),
        shard_(shard) {}

  grpc::ByteBuffer Encode() override {
    grpc::Slice slice(request_);
    return grpc::ByteBuffer(&slice, 1);
  }

  absl::Status OnResponse(const grpc::ByteBuffer& buffer) override {
    PullResponse header;
    PS_RETURN_IF_ERROR(DecodeWeights(buffer, kPullChunksField, &header,
                                     *placement_, tensors_, *ticket_));
    session_->SetPulledVersion(shard_, header.version());
    ticket_->RecordVersions(header.version(), header.min_clock());
    return absl::OkStatus();
  }

 private:
  const std::string request_;  // serialized PullRequest
  const Placement* const placement_;
  const std::vector<absl::Span<float>> tensors_;
  const std::shared_ptr<TicketState> ticket_;
  Session* const session_;
  const int shard_;
};

class PushMessageImpl final : public Message {
 public:
  PushMessageImpl(PushRequest header, std::vector<ChunkOut> chunks,
                  std::shared_ptr<TicketState> ticket)
      : header_(std::move(header)),
        chunks_(std::move(chunks)),
        ticket_(std::move(ticket)) {}

  grpc::ByteBuffer Encode() override {
    return EncodeWithPayloads(header_, kPushChunksField, chunks_);
  }

  absl::Status OnResponse(const grpc::ByteBuffer& buffer) override {
    PS_ASSIGN_OR_RETURN(PushResponse response, ParsePushResponse(buffer));
    RecordPush(*ticket_, response);
    return absl::OkStatus();
  }

 private:
  const PushRequest header_;
  const std::vector<ChunkOut> chunks_;
  const std::shared_ptr<TicketState> ticket_;
};

class PushAndPullMessageImpl final : public Message {
 public:
  PushAndPullMessageImpl(PushRequest header, PushAndPull args,
                         const DenseCodec* codec, Session* session,
                         CallEngine* engine)
      : header_(std::move(header)),
        a_(std::move(args)),
        codec_(codec),
        session_(session),
        engine_(engine) {}

  grpc::ByteBuffer Encode() override {
    return EncodeWithPayloads(header_, kPushChunksField, a_.chunks);
  }

  absl::Status OnResponse(const grpc::ByteBuffer& buffer) override {
    PushResponse response;
    PS_RETURN_IF_ERROR(DecodeWeights(buffer, kPushPulledChunksField, &response,
                                     codec_->placement(), a_.tensors,
                                     *a_.pull));
    RecordPush(*a_.end, response);
    if (response.pulled()) {
      pulled_.store(true);
      // Of an end of step, only the last message's answer gives the
      // weights' version: the earlier messages' answers (ASP/SSP) predate
      // this worker's own end of step, which would count as one version of
      // staleness. PushTensorsAndPull: every answer's.
      a_.pull->RecordVersions(a_.last || !a_.end_of_step_call
                                  ? response.pulled_version()
                                  : TicketState::kNone,
                              response.pulled_min_clock());
      if (a_.last)
        session_->SetPulledVersion(a_.shard, response.pulled_version());
    }
    return absl::OkStatus();
  }

  // Runs on a transport thread: the follow-up pulls start at once
  // (Origin::kCallback).
  void OnEnd(const absl::Status& status) override {
    if (!status.ok()) {
      if (a_.ask) a_.pull->Complete(status);
      for (size_t g = 0; g < a_.more.size(); ++g) a_.pull->Complete(status);
      return;
    }
    if (a_.ask) {
      if (pulled_.load()) {
        a_.pull->Complete(absl::OkStatus());
      } else {
        // A server that predates then_pull ignores it and answers a plain
        // push.
        StartPull(a_.ask_ids);
      }
    }
    for (const std::vector<int64_t>& group : a_.more) StartPull(group);
  }

 private:
  void StartPull(const std::vector<int64_t>& group) {
    engine_->Send(a_.pull, a_.shard, Rpc::kPull,
                  codec_->PullMessage(a_.pull, a_.shard, group, a_.next_clock,
                                      a_.min_version, a_.tensors),
                  Origin::kCallback);
  }

  const PushRequest header_;
  const PushAndPull a_;
  const DenseCodec* const codec_;
  Session* const session_;
  CallEngine* const engine_;
  // Whether the response carried the weights.
  std::atomic<bool> pulled_{false};
};

}  // namespace

DenseCodec::DenseCodec(const Placement& placement,
                       const DenseCodecOptions& options, Session* session,
                       ChunkCompressor* compressor)
    : placement_(placement),
      options_(options),
      session_(session),
      compressor_(compressor) {
  tensor_chunks_.resize(placement_.tensor_elements.size());
  for (const Chunk& c : placement_.chunks) {
    tensor_chunks_[c.tensor_index].push_back(c.chunk_id);
  }
  pull_groups_.resize(placement_.num_shards);
  for (int s = 0; s < placement_.num_shards; ++s) {
    pull_groups_[s] = CutIntoGroups(placement_.shard_chunks[s]);
    if (pull_groups_[s].empty()) pull_groups_[s].emplace_back();
  }
}

int64_t DenseCodec::PushBytes(const Chunk& c) const {
  const int64_t size = DTypeSize(options_.wire_dtype);
  if (compressor_ == nullptr) return c.num_elements * size;
  return compressor_->k(c.chunk_id) * (size + 4);
}

std::vector<std::vector<int64_t>> DenseCodec::CutIntoGroups(
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

absl::Status DenseCodec::CheckTensors(
    absl::string_view what,
    const std::vector<absl::Span<float>>& tensors) const {
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

absl::StatusOr<ShardMessages> DenseCodec::Split(
    absl::string_view what, const std::vector<TensorGrad>& grads,
    int spread) const {
  const DType dtype = options_.wire_dtype;
  const int size = DTypeSize(dtype);
  // Messages per shard, each at most max_request_bytes of payload, or with
  // `spread`, at most 1/spread of the shard's bytes.
  ShardMessages messages(placement_.num_shards);
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
      if (spread > 1) bytes[c.shard] += PushBytes(c);
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
      if (compressor_ != nullptr) {
        PS_RETURN_IF_ERROR(compressor_->Compress(id, part, &out));
      } else if (size == 4) {
        out.data = BorrowSlice(absl::string_view(
            reinterpret_cast<const char*>(part.data()), part.size() * 4));
      } else {
        char* data = nullptr;
        out.data = AllocateSlice(part.size() * size, &data);
        NarrowFromFloat(dtype, part, data);
      }
      auto& shard_messages = messages[c.shard];
      const int64_t b = PushBytes(c);
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

PushRequest DenseCodec::PushHeader(int shard, int64_t clock,
                                   int64_t base_version,
                                   bool end_of_step) const {
  PushRequest header =
      session_->PushHeader(shard, clock, base_version, end_of_step);
  header.set_chunks_final(options_.chunks_final);
  return header;
}

std::unique_ptr<Message> DenseCodec::PullMessage(
    const std::shared_ptr<TicketState>& ticket, int shard,
    const std::vector<int64_t>& group, int64_t clock, int64_t min_version,
    const std::vector<absl::Span<float>>& tensors) const {
  PullRequest request;
  request.set_job_id(session_->job_id());
  request.set_worker_id(session_->worker_id());
  request.set_shard(shard);
  request.set_clock(clock);
  request.set_min_version(min_version);
  request.set_dtype(options_.wire_dtype);
  for (int64_t id : group) request.add_chunk_ids(id);
  if (group.empty()) request.set_version_only(true);
  return std::make_unique<PullMessageImpl>(request.SerializeAsString(),
                                           &placement_, tensors, ticket,
                                           session_, shard);
}

std::unique_ptr<Message> DenseCodec::PushMessage(
    const std::shared_ptr<TicketState>& ticket, int shard,
    std::vector<ChunkOut> chunks, int64_t clock, int64_t base_version,
    bool end_of_step) const {
  return std::make_unique<PushMessageImpl>(
      PushHeader(shard, clock, base_version, end_of_step), std::move(chunks),
      ticket);
}

std::unique_ptr<Message> DenseCodec::PushAndPullMessage(
    PushAndPull args, CallEngine* engine) const {
  PushRequest header =
      PushHeader(args.shard, args.clock, args.base_version, args.last);
  if (args.ask) {
    PullRequest* then = header.mutable_then_pull();
    then->set_shard(args.shard);
    then->set_clock(args.next_clock);
    then->set_min_version(args.min_version);
    then->set_dtype(options_.wire_dtype);
    for (int64_t id : args.ask_ids) then->add_chunk_ids(id);
    // (No chunk ids would mean all of them.)
    if (args.ask_ids.empty()) then->set_version_only(true);
  }
  return std::make_unique<PushAndPullMessageImpl>(
      std::move(header), std::move(args), this, session_, engine);
}

}  // namespace ps::client
