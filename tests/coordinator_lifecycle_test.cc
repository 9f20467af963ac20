// The coordinator binary through its real RPCs: a job's lifecycle (submit,
// watch, cancel), a bad spec rejected with the field named, the cluster
// token, and a kill -9 restart that keeps every acknowledged record and
// metric. Workers are played by the test; the shard is a fake
// ParameterService served in-process.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "proto/parameter_service.grpc.pb.h"
#include "tests/coordinator_process.h"

namespace ps {
namespace {

constexpr char kToken[] = "lifecycle-test-token";
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// A shard that accepts every control call and remembers them.
class FakeShard : public ParameterService::Service {
 public:
  grpc::Status SetupJob(grpc::ServerContext*, const SetupJobRequest* req,
                        SetupJobResponse*) override {
    absl::MutexLock l(&mu_);
    setups_.push_back(req->job_id());
    return grpc::Status::OK;
  }
  grpc::Status TeardownJob(grpc::ServerContext*, const TeardownJobRequest* req,
                           TeardownJobResponse*) override {
    absl::MutexLock l(&mu_);
    teardowns_.push_back(req->job_id());
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
    resp->set_version(3);
    return grpc::Status::OK;
  }
  int setups() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(setups_.size());
  }
  bool TornDown(const std::string& job) {
    absl::MutexLock l(&mu_);
    return std::find(teardowns_.begin(), teardowns_.end(), job) !=
           teardowns_.end();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> setups_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> teardowns_ ABSL_GUARDED_BY(mu_);
};

JobSpec Spec(const std::string& name) {
  JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->mutable_mlp()->set_input_dim(784);
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  spec.mutable_model()->mutable_mlp()->set_num_classes(10);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.set_num_workers(1);
  return spec;
}

class CoordinatorLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &shard_port_);
    builder.RegisterService(&shard_);
    shard_server_ = builder.BuildAndStart();
    ASSERT_NE(shard_server_, nullptr);
    data_dir_ = TmpDir() + "/store_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(data_dir_);
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(
        data_dir_, kToken,
        std::vector<std::string>{"--heartbeat_interval_ms=100",
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

  int64_t Register(MemberRole role, int64_t id = 0) {
    RegisterRequest req;
    req.set_role(role);
    req.set_member_id(id);
    req.set_pid(4242);
    if (role == SERVER) {
      req.set_address("127.0.0.1:" + std::to_string(shard_port_));
    }
    RegisterResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::Register, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.member_id();
  }

  HeartbeatResponse Heartbeat(int64_t id, const std::string& job = "") {
    HeartbeatRequest req;
    req.set_member_id(id);
    req.set_job_id(job);
    HeartbeatResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::Heartbeat, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  // Heartbeats (server and worker) until the worker is told to train
  // `job`; bounded.
  WorkerAssignment AwaitTrain(int64_t server, int64_t worker,
                              const std::string& job) {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (absl::Now() < deadline) {
      Heartbeat(server);
      HeartbeatResponse hb = Heartbeat(worker, job);
      if (hb.assignment().command() == WorkerAssignment::TRAIN &&
          hb.assignment().job_id() == job) {
        return hb.assignment();
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "worker " << worker << " never got job " << job;
    return WorkerAssignment();
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
    JobRecord resp;
    grpc::Status s = Call(&CoordinatorService::Stub::GetJob, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  FakeShard shard_;
  int shard_port_ = 0;
  std::unique_ptr<grpc::Server> shard_server_;
  std::string data_dir_;
  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
};

TEST_F(CoordinatorLifecycle, SubmitWatchCancel) {
  const int64_t server = Register(SERVER);
  const int64_t worker = Register(WORKER);
  const std::string job = Submit(Spec("lifecycle"));
  ASSERT_FALSE(job.empty());

  // Watch from another thread until the stream ends.
  std::vector<JobState> seen;
  grpc::Status watch_status;
  std::thread watcher([&] {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, absl::Seconds(30), kToken);
    WatchJobRequest req;
    req.set_job_id(job);
    req.set_interval_ms(200);
    auto reader = coordinator_->stub()->WatchJob(&ctx, req);
    JobRecord r;
    while (reader->Read(&r)) seen.push_back(r.state());
    watch_status = reader->Finish();
  });

  const WorkerAssignment a = AwaitTrain(server, worker, job);
  EXPECT_EQ(a.rank(), 0);
  EXPECT_TRUE(a.evaluator());
  ASSERT_EQ(a.server_addresses_size(), 1);
  EXPECT_EQ(a.server_addresses(0), "127.0.0.1:" + std::to_string(shard_port_));
  EXPECT_EQ(shard_.setups(), 1);
  EXPECT_EQ(Get(job).state(), RUNNING);

  ReportMetricsRequest m;
  m.set_member_id(worker);
  m.set_job_id(job);
  MetricPoint* p = m.add_points();
  p->set_name("train_loss");
  p->set_value(1.25);
  p->set_step(5);
  ReportMetricsResponse mr;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::ReportMetrics, m, &mr).ok());

  ExplainJobRequest ex;
  ex.set_job_id(job);
  ExplainJobResponse text;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::ExplainJob, ex, &text).ok());
  EXPECT_NE(text.text().find("RUNNING"), std::string::npos) << text.text();
  EXPECT_NE(text.text().find("version 3"), std::string::npos) << text.text();

  CancelJobRequest c;
  c.set_job_id(job);
  c.set_reason("test over");
  CancelJobResponse cr;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::CancelJob, c, &cr).ok());
  EXPECT_EQ(cr.state(), CANCELLED);
  watcher.join();
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_message();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), CANCELLED);
  EXPECT_NE(std::find(seen.begin(), seen.end(), RUNNING), seen.end());
  EXPECT_EQ(Heartbeat(worker, job).assignment().command(),
            WorkerAssignment::STOP);
  EXPECT_TRUE(shard_.TornDown(job));

  GetEventsRequest er;
  er.set_job_id(job);
  GetEventsResponse events;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::GetEvents, er, &events).ok());
  EXPECT_GE(events.events_size(), 3);  // submitted, running, cancelled
}

TEST_F(CoordinatorLifecycle, BadSpecIsRejectedNamingTheField) {
  JobSpec spec = Spec("bad");
  spec.mutable_optimizer()->set_learning_rate(-1);
  SubmitJobRequest req;
  *req.mutable_spec() = spec;
  SubmitJobResponse resp;
  grpc::Status s = Call(&CoordinatorService::Stub::SubmitJob, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("optimizer.learning_rate"),
            std::string::npos)
      << s.error_message();
  ListJobsResponse jobs;
  ASSERT_TRUE(
      Call(&CoordinatorService::Stub::ListJobs, ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(CoordinatorLifecycle, CallsWithoutTheTokenAreRefused) {
  ListJobsResponse jobs;
  EXPECT_EQ(
      Call(&CoordinatorService::Stub::ListJobs, ListJobsRequest(), &jobs, "")
          .error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call(&CoordinatorService::Stub::ListJobs, ListJobsRequest(), &jobs,
                 "wrong")
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  GetJobRequest g;
  g.set_job_id("job-404");
  JobRecord r;
  EXPECT_EQ(Call(&CoordinatorService::Stub::GetJob, g, &r).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorLifecycle, KillNineRestartKeepsAcknowledgedRecordAndMetrics) {
  const int64_t server = Register(SERVER);
  const int64_t worker = Register(WORKER);
  const std::string job = Submit(Spec("survivor"));
  AwaitTrain(server, worker, job);
  ReportMetricsRequest m;
  m.set_member_id(worker);
  m.set_job_id(job);
  for (int step = 1; step <= 3; ++step) {
    MetricPoint* p = m.add_points();
    p->set_name("train_loss");
    p->set_value(2.0 / step);
    p->set_step(step);
  }
  ReportMetricsResponse mr;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::ReportMetrics, m, &mr).ok());

  coordinator_->Stop(SIGKILL);  // no chance to flush anything
  ASSERT_TRUE(coordinator_->Start().ok());

  const JobRecord r = Get(job);
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_EQ(r.spec().name(), "survivor");
  EXPECT_EQ(r.global_step(), 3);
  ASSERT_EQ(r.workers_size(), 1);
  EXPECT_EQ(r.workers(0), worker);
  GetMetricsRequest g;
  g.set_job_id(job);
  g.set_format("csv");
  GetMetricsResponse metrics;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::GetMetrics, g, &metrics).ok());
  ASSERT_EQ(metrics.points_size(), 3);
  EXPECT_DOUBLE_EQ(metrics.points(2).value(), 2.0 / 3);
  EXPECT_NE(metrics.text().find("train_loss,3,"), std::string::npos);

  // The members learn that they must register again, keep their ids, and
  // the worker gets its assignment back; then the job can finish.
  EXPECT_TRUE(Heartbeat(worker, job).reregister());
  EXPECT_EQ(Register(SERVER, server), server);
  EXPECT_EQ(Register(WORKER, worker), worker);
  const WorkerAssignment a = AwaitTrain(server, worker, job);
  EXPECT_EQ(a.rank(), 0);
  EXPECT_TRUE(a.others_done()) << "the only worker";
  // The worker's last report: its evaluation of the final model, and done.
  m.clear_points();
  MetricPoint* last = m.add_points();
  last->set_name("test_accuracy");
  last->set_value(0.8);
  last->set_step(3);
  last->set_final_model(true);
  m.set_done(true);
  ASSERT_TRUE(Call(&CoordinatorService::Stub::ReportMetrics, m, &mr).ok());
  EXPECT_EQ(Get(job).state(), SUCCEEDED);
  EXPECT_TRUE(Get(job).final_evaluation());
}

}  // namespace
}  // namespace ps
