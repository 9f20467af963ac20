// ps_bench: data-plane throughput of the parameter server on loopback, next
// to the ceilings measured in the same run on the same bytes.
//
//   ps_bench --seconds_per_case=1.5 --out=/tmp/ps_bench.md
//
// For each dense model size x shards x workers it runs in-process ps_server
// shards (ShardStore + ParameterService on 127.0.0.1:0) and worker threads
// with their own ParameterClient doing ASP steps: push every tensor's
// gradient with the end of step and get every tensor's new weights back in
// its answer (EndStepAndPull, as workers do; --fused=false: a separate pull,
// then the pushes and the end of step). Reported: push+pull GB/s (payload
// bytes of both directions) and the median step latency. Ceilings: a plain
// TCP socket ping-pong, and gRPC echoing raw grpc::ByteBuffer slices (no
// protobuf) on 1 and 2 connections, both carrying the same bytes in the same
// piece size as the parameter client. With --pairs=N, the 1-shard 1-worker
// case and the raw echo (same connections) are measured in turn N times per
// size and the ratio summarised by its median and range: loopback figures
// on a small machine drift between measurements. Last: server-side SGD apply
// GB/s (the optimizer loop, and the whole shard Push path) vs memcpy.
//
// --servers=HOST:PORT,... measures running ps_server processes instead (one
// shard each; the jobs are set up and torn down through their RPCs), over
// whatever network lies between, and skips the ceilings and the apply,
// which would measure this host. --ceilings=false skips the ceilings only.
#include <arpa/inet.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/payload_codec.h"
#include "common/placement.h"
#include "common/process.h"
#include "common/rpc.h"
#include "common/status.h"
#include "server/coordinator/shard_client.h"
#include "server/optimizer.h"
#include "server/parameter_service.h"
#include "server/shard/shard_store.h"
#include "worker/client/parameter_client.h"

ABSL_FLAG(std::string, sizes, "4K,1M,16M,64M,256M",
          "Dense model sizes (bytes of fp32 weights; K/M suffixes).");
ABSL_FLAG(std::string, shards, "1,2", "Numbers of shards.");
ABSL_FLAG(std::string, workers, "1,2,4", "Numbers of worker threads.");
ABSL_FLAG(double, seconds_per_case, 1.5,
          "Measuring time per case (after one warm-up step).");
ABSL_FLAG(int, min_steps, 3, "At least this many measured steps per worker.");
ABSL_FLAG(int, connections, 2, "TCP connections per shard (client).");
ABSL_FLAG(int64_t, max_request_bytes, 4 << 20,
          "Payload bytes per Push/Pull message.");
ABSL_FLAG(std::string, out, "", "Also write the markdown report here.");
ABSL_FLAG(int, pairs, 0,
          "Also measure the 1-shard, 1-worker case and the raw gRPC echo in "
          "turn this many times per size, and give the median ratio and its "
          "range (0: off).");
ABSL_FLAG(bool, ceilings, true,
          "Measure the TCP and raw gRPC ceilings first (false: only the ps "
          "cases and the server-side apply, without the ratios; the "
          "ceilings' large buffers also warm glibc's dynamic allocator "
          "thresholds up, which a daemon does not get).");
ABSL_FLAG(std::string, servers, "",
          "Comma-separated host:port of running ps_servers to measure instead "
          "of shards in this process: one shard each, in this order "
          "(--shards is ignored). Jobs are set up and torn down through "
          "their SetupJob/TeardownJob calls, with the cluster token of "
          "--token_file or $PS_TOKEN. The ceilings, measured on loopback in "
          "this process, are skipped.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token for --servers (else $PS_TOKEN).");
ABSL_FLAG(bool, fused, true,
          "Steps as the worker runs them: the gradients pushed with the end "
          "of step, whose answer carries the next step's weights (one round "
          "trip). False: pull, then push and end of step (two).");

namespace ps {
namespace {

using client::ParameterClient;
using client::ParameterClientOptions;
using client::Ticket;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string SizeName(int64_t b) {
  if (b >= (1 << 20)) return absl::StrCat(b >> 20, " MB");
  return absl::StrCat(b >> 10, " KB");
}

// --- In-process shards -------------------------------------------------

struct Shard {
  std::unique_ptr<server::ShardStore> store;
  std::unique_ptr<server::ParameterServiceAdapter> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::vector<std::unique_ptr<Shard>> StartShards(int n) {
  std::vector<std::unique_ptr<Shard>> shards;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Shard>();
    s->store = *server::ShardStore::Create({});
    server::ParameterServiceOptions options;
    options.wait_threads = 4;
    s->service =
        *server::ParameterServiceAdapter::Create(s->store.get(), options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.SetMaxReceiveMessageSize(kDefaultMaxMessageBytes);
    builder.SetMaxSendMessageSize(kDefaultMaxMessageBytes);
    builder.RegisterService(s->service->service());
    s->server = builder.BuildAndStart();
    s->address = absl::StrCat("127.0.0.1:", port);
    shards.push_back(std::move(s));
  }
  return shards;
}

void StopShards(std::vector<std::unique_ptr<Shard>>& shards) {
  for (auto& s : shards) {
    s->store->Shutdown();
    s->server->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(2));
    s->service->Stop();
  }
  shards.clear();
}

// Up to 4 equal tensors ("layers") of fp32 zeros.
JobSpec DenseSpec(int64_t bytes, int workers) {
  JobSpec spec;
  spec.set_name("bench");
  spec.set_num_workers(workers);
  const int64_t elements = bytes / 4;
  const int tensors = elements >= 4096 ? 4 : 1;
  for (int t = 0; t < tensors; ++t) {
    TensorSpec* ts = spec.mutable_model()->add_tensors();
    ts->set_name(absl::StrCat("layer", t));
    ts->add_shape(elements / tensors);
    ts->mutable_init()->set_kind(InitializerSpec::ZEROS);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  spec.mutable_data()->set_max_steps(1);
  return spec;
}

struct CaseResult {
  double gbps = 0;
  double step_ms = 0;
  double steps_per_s = 0;
  std::string error;
};

// Running ps_servers to measure (--servers) instead of in-process shards.
struct RemoteServers {
  std::vector<std::string> addresses;  // index = shard index
  std::string token;
  std::unique_ptr<coordinator::ShardClient> shards;
};

CaseResult RunCase(int64_t bytes, int num_shards, int num_workers,
                   RemoteServers* remote = nullptr) {
  CaseResult result;
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<std::string> addresses;
  std::string job_id = "bench";
  if (remote != nullptr) {
    addresses = remote->addresses;
    num_shards = addresses.size();
    // Ids of this run only: another run's jobs may be on the servers.
    static int cases = 0;
    job_id = absl::StrCat("psbench-", getpid(), "-", ++cases);
  } else {
    shards = StartShards(num_shards);
    for (auto& s : shards) addresses.push_back(s->address);
  }
  int set_up = 0;  // remote shards that hold the job
  auto teardown = [&] {
    if (remote == nullptr) {
      StopShards(shards);
      return;
    }
    for (int s = 0; s < set_up; ++s) {
      TeardownJobRequest t;
      t.set_job_id(job_id);
      if (absl::Status st = remote->shards->TeardownJob(addresses[s], t);
          !st.ok()) {
        std::fprintf(stderr, "warning: TeardownJob %s on %s: %s\n",
                     job_id.c_str(), addresses[s].c_str(),
                     std::string(st.message()).c_str());
      }
    }
  };
  const JobSpec spec = DenseSpec(bytes, num_workers);
  for (int s = 0; s < num_shards; ++s) {
    SetupJobRequest r;
    r.set_job_id(job_id);
    *r.mutable_spec() = spec;
    r.set_shard_index(s);
    r.set_num_shards(num_shards);
    for (int w = 1; w <= num_workers; ++w) r.add_worker_ids(w);
    absl::Status st = remote != nullptr
                          ? remote->shards->SetupJob(addresses[s], r).status()
                          : shards[s]->store->SetupJob(r).status();
    if (!st.ok()) {
      // (The shard client's message names the server already.)
      result.error = absl::StrCat("SetupJob: ", st.message());
      teardown();
      return result;
    }
    ++set_up;
  }
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  const Placement placement =
      *ComputePlacement(tensors, num_shards, kDefaultChunkBytes);
  const double seconds = absl::GetFlag(FLAGS_seconds_per_case);
  const int min_steps = absl::GetFlag(FLAGS_min_steps);
  absl::Mutex mu;
  std::vector<double> latencies;
  int64_t total_steps = 0;
  std::string error;
  std::atomic<int> ready{0};
  absl::Notification go;
  absl::Time start, end;
  std::vector<std::thread> threads;
  for (int w = 1; w <= num_workers; ++w) {
    threads.emplace_back([&, w] {
      ParameterClientOptions options;
      options.server_addresses = addresses;
      if (remote != nullptr) options.token = remote->token;
      options.connections_per_shard = absl::GetFlag(FLAGS_connections);
      options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
      auto client = *ParameterClient::Create(options, job_id, w, placement);
      const bool fused = absl::GetFlag(FLAGS_fused);
      std::vector<std::vector<float>> weights, grads;
      std::vector<absl::Span<float>> spans;
      for (int64_t n : placement.tensor_elements) {
        weights.emplace_back(n);
        grads.emplace_back(n, 1e-3f);
      }
      for (auto& v : weights) spans.push_back(absl::MakeSpan(v));
      auto step = [&](int64_t clock) -> absl::Status {
        if (fused) {
          // As a worker does: the gradients go with the end of step, whose
          // answer brings the weights for the next step.
          std::vector<client::TensorGrad> all;
          for (int t = static_cast<int>(grads.size()) - 1; t >= 0; --t) {
            all.push_back({t, grads[t]});
          }
          ParameterClient::StepTickets st = client->EndStepAndPull(
              std::move(all), clock, ParameterClient::kPulledVersion, clock + 1,
              0, spans);
          PS_RETURN_IF_ERROR(st.end.Wait(absl::Seconds(60)));
          return st.pull.Wait(absl::Seconds(60));
        }
        Ticket pull = client->PullAll(clock, 0, spans);
        PS_RETURN_IF_ERROR(pull.Wait(absl::Seconds(60)));
        std::vector<Ticket> pushes;
        // Last layer first, as backward produces them.
        for (int t = static_cast<int>(grads.size()) - 1; t >= 0; --t) {
          pushes.push_back(client->PushTensor(t, grads[t], clock));
        }
        pushes.push_back(client->EndStep(clock));
        for (Ticket& p : pushes) PS_RETURN_IF_ERROR(p.Wait(absl::Seconds(60)));
        return absl::OkStatus();
      };
      // Warm-up (connections, buffers), starting from pulled weights.
      absl::Status s = client->PullAll(0, 0, spans).Wait(absl::Seconds(60));
      if (s.ok()) s = step(0);
      ready.fetch_add(1);
      go.WaitForNotification();
      std::vector<double> mine;
      const absl::Time local_start = absl::Now();
      int64_t clock = 1;
      while (s.ok() && (absl::Now() - local_start < absl::Seconds(seconds) ||
                        static_cast<int>(mine.size()) < min_steps)) {
        const absl::Time t0 = absl::Now();
        s = step(clock++);
        mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
      absl::MutexLock l(&mu);
      if (!s.ok() && error.empty()) error = s.ToString();
      latencies.insert(latencies.end(), mine.begin(), mine.end());
      total_steps += mine.size();
    });
  }
  while (ready.load() < num_workers) absl::SleepFor(absl::Milliseconds(1));
  start = absl::Now();
  go.Notify();
  for (auto& t : threads) t.join();
  end = absl::Now();
  teardown();
  result.error = error;
  const double wall = absl::ToDoubleSeconds(end - start);
  result.gbps = 2.0 * bytes * total_steps / wall / 1e9;
  result.step_ms = Median(latencies);
  result.steps_per_s = total_steps / wall;
  return result;
}

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

struct ApplyResult {
  double memcpy_gbps, sgd_gbps, push_gbps;
  // BSP step close (momentum over the whole shard), by apply threads.
  std::vector<std::pair<int, double>> close_gbps;
};

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
  JobSpec spec = DenseSpec(bytes, 1);
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
      SetUpDenseJob(*store, "apply", DenseSpec(bytes, 1), g);
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

std::vector<int64_t> ParseSizes(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t mult = 1;
    if (absl::EndsWith(part, "K")) mult = 1 << 10;
    if (absl::EndsWith(part, "M")) mult = 1 << 20;
    if (mult != 1) part.remove_suffix(1);
    int64_t v = 0;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v * mult);
  }
  return out;
}

std::vector<int> ParseInts(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

int Main(bool malloc_tuned) {
  const double seconds = absl::GetFlag(FLAGS_seconds_per_case);
  const int64_t piece = absl::GetFlag(FLAGS_max_request_bytes);
  const int connections = absl::GetFlag(FLAGS_connections);
  std::string report;
  auto emit = [&](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    report += line + "\n";
  };
  const std::vector<int64_t> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes));
  emit(absl::StrCat("Allocator: ", malloc_tuned
                                       ? "freed message buffers kept "
                                         "(TuneMallocForLargeMessages)"
                                       : "glibc's default thresholds"));
  bool failed = false;  // a case ended with an error
  std::unique_ptr<RemoteServers> remote;
  if (const std::string servers = absl::GetFlag(FLAGS_servers);
      !servers.empty()) {
    remote = std::make_unique<RemoteServers>();
    remote->addresses = absl::StrSplit(servers, ',', absl::SkipWhitespace());
    if (remote->addresses.empty()) {
      std::fprintf(stderr, "--servers: no host:port in \"%s\"\n",
                   servers.c_str());
      return 2;
    }
    absl::StatusOr<std::string> token = ReadClusterToken(
        absl::GetFlag(FLAGS_token_file), std::getenv("PS_TOKEN"));
    if (!token.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(token.status().message()).c_str());
      return 2;
    }
    remote->token = *token;
    // A wrong address fails here, at once, not as a case's error.
    for (const std::string& address : remote->addresses) {
      if (!CanConnect(address, absl::Seconds(5))) {
        std::fprintf(stderr, "--servers: cannot connect to %s within 5 s\n",
                     address.c_str());
        return 1;
      }
    }
    coordinator::GrpcShardClientOptions shard_options;
    shard_options.token = remote->token;
    remote->shards = coordinator::MakeGrpcShardClient(shard_options);
  }
  const bool ceilings = absl::GetFlag(FLAGS_ceilings) && remote == nullptr;
  if (!ceilings && absl::GetFlag(FLAGS_pairs) > 0) {
    std::fprintf(stderr,
                 "--pairs needs the ceilings (--ceilings, no --servers)\n");
    return 2;
  }
  std::vector<std::pair<double, double>> raw1(sizes.size()), raw2(sizes.size()),
      tcp(sizes.size());
  if (ceilings) {
    emit("\n## Ceilings (same bytes, both directions counted)\n");
    emit(
        "| model | TCP ping-pong GB/s | TCP round trips/s "
        "| gRPC raw 1 conn GB/s | gRPC raw 2 conn GB/s "
        "| gRPC raw calls/s (1 conn) |");
    emit("|---|---|---|---|---|---|");
    for (size_t i = 0; i < sizes.size(); ++i) {
      tcp[i] = TcpPingPong(std::min<int64_t>(sizes[i], 64 << 20), seconds);
      raw1[i] = GrpcRawCeiling(sizes[i], 1, piece, seconds);
      raw2[i] = GrpcRawCeiling(sizes[i], 2, piece, seconds);
      // The TCP ping-pong moves at most 64 MB per round trip (GB/s compare
      // per byte; the round trips are of the capped size).
      const std::string trips =
          sizes[i] > (64 << 20)
              ? absl::StrFormat("%.0f (of 64 MB)", tcp[i].second)
              : absl::StrFormat("%.0f", tcp[i].second);
      emit(absl::StrFormat("| %s | %.2f | %s | %.2f | %.2f | %.0f |",
                           SizeName(sizes[i]), tcp[i].first, trips,
                           raw1[i].first, raw2[i].first, raw1[i].second));
    }
  }
  emit("\n## ps push+pull (ASP, " +
       (remote != nullptr
            ? absl::StrCat("ps_server processes at ",
                           absl::StrJoin(remote->addresses, ", "), ", ")
            : std::string("in-process shards, ")) +
       absl::StrCat(connections, " connections per shard, ", piece >> 20,
                    " MB messages, ",
                    absl::GetFlag(FLAGS_fused)
                        ? "pushes + end of step answered with the weights"
                        : "pull, then pushes + end of step",
                    ")\n"));
  emit(
      "| model | shards | workers | push+pull GB/s | median step ms | steps/s "
      "| vs raw gRPC (same conns) | vs TCP |");
  emit("|---|---|---|---|---|---|---|---|");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::vector<int> shard_counts =
        remote != nullptr
            ? std::vector<int>{static_cast<int>(remote->addresses.size())}
            : ParseInts(absl::GetFlag(FLAGS_shards));
    for (int shards : shard_counts) {
      for (int workers : ParseInts(absl::GetFlag(FLAGS_workers))) {
        CaseResult r = RunCase(sizes[i], shards, workers, remote.get());
        const double raw = connections >= 2 ? raw2[i].first : raw1[i].first;
        const std::string ratios =
            ceilings ? absl::StrFormat("%.2fx | %.2fx", r.gbps / raw,
                                       r.gbps / tcp[i].first)
                     : "- | -";
        emit(absl::StrFormat("| %s | %d | %d | %.2f | %.2f | %.0f | %s |%s",
                             SizeName(sizes[i]), shards, workers, r.gbps,
                             r.step_ms, r.steps_per_s, ratios,
                             r.error.empty() ? "" : " error: " + r.error));
        failed = failed || !r.error.empty();
      }
    }
  }
  if (const int pairs = absl::GetFlag(FLAGS_pairs); pairs > 0) {
    emit(absl::StrFormat(
        "\n## Paired: 1 shard, 1 worker against the raw gRPC echo (%d "
        "connection(s)), measured in turn %d times\n",
        connections, pairs));
    emit(
        "| model | ps/raw median | min | max | ps GB/s median | raw GB/s "
        "median |");
    emit("|---|---|---|---|---|---|");
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<double> ratio, ps, raw;
      for (int k = 0; k < pairs; ++k) {
        const double r =
            GrpcRawCeiling(sizes[i], connections, piece, seconds).first;
        const CaseResult c = RunCase(sizes[i], 1, 1);
        if (!c.error.empty()) {
          emit(absl::StrFormat("| %s | error: %s |", SizeName(sizes[i]),
                               c.error));
          failed = true;
          break;
        }
        raw.push_back(r);
        ps.push_back(c.gbps);
        ratio.push_back(c.gbps / r);
      }
      if (ratio.empty()) continue;
      emit(absl::StrFormat("| %s | %.2fx | %.2fx | %.2fx | %.2f | %.2f |",
                           SizeName(sizes[i]), Median(ratio),
                           *std::min_element(ratio.begin(), ratio.end()),
                           *std::max_element(ratio.begin(), ratio.end()),
                           Median(ps), Median(raw)));
    }
  }
  // The server-side apply runs in this process: with --servers it would
  // measure this host, not theirs.
  if (remote == nullptr) {
    emit("\n## Server-side apply (64 MB of fp32)\n");
    const ApplyResult a = ApplyBandwidth(64 << 20, seconds);
    emit(
        "| memcpy GB/s | SGD apply GB/s | shard Push path GB/s | SGD / memcpy "
        "|");
    emit("|---|---|---|---|");
    emit(absl::StrFormat("| %.2f | %.2f | %.2f | %.2f |", a.memcpy_gbps,
                         a.sgd_gbps, a.push_gbps, a.sgd_gbps / a.memcpy_gbps));
    emit(
        "\nBSP step close (sum of the staged gradient and a momentum update "
        "of all 64 MB, by apply threads):\n");
    emit("| apply threads | GB/s of weights | vs 1 thread |");
    emit("|---|---|---|");
    for (const auto& [threads, gbps] : a.close_gbps) {
      emit(absl::StrFormat("| %d | %.2f | %.2fx |", threads, gbps,
                           gbps / a.close_gbps.front().second));
    }
  }
  if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
    std::ofstream(out) << report;
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "parameter-server push/pull throughput vs TCP and raw gRPC "
      "ceilings, and server-side apply vs memcpy, on loopback; or push/pull "
      "throughput against running ps_servers (--servers). Exits 1 if a case "
      "failed (its row says why), 2 on a usage error.");
  absl::ParseCommandLine(argc, argv);
  ps::DisableMutexDeadlockDetection();
  return ps::Main(ps::TuneMallocForLargeMessages(
      ps::MallocTuningEnabled(std::getenv("PS_MALLOC_TUNING"))));
}
