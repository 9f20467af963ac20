// The coordinator with a real ps_server: the shard registers itself, a job is
// set up on it and torn down, ExplainJob reads the shard's real status, and
// a shard killed with -9 and restarted at the same address is set up again
// from its data directory. The worker is played by the test.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/rpc.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "tests/coordinator_process.h"
#include "tests/ps_server_process.h"

namespace ps {
namespace {

constexpr char kToken[] = "coordinator-ps-server-token";

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

class CoordinatorWithServer : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<testing::CoordinatorProcess>(
        testing::TempDir("coordinator"), kToken,
        std::vector<std::string>{"--heartbeat_interval_ms=100",
                                 "--check_dataset=false"});
    ASSERT_TRUE(coordinator_->Start().ok());
    shard_dir_ = testing::TempDir("shard");
    StartServer({});
  }

  void StartServer(std::vector<std::string> extra) {
    std::vector<std::string> flags = {
        "--coordinator=" + coordinator_->address(), "--data_dir=" + shard_dir_};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto server = testing::ServerProcess::Start(flags, {{"PS_TOKEN", kToken}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& req, Response* resp) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, absl::Seconds(10), kToken);
    return (coordinator_->stub()->*method)(&ctx, req, resp);
  }

  // Waits (bounded) until the server at `address` is an ALIVE member.
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

  HeartbeatResponse Heartbeat(int64_t id, const std::string& job) {
    HeartbeatRequest req;
    req.set_member_id(id);
    req.set_job_id(job);
    // The job's steps per data shard, as a worker reports them once it
    // has read the job's data (the coordinator cuts data plans by them).
    req.set_shard_steps(600);
    req.set_steps_per_epoch(600);
    HeartbeatResponse resp;
    EXPECT_TRUE(Call(&CoordinatorService::Stub::Heartbeat, req, &resp).ok());
    return resp;
  }

  // Heartbeats as the worker until `pred` holds for the job's events;
  // bounded.
  bool AwaitEvent(int64_t worker, const std::string& job,
                  const std::string& kind) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      Heartbeat(worker, job);
      GetEventsRequest req;
      req.set_job_id(job);
      GetEventsResponse events;
      if (Call(&CoordinatorService::Stub::GetEvents, req, &events).ok()) {
        for (const JobEvent& e : events.events()) {
          if (e.kind() == kind) return true;
        }
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  std::string SubmitAndAwaitTrain(int64_t worker, const std::string& name) {
    SubmitJobRequest req;
    *req.mutable_spec() = Spec(name);
    SubmitJobResponse resp;
    grpc::Status s = Call(&CoordinatorService::Stub::SubmitJob, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      const HeartbeatResponse hb = Heartbeat(worker, resp.job_id());
      if (hb.assignment().command() == WorkerAssignment::TRAIN) {
        EXPECT_EQ(hb.assignment().server_addresses(0), server_->address());
        return resp.job_id();
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "job " << resp.job_id() << " never started";
    return resp.job_id();
  }

  std::string Explain(const std::string& job) {
    ExplainJobRequest req;
    req.set_job_id(job);
    ExplainJobResponse resp;
    EXPECT_TRUE(Call(&CoordinatorService::Stub::ExplainJob, req, &resp).ok());
    return resp.text();
  }

  int64_t RegisterWorker() {
    RegisterRequest req;
    req.set_role(WORKER);
    req.set_pid(1);
    RegisterResponse resp;
    EXPECT_TRUE(Call(&CoordinatorService::Stub::Register, req, &resp).ok());
    return resp.member_id();
  }

  std::unique_ptr<testing::CoordinatorProcess> coordinator_;
  std::string shard_dir_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(CoordinatorWithServer, JobIsSetUpExplainedAndTornDown) {
  ASSERT_TRUE(AwaitServer(server_->address()));
  const int64_t worker = RegisterWorker();
  const std::string job = SubmitAndAwaitTrain(worker, "with-server");
  const std::string text = Explain(job);
  EXPECT_NE(text.find("version 0"), std::string::npos) << text;
  EXPECT_EQ(text.find("UNREACHABLE"), std::string::npos) << text;

  // The only worker's last report: its evaluation of the final model, and
  // done.
  ReportMetricsRequest done;
  done.set_member_id(worker);
  done.set_job_id(job);
  MetricPoint* last = done.add_points();
  last->set_name("test_accuracy");
  last->set_value(0.8);
  last->set_final_model(true);
  done.set_done(true);
  ReportMetricsResponse mr;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::ReportMetrics, done, &mr).ok());
  GetJobRequest g;
  g.set_job_id(job);
  JobRecord r;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::GetJob, g, &r).ok());
  EXPECT_EQ(r.state(), SUCCEEDED);
  // The shard's counters were read before its teardown.
  EXPECT_TRUE(AwaitEvent(worker, job, "shard_summary"));
}

TEST_F(CoordinatorWithServer, KilledShardIsSetUpAgainAtTheSameAddress) {
  ASSERT_TRUE(AwaitServer(server_->address()));
  const int64_t worker = RegisterWorker();
  const std::string job = SubmitAndAwaitTrain(worker, "shard-restart");
  const std::string address = server_->address();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  ASSERT_TRUE(server_->Signal(SIGKILL).ok());
  server_.reset();
  StartServer({absl::StrCat("--port=", port)});
  ASSERT_EQ(server_->address(), address);
  // The new process registers at the old address; the coordinator finds the
  // job missing there and sets it up again (restore from the data dir).
  EXPECT_TRUE(AwaitEvent(worker, job, "server_restored"));
  GetJobRequest g;
  g.set_job_id(job);
  JobRecord r;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::GetJob, g, &r).ok());
  EXPECT_EQ(r.state(), RUNNING);
  const std::string text = Explain(job);
  EXPECT_EQ(text.find("UNREACHABLE"), std::string::npos) << text;
}

TEST_F(CoordinatorWithServer, SilentWorkerIsEvictedAndRejoins) {
  ASSERT_TRUE(AwaitServer(server_->address()));
  const int64_t a = RegisterWorker();
  const int64_t b = RegisterWorker();
  JobSpec spec = Spec("eviction");
  spec.set_num_workers(2);
  spec.mutable_consistency()->set_heartbeat_timeout_ms(1000);
  SubmitJobRequest req;
  *req.mutable_spec() = spec;
  SubmitJobResponse submitted;
  ASSERT_TRUE(Call(&CoordinatorService::Stub::SubmitJob, req, &submitted).ok());
  const std::string job = submitted.job_id();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline &&
         Heartbeat(a, job).assignment().command() != WorkerAssignment::TRAIN) {
    Heartbeat(b, job);
    absl::SleepFor(absl::Milliseconds(50));
  }
  // b goes silent; a keeps heartbeating and ends up with both data shards.
  ASSERT_TRUE(AwaitEvent(a, job, "evicted"));
  const WorkerAssignment survivor = Heartbeat(a, job).assignment();
  EXPECT_EQ(survivor.data_shards_size(), 2);
  EXPECT_EQ(survivor.membership_epoch(), 2);
  EXPECT_TRUE(survivor.evaluator());
  // The real shard accepted the new membership: explain shows it serving.
  const std::string text = Explain(job);
  EXPECT_EQ(text.find("UNREACHABLE"), std::string::npos) << text;
  EXPECT_NE(text.find("left: no heartbeat"), std::string::npos) << text;

  // b comes back (a new process under its old id) and rejoins.
  RegisterRequest again;
  again.set_role(WORKER);
  again.set_member_id(b);
  again.set_pid(2);
  RegisterResponse registered;
  ASSERT_TRUE(
      Call(&CoordinatorService::Stub::Register, again, &registered).ok());
  ASSERT_TRUE(AwaitEvent(a, job, "rejoined"));
  const WorkerAssignment back = Heartbeat(b, "").assignment();
  EXPECT_EQ(back.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(back.rank(), 1);
  EXPECT_EQ(back.membership_epoch(), 3);
}

}  // namespace
}  // namespace ps
