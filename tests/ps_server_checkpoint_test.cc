// Checkpoints of real ps_server processes: restore after kill -9, a 2-shard
// checkpoint restored onto 3 shards, the final checkpoint on SIGTERM.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <vector>

#include "common/platform/rpc.h"
#include "common/platform/status.h"
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

JobSpec Spec() {
  JobSpec spec;
  spec.set_name("ckpt");
  spec.set_seed(5);
  spec.set_chunk_bytes(2048);
  for (auto [name, n] : {std::pair<const char*, int>{"w", 3000}, {"b", 700}}) {
    TensorSpec* t = spec.mutable_model()->add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->mutable_init()->set_kind(InitializerSpec::UNIFORM);
    t->mutable_init()->set_scale(0.5f);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  spec.mutable_data()->set_max_steps(100);
  return spec;
}

using Servers = std::vector<std::unique_ptr<ServerProcess>>;

Servers Start(int n, const std::string& data_dir,
              std::vector<std::string> flags = {}) {
  flags.push_back("--data_dir=" + data_dir);
  Servers servers;
  for (int i = 0; i < n; ++i) {
    auto s = ServerProcess::Start(flags);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) servers.push_back(*std::move(s));
  }
  return servers;
}

std::vector<SetupJobResponse> SetupShards(const Servers& servers,
                                          bool restore) {
  std::vector<SetupJobResponse> out;
  for (size_t s = 0; s < servers.size(); ++s) {
    SetupJobRequest request;
    request.set_job_id("job");
    *request.mutable_spec() = Spec();
    request.set_shard_index(s);
    request.set_num_shards(servers.size());
    request.set_restore(restore);
    request.add_worker_ids(1);
    SetupJobResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, "");
    grpc::Status st =
        ParameterService::NewStub(*MakeChannel(servers[s]->address()))
            ->SetupJob(&context, request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    out.push_back(response);
  }
  return out;
}

Placement PlacementFor(int shards) {
  const JobSpec spec = Spec();
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  return *ComputePlacement(tensors, shards, spec.chunk_bytes());
}

std::unique_ptr<ParameterClient> Client(const Servers& servers,
                                        const Placement& placement) {
  ParameterClientOptions options;
  for (const auto& s : servers)
    options.server_addresses.push_back(s->address());
  return *ParameterClient::Create(options, "job", 1, placement);
}

struct Weights {
  std::vector<float> w = std::vector<float>(3000), b = std::vector<float>(700);
  std::vector<absl::Span<float>> spans() {
    return {absl::MakeSpan(w), absl::MakeSpan(b)};
  }
  bool operator==(const Weights& o) const { return w == o.w && b == o.b; }
};

Weights PullAll(const Servers& servers, int64_t* version = nullptr) {
  Weights out;
  auto client = Client(servers, PlacementFor(servers.size()));
  Ticket t = client->PullAll(0, 0, out.spans());
  EXPECT_TRUE(t.Wait(kWait).ok()) << t.Wait(kWait);
  if (version != nullptr) *version = t.version();
  return out;
}

// `steps` ASP steps of a varying gradient through the client.
void Train(const Servers& servers, int first_step, int steps) {
  auto client = Client(servers, PlacementFor(servers.size()));
  std::vector<float> gw(3000), gb(700);
  for (int s = first_step; s < first_step + steps; ++s) {
    for (size_t i = 0; i < gw.size(); ++i)
      gw[i] = 0.001f * ((i + s) % 17) - 0.008f;
    for (size_t i = 0; i < gb.size(); ++i) gb[i] = 0.002f * ((i * s) % 5);
    Ticket a = client->PushTensor(0, gw, s, s);
    Ticket b = client->PushTensor(1, gb, s, s);
    Ticket e = client->EndStep(s, s);
    for (Ticket* t : {&a, &b, &e}) ASSERT_TRUE(t->Wait(kWait).ok());
  }
}

CheckpointResponse CheckpointNow(const ServerProcess& server) {
  CheckpointRequest request;
  request.set_job_id("job");
  CheckpointResponse response;
  grpc::ClientContext context;
  PrepareContext(&context, kWait, "");
  grpc::Status st = ParameterService::NewStub(*MakeChannel(server.address()))
                        ->Checkpoint(&context, request, &response);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return response;
}

TEST(PsServerCheckpoint, RestoresAfterKillDashNine) {
  const std::string dir = testing::TempDir("kill9");
  Weights before;
  {
    Servers servers = Start(1, dir);
    ASSERT_EQ(servers.size(), 1u);
    SetupShards(servers, false);
    Train(servers, 0, 4);
    EXPECT_EQ(CheckpointNow(*servers[0]).version(), 4);
    before = PullAll(servers);
    auto status = servers[0]->Signal(SIGKILL);
    ASSERT_TRUE(status.ok());
    EXPECT_TRUE(WIFSIGNALED(*status));
  }
  Servers servers = Start(1, dir);
  ASSERT_EQ(servers.size(), 1u);
  const auto setup = SetupShards(servers, true);
  EXPECT_TRUE(setup[0].restored());
  EXPECT_EQ(setup[0].version(), 4);
  int64_t version = 0;
  EXPECT_TRUE(PullAll(servers, &version) == before);
  EXPECT_EQ(version, 4);
  // Training goes on from the restored optimizer state.
  Train(servers, 4, 1);
}

TEST(PsServerCheckpoint, TwoShardCheckpointRestoresOntoThreeShards) {
  const std::string dir = testing::TempDir("reshard");
  Weights before;
  {
    Servers two = Start(2, dir);
    ASSERT_EQ(two.size(), 2u);
    SetupShards(two, false);
    Train(two, 0, 3);
    for (const auto& s : two) EXPECT_EQ(CheckpointNow(*s).version(), 3);
    before = PullAll(two);
  }
  Servers three = Start(3, dir);
  ASSERT_EQ(three.size(), 3u);
  for (const SetupJobResponse& r : SetupShards(three, true)) {
    EXPECT_TRUE(r.restored());
    EXPECT_EQ(r.version(), 3);
  }
  EXPECT_TRUE(PullAll(three) == before);
}

TEST(PsServerCheckpoint, SigtermWritesAFinalCheckpoint) {
  const std::string dir = testing::TempDir("sigterm");
  Weights before;
  {
    Servers servers = Start(1, dir, {"--checkpoint_on_exit"});
    ASSERT_EQ(servers.size(), 1u);
    SetupShards(servers, false);
    Train(servers, 0, 2);
    before = PullAll(servers);
    auto status = servers[0]->Signal(SIGTERM);
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 0);
  }
  Servers servers = Start(1, dir);
  const auto setup = SetupShards(servers, true);
  EXPECT_TRUE(setup[0].restored());
  EXPECT_EQ(setup[0].version(), 2);
  EXPECT_TRUE(PullAll(servers) == before);
}

}  // namespace
}  // namespace ps
