// The coordinator core under test: a fake clock, a store in TEST_TMPDIR and
// fake shards; helpers to register members, submit jobs and let time pass.
// Shared by coordinator_test.cc and coordinator_worker_test.cc.
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/platform/fake_clock.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
// The steps per data shard the test's workers report in their heartbeats.
constexpr int64_t kShardSteps = 600;

inline JobSpec Spec(int num_workers) {
  JobSpec spec;
  spec.set_name("t");
  spec.mutable_model()->mutable_mlp()->set_input_dim(784);
  spec.mutable_model()->mutable_mlp()->add_hidden(16);
  spec.mutable_model()->mutable_mlp()->set_num_classes(10);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.set_num_workers(num_workers);
  return spec;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/coord_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    options_.check_dataset_files = false;
    // Every shard holds a checkpoint at version 40 unless a test says
    // otherwise.
    shards_.default_checkpoints = {40};
    Start();
  }

  // (Re)creates the coordinator on the same store, as after a crash.
  void Start() {
    coordinator_.reset();
    store_.reset();
    auto store = JobStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    auto c = Coordinator::Create(options_, &clock_, store_.get(), &shards_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
  }

  int64_t AddWorker(int64_t id = 0, int pid = 100) {
    RegisterRequest r;
    r.set_role(WORKER);
    r.set_member_id(id);
    r.set_pid(pid);
    auto resp = coordinator_->Register(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->member_id();
  }

  int64_t AddServer(const std::string& address) {
    RegisterRequest r;
    r.set_role(SERVER);
    r.set_address(address);
    auto resp = coordinator_->Register(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    servers_.push_back(resp->member_id());
    return resp->member_id();
  }

  HeartbeatResponse Beat(int64_t id, const std::string& job_id = "",
                         int64_t clock = 0) {
    HeartbeatRequest r;
    r.set_member_id(id);
    r.set_job_id(job_id);
    r.set_clock(clock);
    if (!job_id.empty()) {
      // As a worker's do once it has read the job's data.
      r.set_shard_steps(kShardSteps);
      r.set_steps_per_epoch(kShardSteps);
    }
    auto resp = coordinator_->Heartbeat(r);
    EXPECT_TRUE(resp.ok());
    return *resp;
  }

  std::string Submit(const JobSpec& spec) {
    SubmitJobRequest r;
    *r.mutable_spec() = spec;
    auto resp = coordinator_->SubmitJob(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->job_id();
  }

  JobRecord Job(const std::string& id) {
    auto r = coordinator_->GetJob(id);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }

  std::vector<std::string> EventKinds(const std::string& id) {
    std::vector<std::string> kinds;
    absl::StatusOr<GetEventsResponse> events = coordinator_->GetEvents(id);
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return kinds;
    for (const JobEvent& e : events->events()) kinds.push_back(e.kind());
    return kinds;
  }

  bool HasEvent(const std::string& id, const std::string& kind) {
    auto kinds = EventKinds(id);
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  }

  absl::Status Report(int64_t member, const std::string& job,
                      const std::string& name, double value, int64_t step,
                      bool done = false, bool final_model = false) {
    ReportMetricsRequest r;
    r.set_member_id(member);
    r.set_job_id(job);
    r.set_done(done);
    if (!name.empty()) {
      MetricPoint* p = r.add_points();
      p->set_name(name);
      p->set_value(value);
      p->set_step(step);
      p->set_final_model(final_model);
    }
    return coordinator_->ReportMetrics(r);
  }

  // `member` gives up on `job` (ReportFailure), or with `crashed` its
  // process for the job died.
  absl::Status Fail(int64_t member, const std::string& job,
                    const std::string& message, bool crashed = false) {
    ReportFailureRequest r;
    r.set_job_id(job);
    r.set_member_id(member);
    r.set_message(message);
    r.set_crashed(crashed);
    return coordinator_->ReportFailure(r);
  }

  // `servers` servers (127.0.0.1:7001, :7002, ...) and `n` workers, one job
  // of `n` workers running on them.
  std::string RunningJob(int n, const JobSpec& spec, std::vector<int64_t>* w,
                         int servers = 1) {
    for (int i = 0; i < servers; ++i) {
      AddServer(absl::StrCat("127.0.0.1:", 7001 + i));
    }
    for (int i = 0; i < n; ++i) w->push_back(AddWorker());
    const std::string id = Submit(spec);
    coordinator_->Tick();
    EXPECT_EQ(Job(id).state(), RUNNING) << Job(id).reason();
    return id;
  }

  // Servers at 127.0.0.1:7001 and :7002 and `n` workers, one job running
  // on them.
  std::string TwoShardJob(int n, const JobSpec& spec, std::vector<int64_t>* w) {
    return RunningJob(n, spec, w, 2);
  }

  // The server at `address` restarts without its jobs and registers again;
  // `shards_.setups` then holds what the coordinator set up since.
  void RestartServer(const std::string& address) {
    shards_.setups.clear();
    shards_.Restart(address);
    AddServer(address);
    coordinator_->Tick();
  }

  // Time passes; the servers keep heartbeating.
  void Tock(int64_t ms) {
    clock_.AdvanceMs(ms);
    for (int64_t id : servers_) Beat(id);
  }

  void Advance(int64_t ms, const std::vector<int64_t>& beating,
               const std::string& job = "", int64_t clock = 0) {
    clock_.AdvanceMs(ms);
    for (int64_t id : servers_) Beat(id);
    for (int64_t id : beating) Beat(id, job, clock);
    coordinator_->Tick();
  }

  std::string dir_;
  std::vector<int64_t> servers_;  // heartbeat in Advance()
  FakeClock clock_;
  FakeShardClient shards_;
  CoordinatorOptions options_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Coordinator> coordinator_;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_
