#include "tools/ps_bench_ceilings.h"

#include <arpa/inet.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/platform/rpc.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "server/shard/optimizer.h"
#include "server/shard/shard_store.h"
#include "tools/bench_worker.h"

namespace ps::bench {

namespace {

// --- Ceiling 1: TCP ping-pong ------------------------------------------

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= k;
  }
  return true;
}
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= k;
  }
  return true;
}

}  // namespace

// Round trips of `bytes` each way on one loopback connection; returns
// GB/s counting both directions and round trips per second.
std::pair<double, double> TcpPingPong(int64_t bytes, double seconds) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::listen(listener, 1);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread echo([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::vector<char> buf(bytes);
    while (ReadAll(fd, buf.data(), bytes) && WriteAll(fd, buf.data(), bytes)) {
    }
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<char> out(bytes, 1), in(bytes);
  int64_t trips = 0;
  WriteAll(fd, out.data(), bytes);
  ReadAll(fd, in.data(), bytes);
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds) || trips < 3) {
    if (!WriteAll(fd, out.data(), bytes) || !ReadAll(fd, in.data(), bytes))
      break;
    ++trips;
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  echo.join();
  ::close(listener);
  return {2.0 * bytes * trips / wall / 1e9, trips / wall};
}

// --- Ceiling 2: gRPC echoing raw ByteBuffer slices ----------------------

namespace {

class EchoService final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { StartRead(&buffer_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        StartWrite(&buffer_);  // echo the slices back, no copy
      }
      void OnWriteDone(bool) override { Finish(grpc::Status::OK); }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer buffer_;
    };
    return new Reactor();
  }
};

}  // namespace

// Moves `bytes` out and back per step, in pieces of at most `piece` bytes
// and at least one per connection, all in flight at once over
// `connections` channels.
std::pair<double, double> GrpcRawCeiling(int64_t bytes, int connections,
                                         int64_t piece, double seconds) {
  EchoService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(kDefaultMaxMessageBytes);
  builder.SetMaxSendMessageSize(kDefaultMaxMessageBytes);
  builder.RegisterCallbackGenericService(&service);
  auto server = builder.BuildAndStart();
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < connections; ++c) {
    ChannelOptions o;
    o.connection_id = c + 1;
    stubs.push_back(std::make_unique<grpc::GenericStub>(
        *MakeChannel(absl::StrCat("127.0.0.1:", port), o)));
  }
  std::vector<char> data(bytes, 7);
  std::vector<grpc::ByteBuffer> requests;
  // Cut as the client cuts a step (ParameterClientOptions::
  // pipeline_step_end): every connection carries a part, no part over
  // `piece`.
  piece = std::min(
      piece, std::max<int64_t>(1, (bytes + connections - 1) / connections));
  for (int64_t off = 0; off < bytes; off += piece) {
    grpc::Slice s = BorrowSlice(absl::string_view(
        data.data() + off, std::min<int64_t>(piece, bytes - off)));
    requests.emplace_back(&s, 1);
  }
  auto step = [&] {
    absl::Mutex mu;
    int pending = requests.size();
    std::vector<grpc::ByteBuffer> responses(requests.size());
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    for (size_t i = 0; i < requests.size(); ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      PrepareContext(contexts.back().get(), absl::Seconds(60), "");
      stubs[i % stubs.size()]->UnaryCall(
          contexts.back().get(), "/bench.Echo/Echo", grpc::StubOptions(),
          &requests[i], &responses[i], [&](grpc::Status) {
            absl::MutexLock l(&mu);
            --pending;
          });
    }
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](int* p) { return *p == 0; }, &pending));
  };
  step();
  int64_t steps = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds) || steps < 3) {
    step();
    ++steps;
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return {2.0 * bytes * steps / wall / 1e9, steps / wall};
}

// --- Server-side apply vs memcpy -----------------------------------------

namespace {

// Sets up job `job_id` (`spec`, one shard, worker 1) on `store`; a push
// of `g` to every chunk.
server::PushArgs SetUpDenseJob(server::ShardStore& store,
                               const std::string& job_id, const JobSpec& spec,
                               const std::vector<float>& g) {
  SetupJobRequest req;
  req.set_job_id(job_id);
  *req.mutable_spec() = spec;
  req.set_num_shards(1);
  req.add_worker_ids(1);
  (void)store.SetupJob(req);
  auto placement = *store.GetPlacement(job_id);
  server::PushArgs args;
  args.job_id = job_id;
  args.worker_id = 1;
  for (const Chunk& c : placement->chunks) {
    server::PushChunk pc;
    pc.chunk_id = c.chunk_id;
    pc.num_elements = c.num_elements;
    pc.data = absl::string_view(reinterpret_cast<const char*>(g.data()),
                                c.num_elements * 4);
    args.chunks.push_back(pc);
  }
  return args;
}

// GB/s of weights updated by a BSP step close (the end of step that closes
// it: summing the staged gradient, momentum update) with `threads` apply
// threads.
double StepCloseBandwidth(int64_t bytes, double seconds, int threads,
                          const std::vector<float>& g) {
  server::ShardStoreOptions options;
  options.apply_threads = threads;
  auto store = *server::ShardStore::Create(options);
  JobSpec spec = DenseBenchSpec(bytes, 1);
  spec.mutable_consistency()->set_model(ConsistencySpec::BSP);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_data()->set_max_steps(1000000);
  server::PushArgs push = SetUpDenseJob(*store, "close", spec, g);
  server::PushArgs end;
  end.job_id = push.job_id;
  end.worker_id = push.worker_id;
  end.end_of_step = true;
  uint64_t seq = 0;
  int64_t step = 0;
  absl::Duration closing;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds) || step < 4) {
    push.seq = ++seq;
    push.clock = end.clock = push.base_version = end.base_version = step;
    (void)store->Push(push, absl::InfiniteFuture());
    end.seq = ++seq;
    const absl::Time t = absl::Now();
    (void)store->Push(end, absl::InfiniteFuture());
    closing += absl::Now() - t;
    ++step;
  }
  return bytes * step / absl::ToDoubleSeconds(closing) / 1e9;
}

}  // namespace

ApplyResult ApplyBandwidth(int64_t bytes, double seconds) {
  const int64_t n = bytes / 4;
  std::vector<float> w(n, 1.0f), g(n, 1e-3f), dst(n);
  auto time_it = [&](auto&& fn) {
    fn();
    int64_t reps = 0;
    const absl::Time start = absl::Now();
    while (absl::Now() - start < absl::Seconds(seconds) || reps < 3) {
      fn();
      ++reps;
    }
    return bytes * reps / absl::ToDoubleSeconds(absl::Now() - start) / 1e9;
  };
  ApplyResult r;
  r.memcpy_gbps = time_it([&] { std::memcpy(dst.data(), g.data(), bytes); });
  OptimizerSpec sgd;
  sgd.set_kind(OptimizerSpec::SGD);
  sgd.set_learning_rate(1e-6f);
  auto opt = *server::Optimizer::Create(sgd);
  server::OptimizerSlots slots;
  r.sgd_gbps =
      time_it([&] { opt->Apply(1e-6f, 1.0f, g, absl::MakeSpan(w), &slots); });
  // The whole shard Push path (validation, NaN check, apply) without gRPC.
  auto store = *server::ShardStore::Create({});
  server::PushArgs args =
      SetUpDenseJob(*store, "apply", DenseBenchSpec(bytes, 1), g);
  uint64_t seq = 0;
  r.push_gbps = time_it([&] {
    args.seq = ++seq;
    (void)store->Push(args, absl::InfiniteFuture());
  });
  // 1 thread against the daemon's default.
  std::vector<int> counts = {1};
  if (server::DefaultApplyThreads() > 1) {
    counts.push_back(server::DefaultApplyThreads());
  }
  for (int threads : counts) {
    r.close_gbps.push_back(
        {threads, StepCloseBandwidth(bytes, seconds, threads, g)});
  }
  return r;
}

}  // namespace ps::bench
