#include "worker/client/fake_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::client {

int64_t FakeRequest::payload_bytes() const {
  int64_t n = 0;
  for (const FakeChunk& c : chunks) n += static_cast<int64_t>(c.data.size());
  return n;
}

bool FakeRequest::names_its_shard() const {
  auto names = [this](const PullRequest& r) {
    return r.has_shard() && r.shard() == shard;
  };
  if (rpc == Rpc::kPull) return names(pull);
  return push.has_shard() && push.shard() == shard &&
         (!push.has_then_pull() || names(push.then_pull()));
}

class FakeTransport::FakeAttempt final : public Transport::Attempt {
 public:
  explicit FakeAttempt(FakeTransport* transport) : transport_(transport) {}
  void Cancel() override { transport_->CancelAttempt(this); }

  // Under transport_->mu_.
  bool cancelled = false;

 private:
  FakeTransport* const transport_;
};

class FakeTransport::FakeTimer final : public Transport::Timer {
 public:
  explicit FakeTimer(FakeTransport* transport) : transport_(transport) {}
  void Cancel() override { transport_->CancelTimer(this); }

 private:
  FakeTransport* const transport_;
};

FakeTransport::FakeTransport(int num_shards) : num_shards_(num_shards) {
  absl::MutexLock l(&mu_);
  for (int s = 0; s < num_shards; ++s) {
    addresses_.push_back(absl::StrCat("fake-shard-", s));
  }
}

FakeTransport::~FakeTransport() {
  absl::MutexLock l(&mu_);
  EXPECT_TRUE(waiting_.empty()) << waiting_.size() << " attempts unanswered";
}

namespace {

// The fake's chunks as the codec's, each in a slice of its own.
std::vector<ChunkOut> ChunksOut(const std::vector<FakeChunk>& chunks) {
  std::vector<ChunkOut> out;
  for (const FakeChunk& c : chunks) {
    ChunkOut o;
    o.chunk_id = c.chunk_id;
    o.dtype = c.dtype;
    o.num_elements = c.num_elements;
    char* data = nullptr;
    o.data = AllocateSlice(c.data.size(), &data);
    std::copy(c.data.begin(), c.data.end(), data);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

grpc::ByteBuffer FakeTransport::Encode(
    const google::protobuf::MessageLite& header, int chunks_field,
    const std::vector<FakeChunk>& chunks) {
  return EncodeWithPayloads(header, chunks_field, ChunksOut(chunks));
}

grpc::ByteBuffer FakeTransport::EncodeSparse(
    const google::protobuf::MessageLite& header, PayloadFields fields,
    const std::vector<FakeSparse>& sparse,
    const std::vector<FakeChunk>& chunks) {
  std::vector<ChunkOut> chunks_out = ChunksOut(chunks);
  std::vector<SparseRowsOut> out;
  for (const FakeSparse& f : sparse) {
    SparseRowsOut o;
    o.table = f.table;
    o.dtype = f.dtype;
    o.num_rows = f.num_rows;
    o.dim = f.dim;
    char* data = nullptr;
    if (!f.keys.empty()) {
      o.keys = AllocateSlice(8 * f.keys.size(), &data);
      std::memcpy(data, f.keys.data(), 8 * f.keys.size());
    }
    if (!f.rows.empty()) {
      o.rows = AllocateSlice(f.rows.size(), &data);
      std::memcpy(data, f.rows.data(), f.rows.size());
    }
    out.push_back(std::move(o));
  }
  return EncodeMessage(
      header, chunks.empty() ? PayloadFields{0, fields.sparse} : fields,
      chunks_out, out);
}

bool FakeTransport::WaitForAttempts(size_t n, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return waiting_.size() >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

std::vector<FakeRequest> FakeTransport::Waiting() const {
  absl::MutexLock l(&mu_);
  std::vector<FakeRequest> out;
  for (const Pending& p : waiting_) out.push_back(p.request);
  return out;
}

bool FakeTransport::AnswerOldest(
    const std::function<FakeReply(const FakeRequest&)>& reply,
    FakeRequest* request) {
  Pending p;
  {
    absl::MutexLock l(&mu_);
    if (waiting_.empty()) return false;
    p = std::move(waiting_.front());
    waiting_.pop_front();
  }
  FakeReply r = reply(p.request);
  if (r.status.ok()) *p.response = std::move(r.response);
  p.listener->AttemptDone(r.status);
  *request = std::move(p.request);
  return true;
}

FakeRequest FakeTransport::Answer(
    const std::function<FakeReply(const FakeRequest&)>& reply) {
  FakeRequest request;
  if (!AnswerOldest(reply, &request)) {
    ADD_FAILURE() << "no attempt waits for an answer";
  }
  return request;
}

int FakeTransport::AnswerAll(
    const std::function<FakeReply(const FakeRequest&)>& reply) {
  int n = 0;
  FakeRequest request;
  while (AnswerOldest(reply, &request)) ++n;
  return n;
}

std::vector<absl::Time> FakeTransport::PendingTimers() const {
  absl::MutexLock l(&mu_);
  std::vector<absl::Time> out;
  for (const PendingTimer& t : timers_) out.push_back(t.when);
  return out;
}

int FakeTransport::FireTimers() {
  std::deque<PendingTimer> fire;
  {
    absl::MutexLock l(&mu_);
    fire.swap(timers_);
  }
  for (PendingTimer& t : fire) {
    std::shared_ptr<Listener> listener = std::move(t.listener);
    listener->TimerFired();
  }
  return static_cast<int>(fire.size());
}

int FakeTransport::started() const {
  absl::MutexLock l(&mu_);
  return started_;
}

int FakeTransport::cancelled() const {
  absl::MutexLock l(&mu_);
  return cancelled_;
}

std::string FakeTransport::address(int shard) const {
  absl::MutexLock l(&mu_);
  return addresses_[shard];
}

absl::Status FakeTransport::SetAddresses(
    const std::vector<std::string>& addresses) {
  if (static_cast<int>(addresses.size()) != num_shards_) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake transport: ", addresses.size(), " addresses for ",
                     num_shards_, " shards"));
  }
  for (const std::string& a : addresses) {
    if (a.empty()) return absl::InvalidArgumentError("fake transport: empty");
  }
  absl::MutexLock l(&mu_);
  addresses_ = addresses;
  return absl::OkStatus();
}

std::shared_ptr<Transport::Attempt> FakeTransport::NewAttempt() {
  return std::make_shared<FakeAttempt>(this);
}

void FakeTransport::Start(Attempt& attempt, int shard, Rpc rpc,
                          const grpc::ByteBuffer* request,
                          grpc::ByteBuffer* response,
                          std::shared_ptr<Listener> listener) {
  Pending p;
  p.attempt = static_cast<FakeAttempt*>(&attempt);
  p.request.shard = shard;
  p.request.address = address(shard);
  p.request.rpc = rpc;
  p.response = response;
  p.listener = std::move(listener);
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(request->Dump(&slices).ok());
  for (const grpc::Slice& s : slices) {
    p.request.slices.emplace_back(reinterpret_cast<const char*>(s.begin()),
                                  s.size());
  }
  DecodedMessage decoded;
  absl::Status s = rpc == Rpc::kPush
                       ? DecodeMessage(*request, kPushRequestFields,
                                       &p.request.push, &decoded)
                       : DecodeMessage(*request, kPullRequestFields,
                                       &p.request.pull, &decoded);
  EXPECT_TRUE(s.ok()) << s;
  for (const ChunkView& v : decoded.chunks) {
    p.request.chunks.push_back({v.chunk_id, v.dtype, v.num_elements,
                                std::string(v.data), std::string(v.indices)});
  }
  for (const SparseRowsView& v : decoded.sparse) {
    p.request.sparse.push_back(
        {v.table, v.dtype, v.num_rows, v.dim,
         std::vector<uint64_t>(v.keys.begin(), v.keys.end()),
         std::string(v.rows)});
  }
  std::shared_ptr<Listener> cancelled;
  {
    absl::MutexLock l(&mu_);
    ++started_;
    if (p.attempt->cancelled) {
      ++cancelled_;
      cancelled = std::move(p.listener);
    } else {
      waiting_.push_back(std::move(p));
    }
  }
  if (cancelled != nullptr) {
    cancelled->AttemptDone(absl::CancelledError("cancelled before it started"));
  }
}

std::shared_ptr<Transport::Timer> FakeTransport::StartTimer(
    absl::Time when, std::shared_ptr<Listener> listener) {
  auto timer = std::make_shared<FakeTimer>(this);
  absl::MutexLock l(&mu_);
  timers_.push_back({timer.get(), when, std::move(listener)});
  return timer;
}

void FakeTransport::set_cancel_status(absl::Status status) {
  absl::MutexLock l(&mu_);
  cancel_status_ = std::move(status);
}

void FakeTransport::CancelAttempt(FakeAttempt* attempt) {
  std::shared_ptr<Listener> listener;
  absl::Status status;
  {
    absl::MutexLock l(&mu_);
    attempt->cancelled = true;
    auto it =
        std::find_if(waiting_.begin(), waiting_.end(),
                     [&](const Pending& p) { return p.attempt == attempt; });
    if (it == waiting_.end()) return;  // not started yet, or answered
    ++cancelled_;
    listener = std::move(it->listener);
    waiting_.erase(it);
    status = cancel_status_;
  }
  listener->AttemptDone(status);
}

void FakeTransport::CancelTimer(FakeTimer* timer) {
  std::shared_ptr<Listener> listener;
  {
    absl::MutexLock l(&mu_);
    auto it =
        std::find_if(timers_.begin(), timers_.end(),
                     [&](const PendingTimer& t) { return t.timer == timer; });
    if (it == timers_.end()) return;  // fired already
    listener = std::move(it->listener);
    timers_.erase(it);
  }
  listener->TimerFired();
}

}  // namespace ps::client
