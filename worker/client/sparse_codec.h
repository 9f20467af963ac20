// The sparse tables of one job on the wire, as one worker's client sends
// them: each table's keys grouped by shard (common/wire/key_placement.h), cut
// into messages of bounded size (common/wire/sparse_rows.h, SplitSparseRows),
// and the Messages (call_engine.h) that carry them: a Pull of keys whose
// answer's rows are written straight into the caller's row buffers, and a
// Push of row gradients whose then_pull may ask back the next batch's rows.
//
// Zero-copy where the layout allows it: when a table's keys come grouped by
// shard (KeyDeduplicator::DeduplicateByShard), each shard's keys, and with
// an fp32 table its gradients, are slices of the caller's memory, and its
// answered fp32 rows land with one memcpy per received segment. Otherwise
// keys and gradients are gathered (and narrowed to the table's dtype) into
// one buffer per shard, and rows scattered to their positions.
//
// Thread-safe: const after construction (the Session it uses is
// thread-safe).
#ifndef PS_WORKER_CLIENT_SPARSE_CODEC_H_
#define PS_WORKER_CLIENT_SPARSE_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/wire/payload_codec.h"
#include "proto/config.pb.h"
#include "worker/client/call_engine.h"
#include "worker/client/parameter_client.h"
#include "worker/client/session.h"
#include "worker/client/ticket.h"

namespace ps::client {

// What the codec needs of a table.
struct SparseTable {
  std::string name;
  int32_t dim = 0;
  DType dtype = FLOAT32;
  uint64_t salt = 0;  // TableSalt(name)
};

// Where one call's keys went: per entry of the caller's vector (a slot),
// per shard, the positions of the slot's keys that the shard holds
// (ascending), and whether they are one contiguous run.
struct SparseLayout {
  struct ShardPart {
    std::vector<int32_t> positions;
    bool contiguous = true;
  };
  std::vector<std::vector<ShardPart>> parts;  // [slot][shard]
};

// The rows a pull writes into: the caller's buffers and where each
// shard's keys sit in them. Shared by the call's messages.
struct SparsePullTarget {
  std::vector<SparsePull> pulls;
  SparseLayout layout;
};

// One message's share of a call: SparseRows records and, for each, the
// slot and the range [from, to) of its shard's positions it covers.
struct SparseMessage {
  struct Part {
    int slot = 0;
    int64_t from = 0;
    int64_t to = 0;
  };
  std::vector<SparseRowsOut> sparse;
  std::vector<Part> parts;
};
// Per shard, its messages.
using SparseShardMessages = std::vector<std::vector<SparseMessage>>;

// A planned pull: the target the answers are written into and the keys'
// messages.
struct SparsePullPlan {
  std::shared_ptr<const SparsePullTarget> target;
  SparseShardMessages messages;
};

class SparseCodec {
 public:
  SparseCodec(const std::vector<SparseTableSpec>& tables, int num_shards,
              int64_t max_request_bytes, Session* session);

  int num_tables() const { return static_cast<int>(tables_.size()); }

  // The messages of a pull of `pulls`, each with at most max_request_bytes
  // of rows in its answer. INVALID_ARGUMENT naming `what` for an unknown
  // table or a row buffer of the wrong size.
  absl::StatusOr<SparsePullPlan> PlanPull(absl::string_view what,
                                          std::vector<SparsePull> pulls) const;
  // The messages of a push of `grads`, each with at most max_request_bytes
  // of keys and rows; gradients are borrowed or narrowed as the header
  // says. INVALID_ARGUMENT as PlanPull, and for a table given twice.
  absl::StatusOr<SparseShardMessages> PlanPush(
      absl::string_view what, const std::vector<SparsePush>& grads) const;

  // The Pull of `message`'s keys from `shard`; its answer's rows go into
  // `target`, its version and min clock lower `ticket`'s.
  std::unique_ptr<Message> PullMessage(
      const std::shared_ptr<TicketState>& ticket, int shard,
      SparseMessage message, int64_t clock, int64_t min_version,
      std::shared_ptr<const SparsePullTarget> target) const;

  // A Push of `message`'s gradients to `shard`, taking its next sequence
  // number now; its answer is recorded in `end`. With `pull` set, its
  // then_pull asks for `ask`'s keys (a message of the pull plan), whose rows
  // go into `target` and complete one of `pull`'s messages; when the shard
  // answers a plain push, a Pull of them is sent through `engine` once it
  // has ended.
  struct ThenPull {
    std::shared_ptr<TicketState> pull;
    SparseMessage ask;
    int64_t clock = 0;
    int64_t min_version = 0;
    std::shared_ptr<const SparsePullTarget> target;
  };
  std::unique_ptr<Message> PushMessage(const std::shared_ptr<TicketState>& end,
                                       int shard, SparseMessage message,
                                       int64_t clock, int64_t base_version,
                                       ThenPull then, CallEngine* engine) const;

  // Writes the rows of `answer` (the record of `part` in an answer from
  // `shard`) into `target`. INTERNAL naming the shard when the answer does
  // not match what was asked.
  absl::Status StoreRows(const SparsePullTarget& target, int shard,
                         const SparseMessage::Part& part,
                         const SparseRowsView& answer,
                         absl::Span<const absl::string_view> segments) const;

 private:
  // Where `keys` go: per shard, their positions.
  std::vector<SparseLayout::ShardPart> Place(
      const SparseTable& table, absl::Span<const uint64_t> keys) const;
  absl::Status CheckTable(absl::string_view what, int table, size_t keys,
                          size_t floats) const;
  // The header of a pull from `shard` (no sparse records: they are the
  // message's).
  PullRequest PullHeader(int shard, int64_t clock, int64_t min_version) const;

  std::vector<SparseTable> tables_;
  const int num_shards_;
  const int64_t max_request_bytes_;
  Session* const session_;
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_SPARSE_CODEC_H_
