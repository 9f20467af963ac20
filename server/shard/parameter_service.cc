#include "server/shard/parameter_service.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/status.h"
#include "common/wire/payload_codec.h"
#include "common/wire/sparse_rows.h"
#include "proto/parameter_service.grpc.pb.h"

namespace ps::server {
namespace {

// Threads draining a queue of tasks that may block (waiting pulls): starts
// with `threads` and adds one whenever a task finds none idle, up to
// `max_threads`, so that tasks blocked on one another's progress (a slow
// worker's pull queued behind pulls waiting for that worker) do not wait for
// a timeout. Stop runs what is queued, then joins.
class WaitPool {
 public:
  WaitPool(int threads, int max_threads)
      : max_threads_(std::max(threads, max_threads)) {
    absl::MutexLock l(&mu_);
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] { Run(); });
    }
  }
  ~WaitPool() { Stop(); }
  void Submit(std::function<void()> task) {
    absl::MutexLock l(&mu_);
    tasks_.push_back(std::move(task));
    if (!stopping_ && idle_ < static_cast<int>(tasks_.size()) &&
        static_cast<int>(threads_.size()) < max_threads_) {
      threads_.emplace_back([this] { Run(); });
    }
  }
  void Stop() {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    // No thread is added once stopping_ is set.
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock l(&mu_);
        ++idle_;
        mu_.Await(absl::Condition(
            +[](WaitPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return p->stopping_ || !p->tasks_.empty();
            },
            this));
        --idle_;
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  const int max_threads_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Added to under mu_ until stopping_; joined by Stop after that.
  std::vector<std::thread> threads_;
};

using ServiceBase = ParameterService::WithRawCallbackMethod_Push<
    ParameterService::WithRawCallbackMethod_Pull<ParameterService::Service>>;

class ServiceImpl final : public ServiceBase, public ParameterServiceAdapter {
 public:
  ServiceImpl(ShardStore* store, const ParameterServiceOptions& options)
      : store_(store),
        options_(options),
        pull_pool_(options.wait_threads, options.max_wait_threads),
        push_pool_(std::max(2, options.wait_threads / 4),
                   std::max(2, options.max_wait_threads / 4)) {}
  ~ServiceImpl() override { Stop(); }

  grpc::Service* service() override { return this; }
  void Stop() override {
    pull_pool_.Stop();
    push_pool_.Stop();
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;

  grpc::Status SetupJob(grpc::ServerContext* context,
                        const SetupJobRequest* request,
                        SetupJobResponse* response) override {
    return Serve(
        *context, [&] { return store_->SetupJob(*request); }, response);
  }
  grpc::Status TeardownJob(grpc::ServerContext* context,
                           const TeardownJobRequest* request,
                           TeardownJobResponse*) override {
    if (absl::Status s = CheckToken(*context, options_.token); !s.ok()) {
      return ToGrpcStatus(s);
    }
    return ToGrpcStatus(store_->TeardownJob(*request));
  }
  grpc::Status UpdateMembership(grpc::ServerContext* context,
                                const UpdateMembershipRequest* request,
                                UpdateMembershipResponse* response) override {
    return Serve(
        *context, [&] { return store_->UpdateMembership(*request); }, response);
  }
  grpc::Status Checkpoint(grpc::ServerContext* context,
                          const CheckpointRequest* request,
                          CheckpointResponse* response) override {
    return Serve(
        *context, [&] { return store_->Checkpoint(request->job_id()); },
        response);
  }
  grpc::Status GetShardStatus(grpc::ServerContext* context,
                              const GetShardStatusRequest* request,
                              ShardStatus* response) override {
    return Serve(
        *context,
        [&] {
          return store_->GetShardStatus(
              request->job_id(), request->has_shard() ? request->shard() : -1);
        },
        response);
  }
  grpc::Status Replicate(grpc::ServerContext* context,
                         const ReplicateRequest* request,
                         ReplicateResponse* response) override {
    return Serve(
        *context, [&] { return store_->Replicate(*request); }, response);
  }

 private:
  // Token check, then the core call, then its result or converted status.
  template <typename Response, typename Fn>
  grpc::Status Serve(const grpc::ServerContextBase& context, Fn call,
                     Response* response) {
    if (absl::Status s = CheckToken(context, options_.token); !s.ok()) {
      return ToGrpcStatus(s);
    }
    absl::StatusOr<Response> result = call();
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }

  // How long the core may wait: the client's deadline less a margin (so the
  // client reads the core's explanation rather than its own timeout), capped.
  absl::Time WaitDeadline(const grpc::CallbackServerContext& context) const {
    const absl::Time client = absl::FromChrono(context.deadline());
    return std::min(client - absl::Milliseconds(50),
                    absl::Now() + options_.max_wait);
  }

  // Pulls `request` (job and worker already set) into `chunks`: fp32 weights
  // without a copy, other dtypes narrowed; and the rows of `sparse` (the
  // request's sparse keys) into `rows`, written by the tables straight into
  // the answer's slices. after_seq: PullArgs::after_seq.
  absl::StatusOr<PullResult> PullChunks(
      const PullRequest& request, DType dtype, absl::Time deadline,
      const std::vector<SparseRowsView>& sparse, std::vector<ChunkOut>* chunks,
      std::vector<SparseRowsOut>* rows, uint64_t after_seq = 0,
      bool whole_step = false);
  // Runs `run` (a pull that fills the response) at once if it need not wait,
  // else on the pull pool with `deadline`; then finishes the call.
  void FinishWithPull(std::function<absl::Status(absl::Time deadline)> run,
                      grpc::ServerUnaryReactor* reactor, absl::Time deadline);

  ShardStore* const store_;
  const ParameterServiceOptions options_;
  // Separate pools: pulls waiting for a step must never hold up the end of
  // step that closes it.
  WaitPool pull_pool_;
  WaitPool push_pool_;
};

// A decoded push that may outlive the callback (when handed to the pool).
// The payloads stay in the received slices: a chunk split over several of
// them is passed to the core as segments, never gathered into one buffer.
struct PushCall {
  PushRequest header;
  std::vector<PushChunk> chunks;
  std::vector<grpc::Slice> slices;
  // Sparse rows: keys and rows in the slices, or in the copies below when
  // the decoder gathered them (keys straddling slices or unaligned, rows
  // over several slices).
  std::vector<SparseRowsView> sparse;
  std::vector<uint64_t> key_scratch;
  std::deque<std::vector<uint64_t>> key_copies;
  // Copies of rows over several slices, and of chunk indices.
  std::deque<std::string> row_copies;
  // then_pull's sparse keys, copied out of its protobuf fields (aligned).
  std::vector<SparseRowsView> pull_sparse;
};

// A decoded pull that may outlive the callback.
struct PullCall {
  PullRequest header;
  DecodedMessage decoded;
};

absl::StatusOr<DType> PullDType(const PullRequest& request) {
  const DType dtype =
      request.dtype() == DTYPE_UNSPECIFIED ? FLOAT32 : request.dtype();
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pull: unsupported dtype ", static_cast<int>(dtype)));
  }
  return dtype;
}

absl::StatusOr<PullResult> ServiceImpl::PullChunks(
    const PullRequest& request, DType dtype, absl::Time deadline,
    const std::vector<SparseRowsView>& sparse, std::vector<ChunkOut>* chunks,
    std::vector<SparseRowsOut>* rows, uint64_t after_seq, bool whole_step) {
  PullArgs args;
  args.sparse = sparse;
  args.sparse_only = request.sparse_only();
  args.after_seq = after_seq;
  args.whole_step = whole_step;
  args.version_only = request.version_only();
  args.job_id = request.job_id();
  args.shard = request.has_shard() ? request.shard() : -1;
  args.worker_id = request.worker_id();
  args.clock = request.clock();
  args.min_version = request.min_version();
  args.chunk_ids.assign(request.chunk_ids().begin(), request.chunk_ids().end());
  chunks->clear();
  const int size = DTypeSize(dtype);
  auto sink = [&](const Chunk& c, absl::Span<const float> w,
                  const WeightsRef& ref) {
    grpc::Slice slice;
    if (size == 4) {
      // The published weights themselves: immutable while referenced.
      slice =
          ShareSlice(absl::string_view(reinterpret_cast<const char*>(w.data()),
                                       w.size() * sizeof(float)),
                     ref);
    } else {
      char* data = nullptr;
      slice = AllocateSlice(w.size() * size, &data);
      NarrowFromFloat(dtype, w, data);
    }
    chunks->push_back(
        {c.chunk_id, dtype, static_cast<int64_t>(w.size()), std::move(slice)});
  };
  rows->clear();
  auto row_sink = [&](size_t index, DType row_dtype, int32_t dim,
                      int64_t num_rows) {
    SparseRowsOut out;
    out.table = sparse[index].table;
    out.dtype = row_dtype;
    out.num_rows = num_rows;
    out.dim = dim;
    char* data = nullptr;
    out.rows = AllocateSlice(
        static_cast<size_t>(num_rows) * dim * DTypeSize(row_dtype), &data);
    rows->push_back(std::move(out));
    return data;
  };
  const SparseSink row_sink_ref = row_sink;
  absl::StatusOr<PullResult> r =
      store_->PullWithRows(args, deadline, sink, &row_sink_ref);
  if (!r.ok()) return r.status();
  size_t bytes = 0;
  for (const ChunkOut& c : *chunks) bytes += c.data.size() + 32;
  for (const SparseRowsOut& o : *rows) {
    bytes += o.rows.size() + kSparseRowsOverhead;
  }
  if (bytes > static_cast<size_t>(options_.max_message_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Pull of ", chunks->size(), " chunks and ", rows->size(),
        " sparse row sets (", bytes,
        " bytes) exceeds the server's max message size of ",
        options_.max_message_bytes, " bytes; pull fewer chunks per call"));
  }
  return r;
}

void ServiceImpl::FinishWithPull(
    std::function<absl::Status(absl::Time deadline)> run,
    grpc::ServerUnaryReactor* reactor, absl::Time deadline) {
  // First without waiting, on this thread; only a pull that must wait goes
  // to the pool.
  absl::Status s = run(absl::InfinitePast());
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    pull_pool_.Submit([run = std::move(run), reactor, deadline] {
      reactor->Finish(ToGrpcStatus(run(deadline)));
    });
    return;
  }
  reactor->Finish(ToGrpcStatus(s));
}

grpc::ServerUnaryReactor* ServiceImpl::Push(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status s = CheckToken(*context, options_.token); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  auto call = std::make_shared<PushCall>();
  PayloadHandlers handlers;
  handlers.on_chunk = [&](const ChunkView& v,
                          absl::Span<const absl::string_view> segs) {
    PushChunk c;
    c.chunk_id = v.chunk_id;
    c.dtype = v.dtype == DTYPE_UNSPECIFIED ? FLOAT32 : v.dtype;
    c.num_elements = v.num_elements;
    if (segs.size() == 1) {
      c.data = segs[0];
    } else {
      c.segments.assign(segs.begin(), segs.end());
    }
    if (!v.indices.empty()) {
      // Indices may be the decoder's scratch, valid during this call only;
      // 4 bytes per value sent, copied (the values are not).
      c.indices = call->row_copies.emplace_back(v.indices);
    }
    call->chunks.push_back(std::move(c));
    return absl::OkStatus();
  };
  handlers.on_sparse = [&](const SparseRowsView& v,
                           absl::Span<const absl::string_view> segs) {
    SparseRowsView kept = v;
    const uint64_t* scratch = call->key_scratch.data();
    if (!v.keys.empty() && v.keys.data() >= scratch &&
        v.keys.data() < scratch + call->key_scratch.size()) {
      // Keys copied by the decoder are valid during this call only.
      kept.keys = call->key_copies.emplace_back(v.keys.begin(), v.keys.end());
    }
    if (v.rows.data() == nullptr && !segs.empty()) {
      std::string& rows = call->row_copies.emplace_back();
      for (absl::string_view seg : segs) rows.append(seg.data(), seg.size());
      kept.rows = rows;
    }
    call->sparse.push_back(kept);
    return absl::OkStatus();
  };
  if (absl::Status s =
          DecodeSegmented(*request, kPushRequestFields, &call->header,
                          &call->slices, &call->key_scratch, handlers);
      !s.ok()) {
    reactor->Finish(ToGrpcStatus(Annotate(s, "Push")));
    return reactor;
  }
  DType pull_dtype = FLOAT32;
  if (call->header.has_then_pull()) {
    absl::StatusOr<DType> d = PullDType(call->header.then_pull());
    if (!d.ok()) {
      reactor->Finish(ToGrpcStatus(Annotate(d.status(), "Push then pull")));
      return reactor;
    }
    pull_dtype = *d;
    // The pull is the pushing worker's, in the pushed job.
    call->header.mutable_then_pull()->set_job_id(call->header.job_id());
    call->header.mutable_then_pull()->set_worker_id(call->header.worker_id());
    if (call->header.has_shard()) {
      call->header.mutable_then_pull()->set_shard(call->header.shard());
    }
    call->pull_sparse =
        ViewsOfSparseRows(call->header.then_pull().sparse(), &call->key_copies);
  }
  const absl::Time deadline = WaitDeadline(*context);
  auto run = [this, call, reactor, response, deadline, pull_dtype] {
    PushArgs args;
    args.job_id = call->header.job_id();
    args.shard = call->header.has_shard() ? call->header.shard() : -1;
    args.worker_id = call->header.worker_id();
    args.seq = call->header.seq();
    args.clock = call->header.clock();
    args.base_version = call->header.base_version();
    args.end_of_step = call->header.end_of_step();
    args.chunks_final = call->header.chunks_final();
    args.chunks = std::move(call->chunks);
    args.sparse = std::move(call->sparse);
    absl::StatusOr<PushResult> r = store_->Push(args, deadline);
    call->slices.clear();
    call->row_copies.clear();
    if (!r.ok()) {
      reactor->Finish(ToGrpcStatus(r.status()));
      return;
    }
    auto out = std::make_shared<PushResponse>();
    out->set_version(r->version);
    out->set_duplicate(r->duplicate);
    out->set_dropped(r->dropped);
    if (!call->header.has_then_pull()) {
      grpc::Slice slice(out->SerializeAsString());
      *response = grpc::ByteBuffer(&slice, 1);
      reactor->Finish(grpc::Status::OK);
      return;
    }
    FinishWithPull(
        [this, call, out, response, pull_dtype](absl::Time wait_until) {
          std::vector<ChunkOut> chunks;
          std::vector<SparseRowsOut> rows;
          // The answer must include this step's earlier pushes, which
          // other streams may still be delivering.
          PS_ASSIGN_OR_RETURN(
              PullResult p,
              PullChunks(call->header.then_pull(), pull_dtype, wait_until,
                         call->pull_sparse, &chunks, &rows, call->header.seq(),
                         call->header.end_of_step()));
          out->set_pulled(true);
          out->set_pulled_version(p.version);
          out->set_pulled_min_clock(p.min_clock);
          *response = EncodeMessage(*out, kPushResponseFields, chunks, rows);
          return absl::OkStatus();
        },
        reactor, deadline);
  };
  // Only a BSP end of step can wait (for the worker's earlier pushes).
  PushArgs probe;
  probe.job_id = call->header.job_id();
  probe.shard = call->header.has_shard() ? call->header.shard() : -1;
  probe.worker_id = call->header.worker_id();
  probe.seq = call->header.seq();
  probe.end_of_step = call->header.end_of_step();
  if (store_->PushMayWait(probe)) {
    push_pool_.Submit(std::move(run));
  } else {
    run();
  }
  return reactor;
}

grpc::ServerUnaryReactor* ServiceImpl::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status s = CheckToken(*context, options_.token); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  auto call = std::make_shared<PullCall>();
  if (absl::Status s = DecodeMessage(*request, kPullRequestFields,
                                     &call->header, &call->decoded);
      !s.ok()) {
    reactor->Finish(ToGrpcStatus(Annotate(s, "Pull: malformed PullRequest")));
    return reactor;
  }
  absl::StatusOr<DType> dtype = PullDType(call->header);
  if (!dtype.ok()) {
    reactor->Finish(ToGrpcStatus(dtype.status()));
    return reactor;
  }
  FinishWithPull(
      [this, call, response, dtype = *dtype](absl::Time deadline) {
        std::vector<ChunkOut> chunks;
        std::vector<SparseRowsOut> rows;
        PS_ASSIGN_OR_RETURN(PullResult r,
                            PullChunks(call->header, dtype, deadline,
                                       call->decoded.sparse, &chunks, &rows));
        PullResponse header;
        header.set_version(r.version);
        header.set_min_clock(r.min_clock);
        *response = EncodeMessage(header, kPullResponseFields, chunks, rows);
        return absl::OkStatus();
      },
      reactor, WaitDeadline(*context));
  return reactor;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServiceAdapter>>
ParameterServiceAdapter::Create(ShardStore* store,
                                const ParameterServiceOptions& options) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("ParameterService needs a shard store");
  }
  if (options.wait_threads < 1 ||
      options.max_wait_threads < options.wait_threads) {
    return absl::InvalidArgumentError(
        "wait_threads must be >= 1 and max_wait_threads >= wait_threads");
  }
  return std::make_unique<ServiceImpl>(store, options);
}

}  // namespace ps::server
