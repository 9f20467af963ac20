#include "worker/coordinator_link.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/coordinator_service.grpc.pb.h"

namespace ps::worker {
namespace {

// A coordinator that registers, answers heartbeats (with the assignment
// set, if any) and keeps the metric
// reports it takes; `down` makes it answer UNAVAILABLE to reports (a
// coordinator that is restarting) and `refuse_job` NOT_FOUND for one job.
class FakeCoordinator final : public CoordinatorService::Service {
 public:
  FakeCoordinator() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeCoordinator() override { Shutdown(); }

  void Shutdown() {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  grpc::Status Register(grpc::ServerContext*, const RegisterRequest*,
                        RegisterResponse* resp) override {
    resp->set_member_id(7);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest*,
                         HeartbeatResponse* resp) override {
    absl::MutexLock l(&mu_);
    if (assignment_.has_value()) *resp->mutable_assignment() = *assignment_;
    return grpc::Status::OK;
  }
  grpc::Status ReportMetrics(grpc::ServerContext*,
                             const ReportMetricsRequest* req,
                             ReportMetricsResponse*) override {
    absl::MutexLock l(&mu_);
    ++attempts_;
    if (down_) return grpc::Status(grpc::UNAVAILABLE, "restarting");
    if (req->job_id() == refuse_job_) {
      return grpc::Status(grpc::NOT_FOUND, "no such job");
    }
    reports_.push_back(*req);
    return grpc::Status::OK;
  }

  void set_down(bool down) {
    absl::MutexLock l(&mu_);
    down_ = down;
  }
  // What the heartbeats' answers carry from now on.
  void set_assignment(const WorkerAssignment& a) {
    absl::MutexLock l(&mu_);
    assignment_ = a;
  }
  void set_refuse_job(const std::string& job) {
    absl::MutexLock l(&mu_);
    refuse_job_ = job;
  }
  int attempts() {
    absl::MutexLock l(&mu_);
    return attempts_;
  }
  std::vector<ReportMetricsRequest> reports() {
    absl::MutexLock l(&mu_);
    return reports_;
  }
  // Every point's value, in the order taken.
  std::vector<double> values() {
    std::vector<double> out;
    for (const ReportMetricsRequest& r : reports()) {
      for (const MetricPoint& p : r.points()) out.push_back(p.value());
    }
    return out;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  std::string refuse_job_ ABSL_GUARDED_BY(mu_);
  std::optional<WorkerAssignment> assignment_ ABSL_GUARDED_BY(mu_);
  std::vector<ReportMetricsRequest> reports_ ABSL_GUARDED_BY(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

std::vector<MetricPoint> Points(const std::string& name, double first,
                                int count) {
  std::vector<MetricPoint> out(count);
  for (int i = 0; i < count; ++i) {
    out[i].set_name(name);
    out[i].set_value(first + i);
  }
  return out;
}

std::string TmpFile(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

CoordinatorLinkOptions Options() {
  CoordinatorLinkOptions o;
  o.heartbeat_interval = absl::Milliseconds(20);
  o.rpc_timeout = absl::Seconds(1);
  o.flush_on_stop = absl::Seconds(1);
  return o;
}

TEST(CoordinatorLink, DeliversReportsInOrderWithTheirMemberAndClock) {
  FakeCoordinator coordinator;
  CoordinatorLinkOptions o = Options();
  o.address = coordinator.address();
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  (*link)->SetProgress("job-1", 40, 0);
  (*link)->ReportMetrics("job-1", Points("train_loss", 0, 3), false);
  (*link)->SetProgress("job-1", 50, 0);
  (*link)->ReportMetrics("job-1", Points("test_accuracy", 3, 1), true);
  ASSERT_TRUE((*link)->Flush(absl::Seconds(10)));
  const std::vector<ReportMetricsRequest> got = coordinator.reports();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].member_id(), 7);
  EXPECT_EQ(got[0].clock(), 40);
  EXPECT_FALSE(got[0].done());
  EXPECT_EQ(got[1].clock(), 50);
  EXPECT_TRUE(got[1].done());
  EXPECT_EQ(coordinator.values(), (std::vector<double>{0, 1, 2, 3}));
  (*link)->Stop();
}

// A coordinator that is away (restarting) for longer than any one call's
// retries loses none of the points reported meanwhile.
TEST(CoordinatorLink, HoldsReportsWhileTheCoordinatorIsAway) {
  FakeCoordinator coordinator;
  CoordinatorLinkOptions o = Options();
  o.address = coordinator.address();
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok());
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  coordinator.set_down(true);
  for (int i = 0; i < 20; ++i) {
    (*link)->ReportMetrics("job-1", Points("train_loss", i * 2, 2), false);
  }
  EXPECT_FALSE((*link)->Flush(absl::Milliseconds(300)));
  EXPECT_TRUE(coordinator.reports().empty());
  coordinator.set_down(false);
  ASSERT_TRUE((*link)->Flush(absl::Seconds(10)));
  std::vector<double> want(40);
  for (int i = 0; i < 40; ++i) want[i] = i;
  EXPECT_EQ(coordinator.values(), want);
  EXPECT_EQ((*link)->dropped_points(), 0);
  (*link)->Stop();
}

// The coordinator restarts at another address (written to the coordinator
// file): the held reports go there.
TEST(CoordinatorLink, FollowsTheCoordinatorFileWithHeldReports) {
  auto first = std::make_unique<FakeCoordinator>();
  const std::string file = TmpFile("coordinator_link_follows.addr");
  WriteFile(file, first->address());
  CoordinatorLinkOptions o = Options();
  o.file = file;
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok());
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  (*link)->ReportMetrics("job-1", Points("train_loss", 0, 1), false);
  ASSERT_TRUE((*link)->Flush(absl::Seconds(10)));
  first->Shutdown();
  (*link)->ReportMetrics("job-1", Points("train_loss", 1, 1), false);
  (*link)->ReportMetrics("job-1", Points("test_accuracy", 2, 1), true);
  EXPECT_FALSE((*link)->Flush(absl::Milliseconds(300)));
  FakeCoordinator second;
  WriteFile(file, second.address());
  ASSERT_TRUE((*link)->Flush(absl::Seconds(20)));
  EXPECT_EQ(first->values(), (std::vector<double>{0}));
  EXPECT_EQ(second.values(), (std::vector<double>{1, 2}));
  ASSERT_EQ(second.reports().size(), 2u);
  EXPECT_TRUE(second.reports()[1].done());
  (*link)->Stop();
}

// Stop() with the coordinator away tries the held reports for
// flush_on_stop, backing off between tries (no spinning), then gives up.
TEST(CoordinatorLink, StopTriesHeldReportsForABoundedTime) {
  FakeCoordinator coordinator;
  CoordinatorLinkOptions o = Options();
  o.address = coordinator.address();
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok());
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  coordinator.set_down(true);
  (*link)->ReportMetrics("job-1", Points("train_loss", 0, 1), true);
  const absl::Time t0 = absl::Now();
  (*link)->Stop();
  EXPECT_LT(absl::Now() - t0, o.flush_on_stop + absl::Seconds(3));
  EXPECT_GE(coordinator.attempts(), 2);
  EXPECT_LE(coordinator.attempts(), 20) << "retries back off";
  EXPECT_TRUE(coordinator.reports().empty());
}

// A report the coordinator refuses (a job it does not know) is dropped
// without holding back the ones after it.
TEST(CoordinatorLink, DropsARefusedReportAndGoesOn) {
  FakeCoordinator coordinator;
  coordinator.set_refuse_job("gone");
  CoordinatorLinkOptions o = Options();
  o.address = coordinator.address();
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok());
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  (*link)->ReportMetrics("gone", Points("train_loss", 0, 1), false);
  (*link)->ReportMetrics("job-1", Points("train_loss", 1, 1), false);
  ASSERT_TRUE((*link)->Flush(absl::Seconds(10)));
  EXPECT_EQ(coordinator.values(), (std::vector<double>{1}));
  (*link)->Stop();
}

// Past max_held_points the oldest training points go first; evaluations
// and the `done` report stay.
TEST(CoordinatorLink, BoundsHeldPointsKeepingEvaluations) {
  FakeCoordinator coordinator;
  CoordinatorLinkOptions o = Options();
  o.address = coordinator.address();
  o.max_held_points = 5;
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok());
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  coordinator.set_down(true);
  (*link)->ReportMetrics("job-1", Points("test_accuracy", 100, 1), false);
  (*link)->ReportMetrics("job-1", Points("train_loss", 0, 4), false);
  (*link)->ReportMetrics("job-1", Points("train_loss", 4, 4), false);
  (*link)->ReportMetrics("job-1", Points("test_accuracy", 200, 1), true);
  EXPECT_EQ((*link)->dropped_points(), 5);
  coordinator.set_down(false);
  ASSERT_TRUE((*link)->Flush(absl::Seconds(10)));
  EXPECT_EQ(coordinator.values(), (std::vector<double>{100, 5, 6, 7, 200}));
  EXPECT_TRUE(coordinator.reports().back().done());
  (*link)->Stop();
}

// A failover moves a shard to another server in the same incarnation:
// WaitForChange returns the assignment with the new address.
TEST(CoordinatorLink, AMovedShardIsAChange) {
  FakeCoordinator coordinator;
  WorkerAssignment a;
  a.set_command(WorkerAssignment::TRAIN);
  a.set_job_id("job-1");
  a.set_incarnation(2);
  a.add_server_addresses("10.0.0.1:7000");
  a.add_server_addresses("10.0.0.2:7000");
  coordinator.set_assignment(a);
  CoordinatorLinkOptions o = Options();
  o.address = coordinator.address();
  auto link = CreateCoordinatorLink(o);
  ASSERT_TRUE(link.ok());
  ASSERT_TRUE((*link)->Start(absl::Now() + absl::Seconds(10)).ok());
  WorkerAssignment seen =
      (*link)->WaitForChange(WorkerAssignment(), absl::Seconds(10));
  ASSERT_EQ(seen.server_addresses_size(), 2);
  // Unchanged: it waits out its timeout.
  const absl::Time t0 = absl::Now();
  seen = (*link)->WaitForChange(seen, absl::Milliseconds(200));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(150));
  a.set_server_addresses(0, "10.0.0.3:7000");
  coordinator.set_assignment(a);
  seen = (*link)->WaitForChange(seen, absl::Seconds(10));
  EXPECT_EQ(seen.server_addresses(0), "10.0.0.3:7000");
  EXPECT_EQ(seen.incarnation(), 2);
  (*link)->Stop();
}

}  // namespace
}  // namespace ps::worker
