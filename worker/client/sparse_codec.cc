#include "worker/client/sparse_codec.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/wire/key_placement.h"
#include "common/wire/sparse_rows.h"
#include "proto/parameter_service.pb.h"

namespace ps::client {
namespace {

DType Known(DType dtype) {
  return dtype == DTYPE_UNSPECIFIED ? FLOAT32 : dtype;
}

// A shard's keys of one slot as one slice: the caller's memory when they
// are a contiguous run of it, else gathered.
grpc::Slice KeysSlice(absl::Span<const uint64_t> keys,
                      const SparseLayout::ShardPart& part) {
  const size_t n = part.positions.size();
  if (part.contiguous) {
    return BorrowSlice(absl::string_view(
        reinterpret_cast<const char*>(keys.data() + part.positions[0]), 8 * n));
  }
  char* data = nullptr;
  grpc::Slice slice = AllocateSlice(8 * n, &data);
  uint64_t* out = reinterpret_cast<uint64_t*>(data);
  for (size_t k = 0; k < n; ++k) {
    std::memcpy(out + k, keys.data() + part.positions[k], 8);
  }
  return slice;
}

// A shard's gradients of one slot in `dtype`: the caller's memory when fp32
// and contiguous, else gathered and narrowed.
grpc::Slice RowsSlice(absl::Span<const float> grads, int dim, DType dtype,
                      const SparseLayout::ShardPart& part) {
  const size_t n = part.positions.size();
  const size_t d = static_cast<size_t>(dim);
  const size_t row_bytes = d * DTypeSize(dtype);
  if (part.contiguous && dtype == FLOAT32) {
    return BorrowSlice(absl::string_view(
        reinterpret_cast<const char*>(grads.data() + part.positions[0] * d),
        n * row_bytes));
  }
  char* data = nullptr;
  grpc::Slice slice = AllocateSlice(n * row_bytes, &data);
  for (size_t k = 0; k < n; ++k) {
    NarrowFromFloat(dtype, grads.subspan(part.positions[k] * d, d),
                    data + k * row_bytes);
  }
  return slice;
}

// Packs a shard's pieces into messages of at most `max_bytes` (a piece that
// is bigger goes alone), one record per table in each.
void Pack(std::vector<std::pair<SparseRowsOut, SparseMessage::Part>> pieces,
          const std::vector<size_t>& sizes, size_t max_bytes,
          std::vector<SparseMessage>* out) {
  size_t bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    bool fits = !out->empty() && bytes + sizes[i] <= max_bytes;
    if (fits) {
      for (const SparseRowsOut& r : out->back().sparse) {
        if (r.table == pieces[i].first.table) fits = false;
      }
    }
    if (!fits) {
      out->emplace_back();
      bytes = 0;
    }
    out->back().sparse.push_back(std::move(pieces[i].first));
    out->back().parts.push_back(pieces[i].second);
    bytes += sizes[i];
  }
}

// Parses a message's header, handing each SparseRows record (in order) to
// `store` with its index; at most `expected` of them. `*got`: how many.
template <typename Store>
absl::Status DecodeAnswer(const grpc::ByteBuffer& buffer, PayloadFields fields,
                          google::protobuf::MessageLite* header,
                          size_t expected, int shard, size_t* got,
                          Store&& store) {
  std::vector<grpc::Slice> slices;
  std::vector<uint64_t> key_scratch;
  *got = 0;
  PayloadHandlers handlers;
  handlers.on_sparse = [&](const SparseRowsView& view,
                           absl::Span<const absl::string_view> segs) {
    if (*got >= expected) {
      return absl::InternalError(
          absl::StrCat("shard ", shard, " answered more sparse row sets than",
                       " the ", expected, " asked for"));
    }
    return store((*got)++, view, segs);
  };
  return Annotate(
      DecodeSegmented(buffer, fields, header, &slices, &key_scratch, handlers),
      absl::StrCat("the answer of shard ", shard));
}

absl::Status CheckCount(int shard, size_t got, size_t expected) {
  if (got == expected) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("shard ", shard, " answered ", got,
                                          " sparse row sets of the ", expected,
                                          " asked for"));
}

class PullMessageImpl final : public Message {
 public:
  PullMessageImpl(PullRequest header, SparseMessage message,
                  std::shared_ptr<const SparsePullTarget> target,
                  std::shared_ptr<TicketState> ticket, const SparseCodec* codec,
                  int shard)
      : header_(std::move(header)),
        message_(std::move(message)),
        target_(std::move(target)),
        ticket_(std::move(ticket)),
        codec_(codec),
        shard_(shard) {}

  grpc::ByteBuffer Encode() override {
    return EncodeMessage(header_, kPullRequestFields, {}, message_.sparse);
  }

  absl::Status OnResponse(const grpc::ByteBuffer& buffer) override {
    PullResponse response;
    size_t got = 0;
    PS_RETURN_IF_ERROR(
        DecodeAnswer(buffer, kPullResponseFields, &response,
                     message_.parts.size(), shard_, &got,
                     [&](size_t i, const SparseRowsView& v,
                         absl::Span<const absl::string_view> segs) {
                       return codec_->StoreRows(*target_, shard_,
                                                message_.parts[i], v, segs);
                     }));
    PS_RETURN_IF_ERROR(CheckCount(shard_, got, message_.parts.size()));
    ticket_->RecordVersions(response.version(), response.min_clock());
    return absl::OkStatus();
  }

 private:
  const PullRequest header_;
  const SparseMessage message_;
  const std::shared_ptr<const SparsePullTarget> target_;
  const std::shared_ptr<TicketState> ticket_;
  const SparseCodec* const codec_;
  const int shard_;
};

class PushMessageImpl final : public Message {
 public:
  PushMessageImpl(PushRequest header, SparseMessage message,
                  std::shared_ptr<TicketState> end, SparseCodec::ThenPull then,
                  const SparseCodec* codec, int shard, CallEngine* engine)
      : header_(std::move(header)),
        message_(std::move(message)),
        end_(std::move(end)),
        then_(std::move(then)),
        codec_(codec),
        shard_(shard),
        engine_(engine) {}

  grpc::ByteBuffer Encode() override {
    return EncodeMessage(header_, kPushRequestFields, {}, message_.sparse);
  }

  absl::Status OnResponse(const grpc::ByteBuffer& buffer) override {
    PushResponse response;
    const size_t asked = then_.pull != nullptr ? then_.ask.parts.size() : 0;
    size_t got = 0;
    PS_RETURN_IF_ERROR(DecodeAnswer(
        buffer, kPushResponseFields, &response, asked, shard_, &got,
        [&](size_t i, const SparseRowsView& v,
            absl::Span<const absl::string_view> segs) {
          return codec_->StoreRows(*then_.target, shard_, then_.ask.parts[i], v,
                                   segs);
        }));
    end_->RecordPush(response.version(), response.duplicate(),
                     response.dropped());
    // A server that ignores then_pull answers a plain push (no rows): the
    // rows are pulled once it has ended (OnEnd).
    if (then_.pull != nullptr && response.pulled()) {
      PS_RETURN_IF_ERROR(CheckCount(shard_, got, asked));
      pulled_.store(true);
      then_.pull->RecordVersions(response.pulled_version(),
                                 response.pulled_min_clock());
    }
    return absl::OkStatus();
  }

  // Runs on a transport thread: a pull the answer did not bring starts at
  // once (Origin::kCallback).
  void OnEnd(const absl::Status& status) override {
    if (then_.pull == nullptr) return;
    if (!status.ok()) {
      then_.pull->Complete(status);
    } else if (pulled_.load()) {
      then_.pull->Complete(absl::OkStatus());
    } else {
      engine_->Send(
          then_.pull, shard_, Rpc::kPull,
          codec_->PullMessage(then_.pull, shard_, then_.ask, then_.clock,
                              then_.min_version, then_.target),
          Origin::kCallback);
    }
  }

 private:
  const PushRequest header_;
  const SparseMessage message_;
  const std::shared_ptr<TicketState> end_;
  const SparseCodec::ThenPull then_;
  const SparseCodec* const codec_;
  const int shard_;
  CallEngine* const engine_;
  std::atomic<bool> pulled_{false};
};

}  // namespace

SparseCodec::SparseCodec(const std::vector<SparseTableSpec>& tables,
                         int num_shards, int64_t max_request_bytes,
                         Session* session)
    : num_shards_(num_shards),
      max_request_bytes_(max_request_bytes),
      session_(session) {
  for (const SparseTableSpec& spec : tables) {
    tables_.push_back(
        {spec.name(), spec.dim(), Known(spec.dtype()), TableSalt(spec.name())});
  }
}

absl::Status SparseCodec::CheckTable(absl::string_view what, int table,
                                     size_t keys, size_t floats) const {
  if (table < 0 || table >= num_tables()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no sparse table ",
                                                   table, " (the job has ",
                                                   num_tables(), ")"));
  }
  const SparseTable& t = tables_[table];
  if (floats != keys * static_cast<size_t>(t.dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": table ", t.name, " (dim ", t.dim, "): ", floats,
                     " floats for ", keys, " keys"));
  }
  if (keys >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": table ", t.name, ": ", keys, " keys in a call"));
  }
  return absl::OkStatus();
}

std::vector<SparseLayout::ShardPart> SparseCodec::Place(
    const SparseTable& table, absl::Span<const uint64_t> keys) const {
  std::vector<SparseLayout::ShardPart> parts(num_shards_);
  std::vector<int32_t> shards(keys.size());
  KeyShards(table.salt, num_shards_, keys, absl::MakeSpan(shards));
  std::vector<size_t> counts(num_shards_, 0);
  for (int32_t s : shards) ++counts[s];
  for (int s = 0; s < num_shards_; ++s) parts[s].positions.reserve(counts[s]);
  for (size_t i = 0; i < keys.size(); ++i) {
    SparseLayout::ShardPart& p = parts[shards[i]];
    if (!p.positions.empty() &&
        p.positions.back() + 1 != static_cast<int32_t>(i)) {
      p.contiguous = false;
    }
    p.positions.push_back(static_cast<int32_t>(i));
  }
  return parts;
}

PullRequest SparseCodec::PullHeader(int shard, int64_t clock,
                                    int64_t min_version) const {
  PullRequest header;
  header.set_job_id(session_->job_id());
  header.set_worker_id(session_->worker_id());
  header.set_shard(shard);
  header.set_clock(clock);
  header.set_min_version(min_version);
  header.set_sparse_only(true);
  return header;
}

absl::StatusOr<SparsePullPlan> SparseCodec::PlanPull(
    absl::string_view what, std::vector<SparsePull> pulls) const {
  auto target = std::make_shared<SparsePullTarget>();
  target->layout.parts.resize(pulls.size());
  for (size_t slot = 0; slot < pulls.size(); ++slot) {
    const SparsePull& p = pulls[slot];
    PS_RETURN_IF_ERROR(CheckTable(what, p.table, p.keys.size(), p.rows.size()));
    target->layout.parts[slot] = Place(tables_[p.table], p.keys);
  }
  SparsePullPlan plan;
  plan.messages.resize(num_shards_);
  const size_t max_bytes = static_cast<size_t>(max_request_bytes_);
  for (int s = 0; s < num_shards_; ++s) {
    std::vector<std::pair<SparseRowsOut, SparseMessage::Part>> pieces;
    std::vector<size_t> sizes;
    for (size_t slot = 0; slot < pulls.size(); ++slot) {
      const SparseLayout::ShardPart& part = target->layout.parts[slot][s];
      const int64_t n = static_cast<int64_t>(part.positions.size());
      if (n == 0) continue;
      const SparseTable& t = tables_[pulls[slot].table];
      const grpc::Slice keys = KeysSlice(pulls[slot].keys, part);
      // Cut by the larger of the request (keys) and the answer (rows).
      const size_t per_row =
          std::max<size_t>(8, static_cast<size_t>(t.dim) * DTypeSize(t.dtype));
      const int64_t fit = static_cast<int64_t>(std::max<size_t>(
          1, (max_bytes > kSparseRowsOverhead ? max_bytes - kSparseRowsOverhead
                                              : 0) /
                 per_row));
      for (int64_t from = 0; from < n; from += fit) {
        const int64_t to = std::min(n, from + fit);
        SparseRowsOut piece;
        piece.table = pulls[slot].table;
        piece.dtype = t.dtype;
        piece.num_rows = to - from;
        piece.dim = t.dim;
        piece.keys = keys.sub(8 * from, 8 * to);
        pieces.push_back(
            {std::move(piece),
             SparseMessage::Part{static_cast<int>(slot), from, to}});
        sizes.push_back(kSparseRowsOverhead + per_row * (to - from));
      }
    }
    Pack(std::move(pieces), sizes, max_bytes, &plan.messages[s]);
  }
  target->pulls = std::move(pulls);
  plan.target = std::move(target);
  return plan;
}

absl::StatusOr<SparseShardMessages> SparseCodec::PlanPush(
    absl::string_view what, const std::vector<SparsePush>& grads) const {
  std::vector<std::vector<SparseLayout::ShardPart>> layout(grads.size());
  for (size_t slot = 0; slot < grads.size(); ++slot) {
    const SparsePush& g = grads[slot];
    PS_RETURN_IF_ERROR(
        CheckTable(what, g.table, g.keys.size(), g.grads.size()));
    for (size_t other = 0; other < slot; ++other) {
      if (grads[other].table == g.table) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": table ", tables_[g.table].name,
                         " given twice (a push holds a key once)"));
      }
    }
    layout[slot] = Place(tables_[g.table], g.keys);
  }
  SparseShardMessages messages(num_shards_);
  const size_t max_bytes = static_cast<size_t>(max_request_bytes_);
  for (int s = 0; s < num_shards_; ++s) {
    std::vector<std::pair<SparseRowsOut, SparseMessage::Part>> pieces;
    std::vector<size_t> sizes;
    for (size_t slot = 0; slot < grads.size(); ++slot) {
      const SparseLayout::ShardPart& part = layout[slot][s];
      if (part.positions.empty()) continue;
      const SparseTable& t = tables_[grads[slot].table];
      SparseRowsOut all;
      all.table = grads[slot].table;
      all.dtype = t.dtype;
      all.num_rows = static_cast<int64_t>(part.positions.size());
      all.dim = t.dim;
      all.keys = KeysSlice(grads[slot].keys, part);
      all.rows = RowsSlice(grads[slot].grads, t.dim, t.dtype, part);
      // A row that does not fit alone goes alone.
      const size_t one = SparseRowsWireSize(1, t.dim, t.dtype, true, true);
      PS_ASSIGN_OR_RETURN(std::vector<SparseRowsOut> split,
                          SplitSparseRows(all, std::max(max_bytes, one)));
      int64_t from = 0;
      for (SparseRowsOut& piece : split) {
        const int64_t to = from + piece.num_rows;
        sizes.push_back(
            SparseRowsWireSize(piece.num_rows, t.dim, t.dtype, true, true));
        pieces.push_back(
            {std::move(piece),
             SparseMessage::Part{static_cast<int>(slot), from, to}});
        from = to;
      }
    }
    Pack(std::move(pieces), sizes, max_bytes, &messages[s]);
  }
  return messages;
}

std::unique_ptr<Message> SparseCodec::PullMessage(
    const std::shared_ptr<TicketState>& ticket, int shard,
    SparseMessage message, int64_t clock, int64_t min_version,
    std::shared_ptr<const SparsePullTarget> target) const {
  return std::make_unique<PullMessageImpl>(
      PullHeader(shard, clock, min_version), std::move(message),
      std::move(target), ticket, this, shard);
}

std::unique_ptr<Message> SparseCodec::PushMessage(
    const std::shared_ptr<TicketState>& end, int shard, SparseMessage message,
    int64_t clock, int64_t base_version, ThenPull then,
    CallEngine* engine) const {
  PushRequest header =
      session_->PushHeader(shard, clock, base_version, /*end_of_step=*/false);
  if (then.pull != nullptr) {
    // The keys of a then_pull travel inside the nested message, copied:
    // 8 bytes a row against the rows' dim x 2 or 4 that come back.
    PullRequest* ask = header.mutable_then_pull();
    *ask = PullHeader(shard, then.clock, then.min_version);
    ask->clear_job_id();  // taken from the push
    ask->clear_worker_id();
    for (const SparseRowsOut& r : then.ask.sparse) {
      SparseRows* rows = ask->add_sparse();
      rows->set_table(r.table);
      rows->set_dtype(r.dtype);
      rows->set_num_rows(r.num_rows);
      rows->set_dim(r.dim);
      rows->set_keys(reinterpret_cast<const char*>(r.keys.begin()),
                     r.keys.size());
    }
  }
  return std::make_unique<PushMessageImpl>(
      std::move(header), std::move(message), end, std::move(then), this, shard,
      engine);
}

absl::Status SparseCodec::StoreRows(
    const SparsePullTarget& target, int shard, const SparseMessage::Part& part,
    const SparseRowsView& answer,
    absl::Span<const absl::string_view> segments) const {
  const SparsePull& pull = target.pulls[part.slot];
  const SparseTable& t = tables_[pull.table];
  const int64_t n = part.to - part.from;
  const DType dtype = Known(answer.dtype);
  const size_t elem = static_cast<size_t>(DTypeSize(dtype));
  const size_t d = static_cast<size_t>(t.dim);
  const size_t row_bytes = d * elem;
  size_t total = 0;
  for (absl::string_view seg : segments) total += seg.size();
  if (answer.table != pull.table || answer.num_rows != n ||
      (n > 0 && answer.dim != t.dim) || elem == 0 ||
      total != static_cast<size_t>(n) * row_bytes) {
    return absl::InternalError(
        absl::StrCat("shard ", shard, " answered table ", answer.table,
                     " with ", answer.num_rows, " rows of dim ", answer.dim,
                     " (", total, " bytes); asked for ", n, " rows of table ",
                     t.name, " (dim ", t.dim, ")"));
  }
  const SparseLayout::ShardPart& where = target.layout.parts[part.slot][shard];
  const int32_t* pos = where.positions.data() + part.from;
  float* const base = pull.rows.data();
  if (elem == 4 && where.contiguous) {
    // One memcpy per received segment, straight into the caller's rows.
    char* dst = reinterpret_cast<char*>(base + static_cast<size_t>(pos[0]) * d);
    for (absl::string_view seg : segments) {
      std::memcpy(dst, seg.data(), seg.size());
      dst += seg.size();
    }
    return absl::OkStatus();
  }
  // Row by row; a row that straddles segments is joined first.
  std::string joined;
  size_t seg = 0, off = 0;
  for (int64_t k = 0; k < n; ++k) {
    while (seg < segments.size() && off == segments[seg].size()) {
      ++seg;
      off = 0;
    }
    absl::string_view src;
    if (segments[seg].size() - off >= row_bytes) {
      src = segments[seg].substr(off, row_bytes);
      off += row_bytes;
    } else {
      joined.clear();
      while (joined.size() < row_bytes) {
        if (off == segments[seg].size()) {
          ++seg;
          off = 0;
          continue;
        }
        const size_t take =
            std::min(row_bytes - joined.size(), segments[seg].size() - off);
        joined.append(segments[seg].data() + off, take);
        off += take;
      }
      src = joined;
    }
    float* dst = base + static_cast<size_t>(pos[k]) * d;
    if (elem == 4) {
      std::memcpy(dst, src.data(), row_bytes);
    } else {
      PS_RETURN_IF_ERROR(WidenToFloat(dtype, src, absl::MakeSpan(dst, d)));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps::client
