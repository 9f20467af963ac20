// A misbehaving client against the real coordinator binary, started with a
// token file: every CoordinatorService method refuses calls with no or a
// wrong token; bad requests (unknown job or member, bad metric points, a
// message over the receive limit, an invalid spec) get a precise status and
// change nothing; a member reporting a clock far in the future does not move
// the job. The shard is a fake ParameterService served in-process.
// (ListJobs without a token and GetJob of an unknown job are in
// coordinator_lifecycle_test; not repeated.)
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "proto/parameter_service.grpc.pb.h"
#include "tests/coordinator_process.h"

namespace ps {
namespace {

constexpr char kToken[] = "coordinator-bad-input-token";
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// Accepts every control call.
class FakeShard : public ParameterService::Service {
 public:
  grpc::Status SetupJob(grpc::ServerContext*, const SetupJobRequest*,
                        SetupJobResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status TeardownJob(grpc::ServerContext*, const TeardownJobRequest*,
                           TeardownJobResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status UpdateMembership(grpc::ServerContext*,
                                const UpdateMembershipRequest*,
                                UpdateMembershipResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status GetShardStatus(grpc::ServerContext*,
                              const GetShardStatusRequest* req,
                              ShardStatus* resp) override {
    resp->set_job_id(req->job_id());
    return grpc::Status::OK;
  }
};

JobSpec Spec(const std::string& name) {
  JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->mutable_mlp()->set_input_dim(784);
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_model()->mutable_mlp()->set_num_classes(10);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_data()->set_max_steps(1000);
  spec.set_num_workers(1);
  return spec;
}

class CoordinatorBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &shard_port_);
    builder.RegisterService(&shard_);
    shard_server_ = builder.BuildAndStart();
    ASSERT_NE(shard_server_, nullptr);
    const std::string name =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string dir = TmpDir() + "/bad_input_" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string token_file = dir + "/token";
    std::ofstream(token_file) << kToken << "\n";
    // The token comes from the file; the environment variable the helper
    // also sets holds a different one, which must not be accepted.
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(
        dir + "/store", "not-the-token",
        std::vector<std::string>{"--token_file=" + token_file,
                                 "--heartbeat_interval_ms=100",
                                 "--check_dataset=false"});
    ASSERT_TRUE(coordinator_->Start().ok());
  }

  void TearDown() override {
    coordinator_.reset();
    shard_server_->Shutdown(std::chrono::system_clock::now());
  }

  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& req, Response* resp,
                    const std::string& token = kToken) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kRpcTimeout, token);
    return (coordinator_->stub()->*method)(&ctx, req, resp);
  }

  int64_t Register(MemberRole role) {
    RegisterRequest req;
    req.set_role(role);
    req.set_pid(4242);
    if (role == SERVER) {
      req.set_address("127.0.0.1:" + std::to_string(shard_port_));
    }
    RegisterResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::Register, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.member_id();
  }

  HeartbeatResponse Heartbeat(int64_t id, const std::string& job = "",
                              int64_t clock = 0) {
    HeartbeatRequest req;
    req.set_member_id(id);
    req.set_job_id(job);
    req.set_clock(clock);
    HeartbeatResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::Heartbeat, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  std::string Submit(const JobSpec& spec) {
    SubmitJobRequest req;
    *req.mutable_spec() = spec;
    SubmitJobResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::SubmitJob, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  JobRecord Get(const std::string& job) {
    GetJobRequest req;
    req.set_job_id(job);
    JobRecord r;
    grpc::Status s = Call(&CoordinatorService::Stub::GetJob, req, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r;
  }

  int NumMetricPoints(const std::string& job) {
    GetMetricsRequest req;
    req.set_job_id(job);
    GetMetricsResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::GetMetrics, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.points_size();
  }

  // A server and a worker, and a job the worker is training (bounded wait).
  std::string RunningJob(int64_t* worker) {
    const int64_t server = Register(SERVER);
    *worker = Register(WORKER);
    const std::string job = Submit(Spec("bad-input"));
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (absl::Now() < deadline) {
      Heartbeat(server);
      const HeartbeatResponse hb = Heartbeat(*worker, job);
      if (hb.assignment().command() == WorkerAssignment::TRAIN) return job;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "the worker never got job " << job;
    return job;
  }

  FakeShard shard_;
  int shard_port_ = 0;
  std::unique_ptr<grpc::Server> shard_server_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
};

TEST_F(CoordinatorBadInput, EveryMethodRefusesMissingAndWrongTokens) {
  using Stub = CoordinatorService::Stub;
  for (const std::string token : {"", "wrong", "not-the-token"}) {
    SCOPED_TRACE("token '" + token + "'");
    auto code = [&](auto method, const auto& req, auto* resp) {
      return Call(method, req, resp, token).error_code();
    };
    const auto kUnauth = grpc::StatusCode::UNAUTHENTICATED;
    RegisterRequest reg;
    reg.set_role(WORKER);
    RegisterResponse reg_r;
    EXPECT_EQ(code(&Stub::Register, reg, &reg_r), kUnauth);
    HeartbeatRequest hb;
    hb.set_member_id(1);
    HeartbeatResponse hb_r;
    EXPECT_EQ(code(&Stub::Heartbeat, hb, &hb_r), kUnauth);
    SubmitJobRequest sub;
    *sub.mutable_spec() = Spec("refused");
    SubmitJobResponse sub_r;
    EXPECT_EQ(code(&Stub::SubmitJob, sub, &sub_r), kUnauth);
    GetJobRequest get;
    get.set_job_id("job-1");
    JobRecord get_r;
    EXPECT_EQ(code(&Stub::GetJob, get, &get_r), kUnauth);
    CancelJobRequest cancel;
    cancel.set_job_id("job-1");
    CancelJobResponse cancel_r;
    EXPECT_EQ(code(&Stub::CancelJob, cancel, &cancel_r), kUnauth);
    ReportMetricsRequest rm;
    rm.set_job_id("job-1");
    ReportMetricsResponse rm_r;
    EXPECT_EQ(code(&Stub::ReportMetrics, rm, &rm_r), kUnauth);
    ReportFailureRequest rf;
    rf.set_job_id("job-1");
    ReportFailureResponse rf_r;
    EXPECT_EQ(code(&Stub::ReportFailure, rf, &rf_r), kUnauth);
    GetMetricsRequest gm;
    gm.set_job_id("job-1");
    GetMetricsResponse gm_r;
    EXPECT_EQ(code(&Stub::GetMetrics, gm, &gm_r), kUnauth);
    GetEventsRequest ge;
    ge.set_job_id("job-1");
    GetEventsResponse ge_r;
    EXPECT_EQ(code(&Stub::GetEvents, ge, &ge_r), kUnauth);
    ListMembersResponse lm_r;
    EXPECT_EQ(code(&Stub::ListMembers, ListMembersRequest(), &lm_r), kUnauth);
    ExplainJobRequest ex;
    ex.set_job_id("job-1");
    ExplainJobResponse ex_r;
    EXPECT_EQ(code(&Stub::ExplainJob, ex, &ex_r), kUnauth);
    // The streaming call.
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kRpcTimeout, token);
    WatchJobRequest w;
    w.set_job_id("job-1");
    auto reader = coordinator_->stub()->WatchJob(&ctx, w);
    JobRecord r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), kUnauth);
  }
  // Nothing of that registered a member or queued a job.
  ListMembersResponse members;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::ListMembers, ListMembersRequest(),
                   &members)
                  .ok());
  EXPECT_EQ(members.members_size(), 0);
  ListJobsResponse jobs;
  ASSERT_TRUE(
      Call(&CoordinatorService::Stub::ListJobs, ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(CoordinatorBadInput, BadRequestsGetPreciseStatusesAndChangeNothing) {
  using Stub = CoordinatorService::Stub;
  int64_t worker = 0;
  const std::string job = RunningJob(&worker);
  ReportMetricsRequest good;
  good.set_member_id(worker);
  good.set_job_id(job);
  MetricPoint* p = good.add_points();
  p->set_name("train_loss");
  p->set_value(2.0);
  p->set_step(1);
  ReportMetricsResponse rm_r;
  ASSERT_TRUE(Call(&Stub::ReportMetrics, good, &rm_r).ok());
  const int points = NumMetricPoints(job);
  const int64_t step = Get(job).global_step();

  struct Case {
    const char* name;
    ReportMetricsRequest request;
    grpc::StatusCode code;
  };
  std::vector<Case> cases;
  {
    ReportMetricsRequest r = good;
    r.set_job_id("job-404");
    cases.push_back({"unknown job", r, grpc::StatusCode::NOT_FOUND});
  }
  {
    ReportMetricsRequest r = good;
    r.set_member_id(987654);
    cases.push_back(
        {"not a worker of the job", r, grpc::StatusCode::FAILED_PRECONDITION});
  }
  {
    ReportMetricsRequest r = good;
    r.mutable_points(0)->set_name("");
    cases.push_back(
        {"empty metric name", r, grpc::StatusCode::INVALID_ARGUMENT});
  }
  {
    ReportMetricsRequest r = good;
    r.mutable_points(0)->set_name(std::string(65, 'x'));
    cases.push_back(
        {"metric name too long", r, grpc::StatusCode::INVALID_ARGUMENT});
  }
  {
    // Over gRPC's default 4 MB receive limit of the coordinator.
    ReportMetricsRequest r = good;
    for (int i = 0; i < 5; ++i) {
      MetricPoint* q = r.add_points();
      q->set_name("x");
      q->set_step(1);
    }
    r.mutable_points(1)->set_name(std::string(5 << 20, 'y'));
    cases.push_back({"huge message", r, grpc::StatusCode::RESOURCE_EXHAUSTED});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const grpc::Status s = Call(&Stub::ReportMetrics, c.request, &rm_r);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_FALSE(s.error_message().empty());
  }
  EXPECT_EQ(NumMetricPoints(job), points);
  EXPECT_EQ(Get(job).global_step(), step);

  // Unknown jobs on the other job calls: NOT_FOUND naming the job.
  CancelJobRequest cancel;
  cancel.set_job_id("job-404");
  CancelJobResponse cancel_r;
  grpc::Status s = Call(&Stub::CancelJob, cancel, &cancel_r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("job-404"), std::string::npos);
  GetEventsRequest ge;
  ge.set_job_id("job-404");
  GetEventsResponse ge_r;
  EXPECT_EQ(Call(&Stub::GetEvents, ge, &ge_r).error_code(),
            grpc::StatusCode::NOT_FOUND);
  GetMetricsRequest gm;
  gm.set_job_id("job-404");
  GetMetricsResponse gm_r;
  EXPECT_EQ(Call(&Stub::GetMetrics, gm, &gm_r).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ExplainJobRequest ex;
  ex.set_job_id("job-404");
  ExplainJobResponse ex_r;
  EXPECT_EQ(Call(&Stub::ExplainJob, ex, &ex_r).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // An invalid spec names the field; a huge one is refused by gRPC.
  SubmitJobRequest sub;
  *sub.mutable_spec() = Spec("bad");
  sub.mutable_spec()->mutable_optimizer()->set_learning_rate(-1);
  SubmitJobResponse sub_r;
  s = Call(&Stub::SubmitJob, sub, &sub_r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("optimizer.learning_rate"),
            std::string::npos)
      << s.error_message();
  *sub.mutable_spec() = Spec(std::string(5 << 20, 'n'));
  EXPECT_EQ(Call(&Stub::SubmitJob, sub, &sub_r).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ListJobsResponse jobs;
  ASSERT_TRUE(Call(&Stub::ListJobs, ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 1);
  // A heartbeat from a member the coordinator does not know: told to
  // register, nothing else.
  EXPECT_TRUE(Heartbeat(555555).reregister());
  // Still serving, and the job untouched.
  EXPECT_EQ(Get(job).state(), RUNNING);
}

TEST_F(CoordinatorBadInput, ClockFarInTheFutureDoesNotMoveTheJob) {
  int64_t worker = 0;
  const std::string job = RunningJob(&worker);
  Heartbeat(worker, job, 7);
  ASSERT_EQ(Get(job).global_step(), 7);
  const int64_t far = int64_t{1} << 60;
  Heartbeat(worker, job, far);
  ReportMetricsRequest r;
  r.set_member_id(worker);
  r.set_job_id(job);
  MetricPoint* p = r.add_points();
  p->set_name("train_loss");
  p->set_value(1.0);
  p->set_step(far);
  ReportMetricsResponse rm_r;
  const grpc::Status s =
      Call(&CoordinatorService::Stub::ReportMetrics, r, &rm_r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("points[0].step"), std::string::npos)
      << s.error_message();
  const JobRecord record = Get(job);
  EXPECT_LE(record.global_step(), record.total_steps())
      << "a member's clock of 2^60 became the job's step";
  EXPECT_EQ(record.state(), RUNNING);
  EXPECT_EQ(record.global_step(), 7);
}

}  // namespace
}  // namespace ps
