// A misbehaving client against a real ps_server started with a token file:
// every ParameterService method refuses calls with no or a wrong token; bad
// pushes and pulls get a precise status; nothing of it changes the shard;
// the process keeps serving; and a worker of one job cannot push to or pull
// from another job's parameters. (The cases already in ps_server_grpc_test
// -- unknown job, short payload, a step from the future, a stranger worker,
// a message over the default limit -- are not repeated here.)
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/platform/rpc.h"
#include "common/spec/test_job_spec.h"
#include "common/wire/placement.h"
#include "proto/parameter_service.grpc.pb.h"
#include "tests/ps_server_process.h"

namespace ps {
namespace {

using testing::ServerProcess;

constexpr char kToken[] = "bad-input-test-token";
constexpr absl::Duration kWait = absl::Seconds(20);

JobSpec Spec(ConsistencySpec::Model model, int num_workers) {
  JobSpec spec = testing::ConstantSgdJob(model, {{"w", 600}});
  spec.set_name("bad-input");
  spec.set_seed(1);
  spec.set_chunk_bytes(1024);
  spec.set_num_workers(num_workers);
  return spec;
}

// Elements of chunk 0 (the placement is a pure function of the spec).
int64_t ChunkElements(const JobSpec& spec) {
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  return ComputePlacement(tensors, 1, spec.chunk_bytes())
      ->chunks[0]
      .num_elements;
}

std::string TokenFile() {
  const std::string path = testing::TempDir("token") + "/token";
  std::ofstream(path) << kToken << "\n";
  return path;
}

class PsServerBadInput : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& extra_flags = {}) {
    std::vector<std::string> flags = {"--token_file=" + TokenFile()};
    flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
    auto s = ServerProcess::Start(flags);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    ChannelOptions co;
    co.max_message_bytes = 256 << 20;  // let oversized pushes leave the client
    stub_ = ParameterService::NewStub(*MakeChannel(server_->address(), co));
  }

  grpc::StatusCode Setup(const std::string& job, const JobSpec& spec,
                         const std::vector<int64_t>& workers,
                         const std::string& token = kToken) {
    SetupJobRequest r;
    r.set_job_id(job);
    *r.mutable_spec() = spec;
    r.set_shard_index(0);
    r.set_num_shards(1);
    for (int64_t w : workers) r.add_worker_ids(w);
    SetupJobResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kWait, token);
    return stub_->SetupJob(&ctx, r, &resp).error_code();
  }

  // A valid push of chunk 0 for `worker` (all gradients `value`).
  PushRequest ValidPush(const std::string& job, int64_t worker, uint64_t seq,
                        int64_t n, float value = 0.5f) {
    PushRequest p;
    p.set_job_id(job);
    p.set_worker_id(worker);
    p.set_seq(seq);
    p.set_clock(0);
    p.set_base_version(0);
    p.set_end_of_step(true);
    ChunkPayload* c = p.add_chunks();
    c->set_chunk_id(0);
    c->set_dtype(FLOAT32);
    c->set_num_elements(n);
    std::vector<float> g(n, value);
    c->set_data(std::string(reinterpret_cast<const char*>(g.data()), n * 4));
    return p;
  }

  grpc::Status Push(const PushRequest& p, const std::string& token = kToken,
                    absl::Duration timeout = kWait) {
    PushResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, timeout, token);
    return stub_->Push(&ctx, p, &resp);
  }

  grpc::Status Pull(const PullRequest& p, PullResponse* resp,
                    const std::string& token = kToken,
                    absl::Duration timeout = kWait) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, timeout, token);
    return stub_->Pull(&ctx, p, resp);
  }

  ShardStatus Status(const std::string& job) {
    GetShardStatusRequest r;
    r.set_job_id(job);
    ShardStatus s;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kWait, kToken);
    grpc::Status st = stub_->GetShardStatus(&ctx, r, &s);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }

  std::vector<float> Weights(const std::string& job, int64_t worker) {
    PullRequest r;
    r.set_job_id(job);
    r.set_worker_id(worker);
    PullResponse resp;
    grpc::Status st = Pull(r, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<float> out;
    for (const ChunkPayload& c : resp.chunks()) {
      const size_t at = out.size();
      out.resize(at + c.data().size() / 4);
      std::memcpy(out.data() + at, c.data().data(), c.data().size());
    }
    return out;
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<ParameterService::Stub> stub_;
};

// Every method, with no token and with a wrong one: UNAUTHENTICATED, and the
// shard is unchanged (not even the job set up by the refused SetupJob).
TEST_F(PsServerBadInput, EveryMethodRefusesMissingAndWrongTokens) {
  Start();
  const JobSpec spec = Spec(ConsistencySpec::ASP, 1);
  const int64_t n = ChunkElements(spec);
  for (const std::string token : {"", "wrong-token", "bad-input-test-tokeN"}) {
    SCOPED_TRACE("token '" + token + "'");
    EXPECT_EQ(Setup("other", spec, {1}, token),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  ASSERT_EQ(Setup("job", spec, {1}), grpc::StatusCode::OK);
  const std::vector<float> before = Weights("job", 1);
  for (const std::string token : {"", "wrong-token"}) {
    SCOPED_TRACE("token '" + token + "'");
    auto call = [&](auto method, const auto& request, auto* response) {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, kWait, token);
      return ((*stub_).*method)(&ctx, request, response).error_code();
    };
    PushResponse push_resp;
    EXPECT_EQ(call(&ParameterService::Stub::Push, ValidPush("job", 1, 1, n),
                   &push_resp),
              grpc::StatusCode::UNAUTHENTICATED);
    PullRequest pull;
    pull.set_job_id("job");
    pull.set_worker_id(1);
    PullResponse pull_resp;
    EXPECT_EQ(call(&ParameterService::Stub::Pull, pull, &pull_resp),
              grpc::StatusCode::UNAUTHENTICATED);
    UpdateMembershipRequest um;
    um.set_job_id("job");
    um.add_worker_ids(99);
    um.set_membership_epoch(5);
    UpdateMembershipResponse um_resp;
    EXPECT_EQ(call(&ParameterService::Stub::UpdateMembership, um, &um_resp),
              grpc::StatusCode::UNAUTHENTICATED);
    CheckpointRequest cp;
    cp.set_job_id("job");
    CheckpointResponse cp_resp;
    EXPECT_EQ(call(&ParameterService::Stub::Checkpoint, cp, &cp_resp),
              grpc::StatusCode::UNAUTHENTICATED);
    GetShardStatusRequest gs;
    gs.set_job_id("job");
    ShardStatus gs_resp;
    EXPECT_EQ(call(&ParameterService::Stub::GetShardStatus, gs, &gs_resp),
              grpc::StatusCode::UNAUTHENTICATED);
    TeardownJobRequest td;
    td.set_job_id("job");
    TeardownJobResponse td_resp;
    EXPECT_EQ(call(&ParameterService::Stub::TeardownJob, td, &td_resp),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // Nothing changed: the job is still there, at version 0, with worker 1
  // still its member and the same weights.
  const ShardStatus s = Status("job");
  EXPECT_EQ(s.version(), 0);
  EXPECT_EQ(s.pushes(), 0);
  EXPECT_EQ(s.last_checkpoint_version(), 0);
  EXPECT_EQ(Weights("job", 1), before);
  GetShardStatusRequest other;
  other.set_job_id("other");
  ShardStatus other_status;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, kWait, kToken);
  EXPECT_EQ(stub_->GetShardStatus(&ctx, other, &other_status).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

struct BadPush {
  const char* name;
  std::function<void(PushRequest*)> mutate;
  grpc::StatusCode code;
  const char* message_part;  // a piece of the error message
};

TEST_F(PsServerBadInput, BadPushesGetPreciseStatusesAndChangeNothing) {
  Start({"--max_message_bytes=1048576"});
  const JobSpec spec = Spec(ConsistencySpec::ASP, 1);
  const int64_t n = ChunkElements(spec);
  ASSERT_EQ(Setup("job", spec, {1}), grpc::StatusCode::OK);
  const std::vector<float> before = Weights("job", 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto set_element = [](PushRequest* p, int i, float v) {
    std::memcpy(p->mutable_chunks(0)->mutable_data()->data() + 4 * i, &v, 4);
  };
  const std::vector<BadPush> cases = {
      {"unknown chunk",
       [](PushRequest* p) { p->mutable_chunks(0)->set_chunk_id(12345); },
       grpc::StatusCode::INVALID_ARGUMENT, "does not exist"},
      {"negative chunk",
       [](PushRequest* p) { p->mutable_chunks(0)->set_chunk_id(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "does not exist"},
      {"element count differs",
       [](PushRequest* p) { p->mutable_chunks(0)->set_num_elements(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "elements"},
      {"long payload",
       [](PushRequest* p) {
         p->mutable_chunks(0)->mutable_data()->append(8, '\0');
       },
       grpc::StatusCode::INVALID_ARGUMENT, "bytes"},
      {"unknown dtype",
       [](PushRequest* p) {
         p->mutable_chunks(0)->set_dtype(static_cast<DType>(99));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "dtype"},
      {"fp16 with fp32 bytes",
       [](PushRequest* p) { p->mutable_chunks(0)->set_dtype(FLOAT16); },
       grpc::StatusCode::INVALID_ARGUMENT, "bytes"},
      {"chunk twice", [](PushRequest* p) { *p->add_chunks() = p->chunks(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "twice"},
      {"NaN gradient", [&](PushRequest* p) { set_element(p, 7, nan); },
       grpc::StatusCode::INVALID_ARGUMENT, "finite"},
      {"+Inf gradient", [&](PushRequest* p) { set_element(p, 0, inf); },
       grpc::StatusCode::INVALID_ARGUMENT, "finite"},
      {"-Inf gradient", [&](PushRequest* p) { set_element(p, n - 1, -inf); },
       grpc::StatusCode::INVALID_ARGUMENT, "finite"},
      {"seq 0", [](PushRequest* p) { p->set_seq(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "seq"},
      {"negative clock", [](PushRequest* p) { p->set_clock(-5); },
       grpc::StatusCode::INVALID_ARGUMENT, "clock"},
      {"base version from the future",
       [](PushRequest* p) { p->set_base_version(int64_t{1} << 60); },
       grpc::StatusCode::OUT_OF_RANGE, "ahead"},
      {"unknown worker", [](PushRequest* p) { p->set_worker_id(424242); },
       grpc::StatusCode::FAILED_PRECONDITION, "not an active member"},
      {"over --max_message_bytes",
       [](PushRequest* p) {
         p->mutable_chunks(0)->mutable_data()->resize(2 << 20);
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, ""},
  };
  uint64_t seq = 1;
  for (const BadPush& c : cases) {
    SCOPED_TRACE(c.name);
    PushRequest p = ValidPush("job", 1, seq++, n);
    c.mutate(&p);
    const grpc::Status st = Push(p);
    EXPECT_EQ(st.error_code(), c.code) << st.error_message();
    EXPECT_NE(st.error_message().find(c.message_part), std::string::npos)
        << st.error_message();
  }
  // No state changed, and the process still serves: a valid push applies.
  ShardStatus s = Status("job");
  EXPECT_EQ(s.version(), 0);
  EXPECT_EQ(s.pushes(), 0);
  EXPECT_EQ(Weights("job", 1), before);
  const grpc::Status ok = Push(ValidPush("job", 1, seq++, n));
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  s = Status("job");
  EXPECT_EQ(s.version(), 1);
  const std::vector<float> after = Weights("job", 1);
  ASSERT_EQ(after.size(), before.size());
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5f);
}

TEST_F(PsServerBadInput, BadPullsGetPreciseStatuses) {
  Start();
  const JobSpec spec = Spec(ConsistencySpec::SSP, 2);
  ASSERT_EQ(Setup("job", spec, {1, 2}), grpc::StatusCode::OK);
  PullRequest base;
  base.set_job_id("job");
  base.set_worker_id(1);
  PullResponse resp;
  PullRequest r = base;
  r.add_chunk_ids(999);
  EXPECT_EQ(Pull(r, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r = base;
  r.set_worker_id(7);
  EXPECT_EQ(Pull(r, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  r = base;
  r.set_job_id("no-such-job");
  EXPECT_EQ(Pull(r, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  // A clock far in the future: SSP makes the pull wait for the slowest
  // worker, bounded by the call's deadline; the other worker is not held up.
  r = base;
  r.set_clock(int64_t{1} << 50);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Pull(r, &resp, kToken, absl::Seconds(1)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  PullRequest other = base;
  other.set_worker_id(2);
  const grpc::Status st = Pull(other, &resp, kToken, absl::Seconds(5));
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Status("job").version(), 0);
}

// Two jobs on one shard: a worker of job A can neither push to nor pull from
// job B, and job B's weights stay as they were.
TEST_F(PsServerBadInput, WorkersAreIsolatedPerJob) {
  Start();
  const JobSpec spec = Spec(ConsistencySpec::ASP, 1);
  const int64_t n = ChunkElements(spec);
  ASSERT_EQ(Setup("job-a", spec, {1}), grpc::StatusCode::OK);
  ASSERT_EQ(Setup("job-b", spec, {2}), grpc::StatusCode::OK);
  const std::vector<float> b_before = Weights("job-b", 2);
  grpc::Status st = Push(ValidPush("job-b", 1, 1, n));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << st.error_message();
  PullRequest r;
  r.set_job_id("job-b");
  r.set_worker_id(1);
  PullResponse resp;
  EXPECT_EQ(Pull(r, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(resp.chunks_size(), 0);
  // Job A's own worker still works, and only on job A.
  st = Push(ValidPush("job-a", 1, 1, n));
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Status("job-a").version(), 1);
  EXPECT_EQ(Status("job-b").version(), 0);
  EXPECT_EQ(Weights("job-b", 2), b_before);
}

}  // namespace
}  // namespace ps
