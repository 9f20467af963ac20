// A Transport for tests (testonly) that answers nothing by itself: the test
// sees each attempt (its shard, RPC and decoded request), answers it with a
// status and a response, and fires backoff timers, by hand. No sockets, no
// sleeps: what the engine does next happens inside Answer / FireTimers, on
// the test's thread.
//
// Thread-safe: attempts may start on any thread (the client's send thread);
// WaitForAttempts blocks, with a bound, until they have.
#ifndef PS_WORKER_CLIENT_FAKE_TRANSPORT_H_
#define PS_WORKER_CLIENT_FAKE_TRANSPORT_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/wire/payload_codec.h"
#include "proto/parameter_service.pb.h"
#include "worker/client/transport.h"

namespace ps::client {

// A payload of a request, copied out of it.
struct FakeChunk {
  int64_t chunk_id = 0;
  DType dtype = DTYPE_UNSPECIFIED;
  int64_t num_elements = 0;
  std::string data;
  std::string indices = {};  // a sparse update's (ChunkPayload.indices)
};

// Sparse rows of a request or an answer, copied out of it.
struct FakeSparse {
  int32_t table = 0;
  DType dtype = DTYPE_UNSPECIFIED;
  int64_t num_rows = 0;
  int32_t dim = 0;
  std::vector<uint64_t> keys;
  std::string rows;
};

// One attempt's request, decoded.
struct FakeRequest {
  int shard = 0;
  std::string address;  // the shard's when the attempt started
  Rpc rpc = Rpc::kPush;
  PushRequest push;  // rpc == kPush (without its chunks)
  PullRequest pull;  // rpc == kPull
  std::vector<FakeChunk> chunks;
  // PushRequest.sparse or PullRequest.sparse (then_pull's stay in `push`).
  std::vector<FakeSparse> sparse;
  // Where the request's slices lay when it was sent (addresses only, for
  // checking that payloads were sent from the caller's memory).
  std::vector<std::pair<const char*, size_t>> slices;
  int64_t payload_bytes() const;
  // Whether the request, and its then_pull, name the shard it was sent to
  // (PushRequest.shard, PullRequest.shard).
  bool names_its_shard() const;
};

struct FakeReply {
  absl::Status status;
  grpc::ByteBuffer response;  // when OK

  static FakeReply Error(absl::Status s) { return {std::move(s), {}}; }
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(int num_shards);
  ~FakeTransport() override;

  // Serializes `header` with `chunks` as its repeated payload field
  // `chunks_field` (0: none), as a server would answer.
  static grpc::ByteBuffer Encode(const google::protobuf::MessageLite& header,
                                 int chunks_field = 0,
                                 const std::vector<FakeChunk>& chunks = {});

  // Serializes `header` with `sparse` as its SparseRows field
  // (fields.sparse) and `chunks` as its ChunkPayload field (fields.chunks),
  // as a server would answer.
  static grpc::ByteBuffer EncodeSparse(
      const google::protobuf::MessageLite& header, PayloadFields fields,
      const std::vector<FakeSparse>& sparse,
      const std::vector<FakeChunk>& chunks = {});

  // Blocks until at least `n` attempts wait for an answer, at most
  // `timeout`; whether they do.
  bool WaitForAttempts(size_t n, absl::Duration timeout = absl::Seconds(10));
  // The requests of the attempts waiting for an answer, oldest first.
  std::vector<FakeRequest> Waiting() const;
  // Answers the oldest waiting attempt with what `reply` says for its
  // request (which is returned). The engine's reaction (a retry timer, a
  // follow-up attempt) happens before it returns. Fails the test when none
  // waits.
  FakeRequest Answer(const std::function<FakeReply(const FakeRequest&)>& reply);
  // Answers waiting attempts, and those they lead to, until none waits;
  // how many it answered.
  int AnswerAll(const std::function<FakeReply(const FakeRequest&)>& reply);

  // The times backoff timers were set for, still pending, in start order.
  std::vector<absl::Time> PendingTimers() const;
  // Fires every pending timer; how many.
  int FireTimers();

  // What a cancelled attempt that was waiting reports (CANCELLED by
  // default; gRPC may report another code for a call cancelled as it
  // fails).
  void set_cancel_status(absl::Status status);

  // Attempts started in all, and those that ended cancelled.
  int started() const;
  int cancelled() const;

  // Transport.
  int num_shards() const override { return num_shards_; }
  std::string address(int shard) const override;
  // Takes any non-empty addresses (INVALID_ARGUMENT as GrpcTransport).
  absl::Status SetAddresses(const std::vector<std::string>& addresses) override;
  std::shared_ptr<Attempt> NewAttempt() override;
  void Start(Attempt& attempt, int shard, Rpc rpc,
             const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
             std::shared_ptr<Listener> listener) override;
  std::shared_ptr<Timer> StartTimer(
      absl::Time when, std::shared_ptr<Listener> listener) override;

 private:
  class FakeAttempt;
  class FakeTimer;
  struct Pending {
    FakeAttempt* attempt;
    FakeRequest request;
    grpc::ByteBuffer* response;
    std::shared_ptr<Listener> listener;
  };
  struct PendingTimer {
    FakeTimer* timer;
    absl::Time when;
    std::shared_ptr<Listener> listener;
  };

  bool AnswerOldest(const std::function<FakeReply(const FakeRequest&)>& reply,
                    FakeRequest* request);
  void CancelAttempt(FakeAttempt* attempt);
  void CancelTimer(FakeTimer* timer);

  const int num_shards_;
  mutable absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> waiting_ ABSL_GUARDED_BY(mu_);
  std::deque<PendingTimer> timers_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status cancel_status_ ABSL_GUARDED_BY(mu_) =
      absl::CancelledError("cancelled");
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_FAKE_TRANSPORT_H_
