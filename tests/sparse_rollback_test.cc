// A sparse table through the job-wide rollback, with real processes: the
// coordinator and two ps_server shards. The test plays the job's one BSP
// worker: it pushes a dense tensor's and a sparse table's (lazy Adam)
// gradients through the parameter client, has both shards checkpoint at
// version 4, trains on to version 6, and kills shard 1 with -9. Restarted
// at its address on its data directory, the shard registers again, the
// coordinator sets the job up again at incarnation 1 and rolls both shards
// back to version 4. Then every row (on both shards) and the dense tensor
// equal what was pulled at version 4, and the same two steps again give
// the rows of version 6 bit for bit: the rows' Adam moments and per-row
// step counts came back too. ExplainJob then gives each shard's status,
// its sparse table holding its own keys' rows.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "common/wire/key_placement.h"
#include "common/wire/placement.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "proto/parameter_service.grpc.pb.h"
#include "tests/coordinator_process.h"
#include "tests/ps_server_process.h"
#include "worker/client/parameter_client.h"

namespace ps {
namespace {

using client::ParameterClient;
using client::Ticket;

constexpr char kToken[] = "sparse-rollback-token";
constexpr absl::Duration kWait = absl::Seconds(30);
constexpr int kDense = 3000;
constexpr int kDim = 8;
constexpr int kKeys = 400;

JobSpec Spec() {
  JobSpec spec;
  spec.set_name("sparse-rollback");
  spec.set_seed(9);
  spec.set_num_workers(1);
  spec.set_chunk_bytes(4096);
  TensorSpec* w = spec.mutable_model()->add_tensors();
  w->set_name("w");
  w->add_shape(kDense);
  w->mutable_init()->set_kind(InitializerSpec::UNIFORM);
  w->mutable_init()->set_scale(0.5f);
  SparseTableSpec* emb = spec.mutable_model()->add_sparse_tables();
  emb->set_name("emb");
  emb->set_dim(kDim);
  emb->mutable_init()->set_kind(InitializerSpec::UNIFORM);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  spec.mutable_consistency()->set_model(ConsistencySpec::BSP);
  spec.mutable_consistency()->set_heartbeat_timeout_ms(60000);
  spec.mutable_data()->set_max_steps(1000);
  return spec;
}

// The job's state as the worker reads it: the dense tensor and the rows of
// every key, in key order.
struct State {
  std::vector<float> w = std::vector<float>(kDense);
  std::vector<float> rows = std::vector<float>(kKeys * kDim);
  int64_t version = -1;
  bool operator==(const State& o) const { return w == o.w && rows == o.rows; }
};

class SparseRollback : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(
        testing::TempDir("coordinator"), kToken,
        std::vector<std::string>{"--heartbeat_interval_ms=100",
                                 "--member_timeout_ms=5000",
                                 "--check_dataset=false"});
    ASSERT_TRUE(coordinator_->Start().ok());
    for (int i = 0; i < 2; ++i) {
      dirs_.push_back(testing::TempDir(absl::StrCat("shard", i)));
      StartServer(i, 0);
      ASSERT_TRUE(AwaitServer(servers_[i]->address()));
    }
    // Keys spread over a large range, on both shards.
    for (int k = 0; k < kKeys; ++k) keys_.push_back(7919ull * k + 11);
  }

  void StartServer(int i, int port) {
    auto server = testing::ServerProcess::Start(
        {"--coordinator=" + coordinator_->address(), "--data_dir=" + dirs_[i],
         absl::StrCat("--port=", port)},
        {{"PS_TOKEN", kToken}});
    ASSERT_TRUE(server.ok()) << server.status();
    if (static_cast<int>(servers_.size()) <= i) servers_.resize(i + 1);
    servers_[i] = *std::move(server);
  }

  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& req, Response* resp) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, absl::Seconds(10), kToken);
    return (coordinator_->stub()->*method)(&ctx, req, resp);
  }

  bool AwaitServer(const std::string& address) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      ListMembersResponse members;
      if (Call(&CoordinatorService::Stub::ListMembers, ListMembersRequest(),
               &members)
              .ok()) {
        for (const Member& m : members.members()) {
          if (m.role() == SERVER && m.state() == ALIVE &&
              m.address() == address) {
            return true;
          }
        }
      }
      absl::SleepFor(absl::Milliseconds(50));  // polling real processes
    }
    return false;
  }

  WorkerAssignment Heartbeat() {
    HeartbeatRequest req;
    req.set_member_id(worker_);
    req.set_job_id(job_);
    HeartbeatResponse resp;
    EXPECT_TRUE(Call(&CoordinatorService::Stub::Heartbeat, req, &resp).ok());
    return resp.assignment();
  }

  // Heartbeats until the assignment says TRAIN at `incarnation`; bounded.
  WorkerAssignment AwaitTrain(int64_t incarnation) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      WorkerAssignment a = Heartbeat();
      if (a.command() == WorkerAssignment::TRAIN &&
          a.incarnation() == incarnation) {
        return a;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "no TRAIN assignment at incarnation " << incarnation;
    return WorkerAssignment();
  }

  std::string Events() {
    GetEventsRequest req;
    req.set_job_id(job_);
    GetEventsResponse events;
    EXPECT_TRUE(Call(&CoordinatorService::Stub::GetEvents, req, &events).ok());
    std::string out;
    for (const JobEvent& e : events.events()) {
      absl::StrAppend(&out, e.kind(), ": ", e.message(), "\n");
    }
    return out;
  }

  void Submit() {
    RegisterRequest reg;
    reg.set_role(WORKER);
    reg.set_pid(1);
    RegisterResponse registered;
    ASSERT_TRUE(
        Call(&CoordinatorService::Stub::Register, reg, &registered).ok());
    worker_ = registered.member_id();
    SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    SubmitJobResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::SubmitJob, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    job_ = resp.job_id();
  }

  // The worker's client for assignment `a` (its spec is the normalised
  // one the shards got).
  std::unique_ptr<ParameterClient> Client(const WorkerAssignment& a) {
    const JobSpec& spec = a.spec();
    std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                    spec.model().tensors().end());
    placement_ = *ComputePlacement(tensors, a.server_addresses_size(),
                                   spec.chunk_bytes());
    client::ParameterClientOptions o;
    o.server_addresses.assign(a.server_addresses().begin(),
                              a.server_addresses().end());
    o.token = kToken;
    o.incarnation = a.incarnation();
    o.sparse_tables.assign(spec.model().sparse_tables().begin(),
                           spec.model().sparse_tables().end());
    auto c = ParameterClient::Create(o, job_, worker_, placement_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Pulls the weights and rows of BSP step `step` (version >= step).
  State Read(ParameterClient& c, int64_t step) {
    State s;
    Ticket dense = c.PullAll(step, step, {absl::MakeSpan(s.w)});
    Ticket rows = c.PullRows(step, step, {{0, keys_, absl::MakeSpan(s.rows)}});
    EXPECT_TRUE(dense.Wait(kWait).ok()) << dense.Wait(kWait);
    EXPECT_TRUE(rows.Wait(kWait).ok()) << rows.Wait(kWait);
    s.version = rows.version();
    return s;
  }

  // BSP step `step`: a gradient that depends on the step for the tensor
  // and every row (a key's share of the batch varies with the step), then
  // the end of the step.
  void Step(ParameterClient& c, int64_t step) {
    Read(c, step);  // the base version of the pushes
    std::vector<float> gw(kDense), grads(kKeys * kDim);
    for (int i = 0; i < kDense; ++i)
      gw[i] = 0.001f * ((i + step) % 13) - 0.006f;
    for (int i = 0; i < kKeys * kDim; ++i) {
      grads[i] = 0.01f * ((i * (step + 1)) % 7) - 0.03f;
    }
    Ticket a = c.PushTensor(0, gw, step);
    Ticket b = c.PushRows({{0, keys_, grads}}, step);
    Ticket e = c.EndStep(step);
    for (Ticket* t : {&a, &b, &e}) {
      const absl::Status st = t->Wait(kWait);
      ASSERT_TRUE(st.ok()) << st;
    }
    Heartbeat();
  }

  void Checkpoint(const std::string& address, int64_t want_version) {
    CheckpointRequest request;
    request.set_job_id(job_);
    CheckpointResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, kWait, kToken);
    grpc::Status st = ParameterService::NewStub(*MakeChannel(address))
                          ->Checkpoint(&context, request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(response.version(), want_version);
  }

  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers_;
  std::vector<uint64_t> keys_;
  int64_t worker_ = 0;
  std::string job_;
  Placement placement_;
};

TEST_F(SparseRollback, KilledShardsRowsComeBackThroughTheJobRollback) {
  Submit();
  const WorkerAssignment first = AwaitTrain(0);
  ASSERT_EQ(first.server_addresses_size(), 2);
  // Both shards hold some of the keys.
  const uint64_t salt = TableSalt("emb");
  int on_shard1 = 0;
  for (uint64_t k : keys_) on_shard1 += KeyShard(salt, k, 2) == 1;
  ASSERT_GT(on_shard1, kKeys / 4);
  ASSERT_LT(on_shard1, 3 * kKeys / 4);

  State at4, at6;
  {
    auto c = Client(first);
    ASSERT_NE(c, nullptr);
    const State initial = Read(*c, 0);
    for (int64_t s = 0; s < 4; ++s) Step(*c, s);
    for (const std::string& address : first.server_addresses()) {
      Checkpoint(address, 4);
    }
    at4 = Read(*c, 4);
    EXPECT_EQ(at4.version, 4);
    EXPECT_FALSE(at4 == initial);
    for (int64_t s = 4; s < 6; ++s) Step(*c, s);
    at6 = Read(*c, 6);
    EXPECT_EQ(at6.version, 6);
    EXPECT_NE(at6.rows, at4.rows);
  }

  // kill -9 shard 1; it comes back at its address on its data directory.
  const std::string address = servers_[1]->address();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  ASSERT_TRUE(servers_[1]->Signal(SIGKILL).ok());
  servers_[1].reset();
  StartServer(1, port);
  ASSERT_EQ(servers_[1]->address(), address);

  const WorkerAssignment again = AwaitTrain(1);
  EXPECT_EQ(again.start_step(), 4) << Events();
  const std::string events = Events();
  EXPECT_NE(events.find("from its checkpoint at version 4"), std::string::npos)
      << events;
  EXPECT_NE(events.find("rollback"), std::string::npos) << events;

  auto c = Client(again);
  ASSERT_NE(c, nullptr);
  const State restored = Read(*c, 4);
  EXPECT_EQ(restored.version, 4);
  EXPECT_TRUE(restored.w == at4.w);
  EXPECT_TRUE(restored.rows == at4.rows);
  // The same steps from the restored rows and optimizer slots give the same
  // rows as before the kill.
  for (int64_t s = 4; s < 6; ++s) Step(*c, s);
  const State replayed = Read(*c, 6);
  EXPECT_TRUE(replayed.rows == at6.rows);
  EXPECT_TRUE(replayed.w == at6.w);

  // The coordinator hands the shards' status on (psctl status prints its
  // sparse tables): every key has its row on its own shard.
  ExplainJobRequest explain;
  explain.set_job_id(job_);
  ExplainJobResponse explained;
  ASSERT_TRUE(
      Call(&CoordinatorService::Stub::ExplainJob, explain, &explained).ok());
  ASSERT_EQ(explained.shards_size(), 2) << explained.text();
  int64_t rows = 0;
  for (const ShardStatus& s : explained.shards()) {
    ASSERT_EQ(s.sparse_tables_size(), 1);
    EXPECT_EQ(s.sparse_tables(0).name(), "emb");
    EXPECT_EQ(s.sparse_tables(0).rows(),
              s.shard_index() == 1 ? on_shard1 : kKeys - on_shard1);
    rows += s.sparse_tables(0).rows();
  }
  EXPECT_EQ(rows, kKeys);
}

}  // namespace
}  // namespace ps
