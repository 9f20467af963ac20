// ps_server through real gRPC: concurrent workers lose no update (dense and
// sparse), a retried push applies once, the token is enforced, bad input gets
// precise statuses.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/spec/test_job_spec.h"
#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "common/wire/placement.h"
#include "proto/parameter_service.grpc.pb.h"
#include "tests/ps_server_process.h"
#include "worker/client/parameter_client.h"

namespace ps {
namespace {

using client::ParameterClient;
using client::ParameterClientOptions;
using client::Ticket;
using testing::ServerProcess;

constexpr absl::Duration kWait = absl::Seconds(30);

JobSpec Spec(ConsistencySpec::Model model, int num_workers) {
  JobSpec spec = testing::ConstantSgdJob(model, {{"a", 1000}, {"b", 300}});
  spec.set_name("it");
  spec.set_seed(1);
  spec.set_chunk_bytes(1024);
  spec.set_num_workers(num_workers);
  return spec;
}

std::unique_ptr<ParameterService::Stub> Stub(const std::string& address) {
  return ParameterService::NewStub(*MakeChannel(address));
}

absl::Status SetupAll(
    const std::vector<std::unique_ptr<ServerProcess>>& servers,
    const JobSpec& spec, int workers, bool restore = false,
    const std::string& token = "",
    std::vector<SetupJobResponse>* responses = nullptr) {
  for (size_t s = 0; s < servers.size(); ++s) {
    SetupJobRequest request;
    request.set_job_id("job");
    *request.mutable_spec() = spec;
    request.set_shard_index(s);
    request.set_num_shards(servers.size());
    request.set_restore(restore);
    for (int w = 1; w <= workers; ++w) request.add_worker_ids(w);
    SetupJobResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, token);
    PS_RETURN_IF_ERROR(FromGrpcStatus(
        Stub(servers[s]->address())->SetupJob(&context, request, &response)));
    if (responses != nullptr) responses->push_back(response);
  }
  return absl::OkStatus();
}

std::vector<std::unique_ptr<ServerProcess>> StartServers(
    int n, const std::vector<std::string>& flags = {},
    const std::map<std::string, std::string>& env = {}) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < n; ++i) {
    auto s = ServerProcess::Start(flags, env);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) servers.push_back(*std::move(s));
  }
  return servers;
}

std::unique_ptr<ParameterClient> Client(
    const std::vector<std::unique_ptr<ServerProcess>>& servers,
    const Placement& placement, int64_t worker, const std::string& token = "") {
  ParameterClientOptions options;
  for (const auto& s : servers)
    options.server_addresses.push_back(s->address());
  options.token = token;
  options.max_request_bytes = 2048;  // several messages per shard
  auto client = ParameterClient::Create(options, "job", worker, placement);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

Placement PlacementFor(const JobSpec& spec, int shards) {
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  return *ComputePlacement(tensors, shards, spec.chunk_bytes());
}

struct Model {
  std::vector<float> a = std::vector<float>(1000), b = std::vector<float>(300);
  std::vector<absl::Span<float>> spans() {
    return {absl::MakeSpan(a), absl::MakeSpan(b)};
  }
};

struct NoLostUpdateCase {
  const char* name;
  ConsistencySpec::Model model;
  int shards;
  int workers;
  int steps;
};

// W workers push known gradients concurrently for many steps; the result is
// the closed form: BSP applies the mean per step, ASP every push.
TEST(PsServerGrpc, ConcurrentWorkersLoseNoUpdate) {
  const std::vector<NoLostUpdateCase> cases = {
      {"bsp_2_shards", ConsistencySpec::BSP, 2, 3, 15},
      {"asp_1_shard", ConsistencySpec::ASP, 1, 4, 20},
  };
  for (const NoLostUpdateCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto servers = StartServers(c.shards);
    ASSERT_EQ(static_cast<int>(servers.size()), c.shards);
    const JobSpec spec = Spec(c.model, c.workers);
    ASSERT_TRUE(SetupAll(servers, spec, c.workers).ok());
    const Placement placement = PlacementFor(spec, c.shards);
    std::vector<std::thread> threads;
    for (int w = 1; w <= c.workers; ++w) {
      threads.emplace_back([&, w] {
        auto client = Client(servers, placement, w);
        ASSERT_NE(client, nullptr);
        Model weights;
        const std::vector<float> ga(1000, 0.001f * w), gb(300, 0.002f * w);
        for (int step = 0; step < c.steps; ++step) {
          const int64_t min_version =
              c.model == ConsistencySpec::BSP ? step : 0;
          Ticket pull = client->PullAll(step, min_version, weights.spans());
          ASSERT_TRUE(pull.Wait(kWait).ok()) << pull.Wait(kWait);
          // Per-tensor pushes as backward produces them, then end of step.
          Ticket pb = client->PushTensor(1, gb, step);
          Ticket pa = client->PushTensor(0, ga, step);
          Ticket end = client->EndStep(step);
          for (Ticket* t : {&pb, &pa, &end}) {
            ASSERT_TRUE(t->Wait(kWait).ok()) << t->Wait(kWait);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    double sum_w = 0;
    for (int w = 1; w <= c.workers; ++w) sum_w += w;
    const double factor = c.model == ConsistencySpec::BSP
                              ? c.steps * sum_w / c.workers
                              : c.steps * sum_w;
    auto reader = Client(servers, placement, 1);
    Model final_weights;
    Ticket pull = reader->PullAll(0, 0, final_weights.spans());
    ASSERT_TRUE(pull.Wait(kWait).ok());
    for (float x : final_weights.a) ASSERT_NEAR(x, 1.0 - 0.001 * factor, 1e-4);
    for (float x : final_weights.b) ASSERT_NEAR(x, 1.0 - 0.002 * factor, 1e-4);
    if (c.model == ConsistencySpec::BSP) {
      EXPECT_EQ(pull.version(), c.steps);
    }
  }
}

// The same sequence number sent twice (a retry after a lost response)
// changes the weights once. Uses the generated protobuf stub, which also
// checks that the zero-copy server speaks the proto contract.
TEST(PsServerGrpc, RetriedPushAppliesOnce) {
  auto servers = StartServers(1);
  ASSERT_EQ(servers.size(), 1u);
  const JobSpec spec = Spec(ConsistencySpec::ASP, 1);
  ASSERT_TRUE(SetupAll(servers, spec, 1).ok());
  const Placement placement = PlacementFor(spec, 1);
  auto stub = Stub(servers[0]->address());
  PushRequest push;
  push.set_job_id("job");
  push.set_worker_id(1);
  push.set_seq(1);
  push.set_end_of_step(true);
  for (const Chunk& c : placement.chunks) {
    ChunkPayload* p = push.add_chunks();
    p->set_chunk_id(c.chunk_id);
    p->set_dtype(FLOAT32);
    p->set_num_elements(c.num_elements);
    std::vector<float> g(c.num_elements, 0.25f);
    p->set_data(
        std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    PushResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, "");
    ASSERT_TRUE(stub->Push(&context, push, &response).ok());
    EXPECT_EQ(response.duplicate(), attempt == 1);
    EXPECT_EQ(response.version(), 1);
  }
  PullRequest pull;
  pull.set_job_id("job");
  pull.set_worker_id(1);
  PullResponse pulled;
  grpc::ClientContext context;
  PrepareContext(&context, kWait, "");
  ASSERT_TRUE(stub->Pull(&context, pull, &pulled).ok());
  ASSERT_EQ(pulled.chunks_size(), static_cast<int>(placement.chunks.size()));
  for (const ChunkPayload& c : pulled.chunks()) {
    ASSERT_EQ(c.data().size(), c.num_elements() * 4u);
    const float* w = reinterpret_cast<const float*>(c.data().data());
    for (int64_t i = 0; i < c.num_elements(); ++i) ASSERT_EQ(w[i], 0.75f);
  }
  ShardStatus status;
  grpc::ClientContext sc;
  PrepareContext(&sc, kWait, "");
  GetShardStatusRequest sr;
  sr.set_job_id("job");
  ASSERT_TRUE(stub->GetShardStatus(&sc, sr, &status).ok());
  EXPECT_EQ(status.duplicate_pushes(), 1);
  EXPECT_EQ(status.pushes(), 1);
}

SparseRows KeysOf(const std::vector<uint64_t>& keys) {
  SparseRows r;
  r.set_table(0);
  r.set_num_rows(keys.size());
  r.set_keys(std::string(reinterpret_cast<const char*>(keys.data()),
                         keys.size() * sizeof(uint64_t)));
  return r;
}

// 16 workers push known sparse gradients to 2 shards concurrently, in plain
// protobuf messages (the codec reads them too), each key to its shard by
// key_placement; the final rows, pulled in fp32 and fp16 and riding on a
// push, are the closed form.
TEST(PsServerGrpc, ConcurrentSparsePushesLoseNoUpdate) {
  constexpr int kWorkers = 16, kSteps = 5, kDim = 8, kKeys = 64;
  auto servers = StartServers(2);
  ASSERT_EQ(servers.size(), 2u);
  JobSpec spec = Spec(ConsistencySpec::ASP, kWorkers);
  SparseTableSpec* table = spec.mutable_model()->add_sparse_tables();
  table->set_name("emb");
  table->set_dim(kDim);
  table->mutable_init()->set_kind(InitializerSpec::ZEROS);
  ASSERT_TRUE(SetupAll(servers, spec, kWorkers).ok());
  std::vector<std::vector<uint64_t>> keys(2);
  for (uint64_t k = 0; k < kKeys; ++k) {
    keys[KeyShard("emb", k * 7919, 2)].push_back(k * 7919);
  }
  ASSERT_FALSE(keys[0].empty());
  ASSERT_FALSE(keys[1].empty());
  std::vector<std::thread> threads;
  for (int w = 1; w <= kWorkers; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::unique_ptr<ParameterService::Stub>> stubs;
      for (const auto& s : servers) stubs.push_back(Stub(s->address()));
      for (int step = 0; step < kSteps; ++step) {
        for (int s = 0; s < 2; ++s) {
          PushRequest push;
          push.set_job_id("job");
          push.set_worker_id(w);
          push.set_seq(step + 1);
          push.set_clock(step);
          push.set_base_version(0);
          push.set_end_of_step(true);
          SparseRows* rows = push.add_sparse();
          *rows = KeysOf(keys[s]);
          rows->set_dim(kDim);
          std::vector<float> g(keys[s].size() * kDim, 0.25f);
          rows->set_rows(std::string(reinterpret_cast<const char*>(g.data()),
                                     g.size() * sizeof(float)));
          PushResponse response;
          grpc::ClientContext context;
          PrepareContext(&context, kWait, "");
          grpc::Status st = stubs[s]->Push(&context, push, &response);
          EXPECT_TRUE(st.ok()) << st.error_message();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const float expect = -0.25f * kWorkers * kSteps;  // SGD, lr 1, from 0
  for (int s = 0; s < 2; ++s) {
    auto stub = Stub(servers[s]->address());
    for (DType dtype : {FLOAT32, FLOAT16}) {
      PullRequest pull;
      pull.set_job_id("job");
      pull.set_worker_id(1);
      pull.set_sparse_only(true);
      *pull.add_sparse() = KeysOf(keys[s]);
      pull.mutable_sparse(0)->set_dtype(dtype);
      PullResponse pulled;
      grpc::ClientContext context;
      PrepareContext(&context, kWait, "");
      grpc::Status st = stub->Pull(&context, pull, &pulled);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(pulled.chunks_size(), 0);
      ASSERT_EQ(pulled.sparse_size(), 1);
      const SparseRows& rows = pulled.sparse(0);
      EXPECT_EQ(rows.num_rows(), static_cast<int64_t>(keys[s].size()));
      EXPECT_EQ(rows.dim(), kDim);
      EXPECT_EQ(rows.dtype(), dtype);
      std::vector<float> values(keys[s].size() * kDim);
      ASSERT_TRUE(
          WidenToFloat(dtype, rows.rows(), absl::MakeSpan(values)).ok());
      for (float v : values) ASSERT_EQ(v, expect);
    }
    // The next step's rows ride on a push (of worker 1, nothing to apply).
    PushRequest push;
    push.set_job_id("job");
    push.set_worker_id(1);
    push.set_seq(kSteps + 1);
    push.set_clock(kSteps);
    push.set_end_of_step(true);
    push.mutable_then_pull()->set_sparse_only(true);
    *push.mutable_then_pull()->add_sparse() = KeysOf(keys[s]);
    PushResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, "");
    grpc::Status st = stub->Push(&context, push, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(response.pulled_sparse_size(), 1);
    ASSERT_EQ(response.pulled_sparse(0).rows().size(),
              keys[s].size() * kDim * sizeof(float));
    const float* w =
        reinterpret_cast<const float*>(response.pulled_sparse(0).rows().data());
    EXPECT_EQ(w[0], expect);
    ShardStatus status;
    grpc::ClientContext sc;
    PrepareContext(&sc, kWait, "");
    GetShardStatusRequest sr;
    sr.set_job_id("job");
    ASSERT_TRUE(stub->GetShardStatus(&sc, sr, &status).ok());
    ASSERT_EQ(status.sparse_tables_size(), 1);
    EXPECT_EQ(status.sparse_tables(0).rows(),
              static_cast<int64_t>(keys[s].size()));
    EXPECT_EQ(status.sparse_tables(0).rows_pushed(),
              static_cast<int64_t>(keys[s].size()) * kWorkers * kSteps);
  }
}

TEST(PsServerGrpc, TokenIsRequired) {
  auto servers = StartServers(1, {}, {{"PS_TOKEN", "s3cret"}});
  ASSERT_EQ(servers.size(), 1u);
  const JobSpec spec = Spec(ConsistencySpec::ASP, 1);
  EXPECT_EQ(SetupAll(servers, spec, 1, false, "wrong").code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(SetupAll(servers, spec, 1, false, "s3cret").ok());
  const Placement placement = PlacementFor(spec, 1);
  Model weights;
  auto anonymous = Client(servers, placement, 1);
  EXPECT_EQ(anonymous->PullAll(0, 0, weights.spans()).Wait(kWait).code(),
            absl::StatusCode::kUnauthenticated);
  auto member = Client(servers, placement, 1, "s3cret");
  EXPECT_TRUE(member->PullAll(0, 0, weights.spans()).Wait(kWait).ok());
}

TEST(PsServerGrpc, BadInputGetsPreciseStatuses) {
  auto servers = StartServers(1);
  ASSERT_EQ(servers.size(), 1u);
  const JobSpec spec = Spec(ConsistencySpec::BSP, 1);
  ASSERT_TRUE(SetupAll(servers, spec, 1).ok());
  auto stub = Stub(servers[0]->address());
  auto push = [&](const PushRequest& r) {
    PushResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, "");
    return stub->Push(&context, r, &response).error_code();
  };
  PushRequest base;
  base.set_job_id("job");
  base.set_worker_id(1);
  base.set_seq(1);
  ChunkPayload* c = base.add_chunks();
  c->set_chunk_id(0);
  c->set_dtype(FLOAT32);
  const int64_t n = PlacementFor(spec, 1).chunks[0].num_elements;
  c->set_num_elements(n);
  c->set_data(std::string(n * 4, '\0'));
  PushRequest unknown_job = base;
  unknown_job.set_job_id("nope");
  EXPECT_EQ(push(unknown_job), grpc::StatusCode::NOT_FOUND);
  PushRequest short_payload = base;
  short_payload.mutable_chunks(0)->mutable_data()->resize(100);
  EXPECT_EQ(push(short_payload), grpc::StatusCode::INVALID_ARGUMENT);
  PushRequest future = base;
  future.set_seq(2);
  future.set_clock(9);
  EXPECT_EQ(push(future), grpc::StatusCode::OUT_OF_RANGE);
  PushRequest stranger = base;
  stranger.set_worker_id(77);
  EXPECT_EQ(push(stranger), grpc::StatusCode::FAILED_PRECONDITION);
  // An oversized message is refused by gRPC itself.
  PushRequest huge = base;
  huge.mutable_chunks(0)->mutable_data()->resize(70 << 20);
  EXPECT_EQ(push(huge), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Nothing of that changed the shard.
  GetShardStatusRequest sr;
  sr.set_job_id("job");
  ShardStatus status;
  grpc::ClientContext sc;
  PrepareContext(&sc, kWait, "");
  ASSERT_TRUE(stub->GetShardStatus(&sc, sr, &status).ok());
  EXPECT_EQ(status.version(), 0);
  EXPECT_EQ(status.pushes(), 0);
  EXPECT_EQ(status.rejected_pushes(), 3);
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, made
// with the openssl command line. Returns false if openssl is missing.
bool MakeCertificates(const std::string& dir) {
  const std::string cmd =
      "cd " + dir +
      " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ps-ca "
      "-keyout ca.key -out ca.pem"
      " && openssl req -newkey rsa:2048 -nodes -subj /CN=localhost "
      "-keyout server.key -out server.csr"
      " && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext"
      " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -days 1 -extfile san.ext -out server.pem"
      " && openssl req -newkey rsa:2048 -nodes -subj /CN=worker "
      "-keyout client.key -out client.csr"
      " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -days 1 -out client.pem";
  return std::system((cmd + " > /dev/null 2>&1").c_str()) == 0;
}

TEST(PsServerGrpc, MutualTlsIsEnforced) {
  const std::string dir = testing::TempDir("tls");
  if (!MakeCertificates(dir))
    GTEST_SKIP() << "openssl could not make certificates";
  auto servers = StartServers(
      1, {"--tls_cert=" + dir + "/server.pem",
          "--tls_key=" + dir + "/server.key", "--tls_ca=" + dir + "/ca.pem"});
  ASSERT_EQ(servers.size(), 1u);
  const JobSpec spec = Spec(ConsistencySpec::ASP, 1);
  {
    // Setup over TLS with a client certificate.
    ChannelOptions copts;
    copts.tls = {dir + "/client.pem", dir + "/client.key", dir + "/ca.pem"};
    auto channel = MakeChannel(servers[0]->address(), copts);
    ASSERT_TRUE(channel.ok()) << channel.status();
    SetupJobRequest request;
    request.set_job_id("job");
    *request.mutable_spec() = spec;
    request.set_num_shards(1);
    request.add_worker_ids(1);
    SetupJobResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, "");
    grpc::Status st = ParameterService::NewStub(*channel)->SetupJob(
        &context, request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const Placement placement = PlacementFor(spec, 1);
  Model weights;
  ParameterClientOptions options;
  options.server_addresses = {servers[0]->address()};
  options.tls = {dir + "/client.pem", dir + "/client.key", dir + "/ca.pem"};
  auto client = *ParameterClient::Create(options, "job", 1, placement);
  EXPECT_TRUE(client->PullAll(0, 0, weights.spans()).Wait(kWait).ok());
  // Plaintext is refused (and retried until the attempts run out).
  options.tls = {};
  options.retry.max_attempts = 1;
  auto plain = *ParameterClient::Create(options, "job", 1, placement);
  EXPECT_EQ(plain->PullAll(0, 0, weights.spans()).Wait(kWait).code(),
            absl::StatusCode::kUnavailable);
}

// A port that was free a moment ago (the metrics flag takes a number).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

TEST(PsServerGrpc, ExportsPrometheusMetricsAndShardStatus) {
  const int port = FreePort();
  auto servers = StartServers(1, {"--metrics_port=" + std::to_string(port)});
  ASSERT_EQ(servers.size(), 1u);
  const JobSpec spec = Spec(ConsistencySpec::BSP, 2);
  ASSERT_TRUE(SetupAll(servers, spec, 2).ok());
  const Placement placement = PlacementFor(spec, 1);
  auto client = Client(servers, placement, 1);
  const std::vector<float> ga(1000, 0.5f), gb(300, 0.5f);
  for (Ticket t : {client->PushTensor(0, ga, 0), client->PushTensor(1, gb, 0),
                   client->EndStep(0)}) {
    ASSERT_TRUE(t.Wait(kWait).ok());
  }
  // Worker 2 has not finished step 0: the shard says it waits for it.
  GetShardStatusRequest sr;
  sr.set_job_id("job");
  ShardStatus status;
  grpc::ClientContext sc;
  PrepareContext(&sc, kWait, "");
  ASSERT_TRUE(
      Stub(servers[0]->address())->GetShardStatus(&sc, sr, &status).ok());
  EXPECT_EQ(status.version(), 0);
  EXPECT_EQ(status.pending_step(), 0);
  ASSERT_EQ(status.waiting_for_size(), 1);
  EXPECT_EQ(status.waiting_for(0), 2);
  EXPECT_EQ(status.pushes(), 4);  // a in 2 messages, b in 1, end of step
  EXPECT_EQ(status.bytes_in(), 1300 * 4);
  const std::string metrics = HttpGet(port, "/metrics");
  for (const char* name :
       {"ps_shard_pushes_total", "ps_shard_bytes_in_total", "ps_shard_version",
        "ps_shard_apply_seconds", "ps_shard_push_staleness",
        "ps_shard_dropped_pushes_total", "ps_shard_rejected_pushes_total",
        "ps_shard_duplicate_pushes_total", "ps_shard_pulls_total"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name << " missing in\n"
                                                     << metrics;
  }
  EXPECT_NE(metrics.find("ps_shard_pushes_total{job=\"job\",shard=\"0\"} 4"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace ps
