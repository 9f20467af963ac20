#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/coordinator_test_fixture.h"

namespace ps::coordinator {
namespace {

TEST_F(CoordinatorTest, LifecycleFromSubmitToSucceeded) {
  AddServer("127.0.0.1:7001");
  AddServer("127.0.0.1:7002");
  const int64_t w0 = AddWorker();
  const int64_t w1 = AddWorker();
  const std::string id = Submit(Spec(2));
  EXPECT_EQ(Job(id).state(), PENDING);
  coordinator_->Tick();
  JobRecord r = Job(id);
  ASSERT_EQ(r.state(), RUNNING) << r.reason();
  ASSERT_EQ(shards_.setups.size(), 2u);
  EXPECT_EQ(shards_.setups[1].second.shard_index(), 1);
  EXPECT_EQ(shards_.setups[1].second.num_shards(), 2);
  EXPECT_EQ(shards_.setups[0].second.worker_ids_size(), 2);
  EXPECT_EQ(shards_.setups[0].second.spec().data().batch_size(),
            128);  // normalised

  const WorkerAssignment a0 = Beat(w0).assignment();
  const WorkerAssignment a1 = Beat(w1).assignment();
  ASSERT_EQ(a0.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(a0.job_id(), id);
  EXPECT_EQ(a0.rank(), 0);
  EXPECT_EQ(a1.rank(), 1);
  EXPECT_EQ(a0.num_workers(), 2);
  EXPECT_TRUE(a0.evaluator());
  EXPECT_FALSE(a1.evaluator());
  EXPECT_EQ(std::vector<int>(a1.data_shards().begin(), a1.data_shards().end()),
            std::vector<int>{1});
  ASSERT_EQ(a0.server_addresses_size(), 2);
  EXPECT_EQ(a0.server_addresses(1), "127.0.0.1:7002");
  EXPECT_EQ(a0.membership_epoch(), 1);

  ASSERT_TRUE(Report(w0, id, "train_loss", 2.3, 1).ok());
  ASSERT_TRUE(Report(w0, id, "test_accuracy", 0.7, 1).ok());
  ASSERT_TRUE(Report(w1, id, "examples_per_sec", 1000, 1).ok());
  ASSERT_TRUE(Report(w0, id, "", 0, 0, /*done=*/true).ok());
  EXPECT_EQ(Job(id).state(), RUNNING);
  EXPECT_TRUE(Beat(w1, id).assignment().others_done());
  ASSERT_TRUE(Report(w1, id, "", 0, 0, /*done=*/true).ok());
  // The evaluator finished before w1's last steps: its last evaluation is
  // not of the final model, so it is asked for one.
  r = Job(id);
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_FALSE(r.final_evaluation());
  EXPECT_TRUE(HasEvent(id, "final_evaluation"));
  const WorkerAssignment again = Beat(w0, id).assignment();
  EXPECT_EQ(again.command(), WorkerAssignment::TRAIN);
  EXPECT_FALSE(again.done());
  EXPECT_TRUE(again.others_done());
  EXPECT_EQ(again.membership_epoch(), 2);
  ASSERT_TRUE(Report(w0, id, "test_accuracy", 0.72, 1, /*done=*/true,
                     /*final_model=*/true)
                  .ok());
  r = Job(id);
  EXPECT_EQ(r.state(), SUCCEEDED);
  EXPECT_TRUE(r.final_evaluation());
  EXPECT_DOUBLE_EQ(r.last_train_loss(), 2.3);
  EXPECT_DOUBLE_EQ(r.best_test_accuracy(), 0.72);
  EXPECT_DOUBLE_EQ(r.examples_per_sec(), 1000);
  EXPECT_EQ(shards_.teardowns.size(), 2u);
  EXPECT_TRUE(shards_.teardowns[0].second.final_checkpoint());
  EXPECT_EQ(Beat(w0, id).assignment().command(), WorkerAssignment::STOP);
  EXPECT_EQ(Beat(w0).assignment().command(), WorkerAssignment::IDLE);

  auto metrics = coordinator_->GetMetrics([&] {
    GetMetricsRequest m;
    m.set_job_id(id);
    m.add_names("train_loss");
    m.set_format("csv");
    return m;
  }());
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->points_size(), 1);
  EXPECT_NE(metrics->text().find("train_loss,1,"), std::string::npos);
}

TEST_F(CoordinatorTest, BadSpecNamesTheField) {
  JobSpec spec = Spec(1);
  spec.mutable_optimizer()->set_learning_rate(0);
  spec.mutable_data()->set_batch_size(-1);
  SubmitJobRequest r;
  *r.mutable_spec() = spec;
  auto resp = coordinator_->SubmitJob(r);
  ASSERT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resp.status().message().find("optimizer.learning_rate"),
            std::string::npos)
      << resp.status();
  EXPECT_NE(resp.status().message().find("data.batch_size"), std::string::npos);
  EXPECT_TRUE(coordinator_->ListJobs().jobs().empty());
}

TEST_F(CoordinatorTest, PendingSaysWhatItWaitsFor) {
  const std::string id = Submit(Spec(2));
  coordinator_->Tick();
  EXPECT_NE(Job(id).reason().find("parameter server"), std::string::npos);
  AddServer("127.0.0.1:7001");
  AddWorker();
  coordinator_->Tick();
  EXPECT_EQ(Job(id).state(), PENDING);
  EXPECT_NE(Job(id).reason().find("2 idle worker(s), 1 available"),
            std::string::npos)
      << Job(id).reason();
  AddWorker();
  coordinator_->Tick();
  EXPECT_EQ(Job(id).state(), RUNNING);
}

TEST_F(CoordinatorTest, ZeroWorkersMeansEveryIdleWorker) {
  std::vector<int64_t> w;
  AddServer("127.0.0.1:7001");
  for (int i = 0; i < 3; ++i) w.push_back(AddWorker());
  const std::string id = Submit(Spec(0));
  coordinator_->Tick();
  EXPECT_EQ(Job(id).workers_size(), 3);
  EXPECT_EQ(Job(id).num_data_shards(), 3);
}

TEST_F(CoordinatorTest, JobsQueueInOrderAndWorkersAreExclusive) {
  std::vector<int64_t> w;
  const std::string first = RunningJob(2, Spec(2), &w);
  const std::string second = Submit(Spec(2));
  coordinator_->Tick();
  EXPECT_EQ(Job(second).state(), PENDING);
  ASSERT_TRUE(Report(w[1], first, "", 0, 0, true).ok());
  ASSERT_TRUE(Report(w[0], first, "test_accuracy", 0.5, 1, true, true).ok());
  coordinator_->Tick();
  EXPECT_EQ(Job(second).state(), RUNNING);
}

// An evaluator asked for the final model's evaluation that reports done
// without one does not hold the job open for good.
TEST_F(CoordinatorTest, AFinalEvaluationIsAskedForOnce) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  ASSERT_TRUE(Report(w[0], id, "test_accuracy", 0.5, 1, true).ok());
  ASSERT_TRUE(Report(w[1], id, "", 0, 0, true).ok());
  EXPECT_EQ(Job(id).state(), RUNNING);
  EXPECT_TRUE(HasEvent(id, "final_evaluation"));
  ASSERT_TRUE(Report(w[0], id, "", 0, 0, true).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.state(), SUCCEEDED);
  EXPECT_FALSE(r.final_evaluation());
  EXPECT_TRUE(HasEvent(id, "no_final_evaluation"));
}

TEST_F(CoordinatorTest, CancelStopsWorkersAndTearsDown) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  CancelJobRequest c;
  c.set_job_id(id);
  c.set_reason("enough");
  auto resp = coordinator_->CancelJob(c);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->state(), CANCELLED);
  EXPECT_EQ(Job(id).reason(), "cancelled: enough");
  EXPECT_EQ(Beat(w[0], id, 3).assignment().command(), WorkerAssignment::STOP);
  EXPECT_EQ(shards_.teardowns.size(), 1u);
  EXPECT_FALSE(shards_.teardowns[0].second.final_checkpoint());
  EXPECT_TRUE(coordinator_->CancelJob(c).ok());  // idempotent
  c.set_job_id("job-404");
  EXPECT_EQ(coordinator_->CancelJob(c).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, CancelAFinishedJobIsRefused) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(1, Spec(1), &w);
  ASSERT_TRUE(Report(w[0], id, "test_accuracy", 0.5, 1, true, true).ok());
  ASSERT_EQ(Job(id).state(), SUCCEEDED);
  CancelJobRequest c;
  c.set_job_id(id);
  EXPECT_EQ(coordinator_->CancelJob(c).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, DeadServerFailsTheJobAfterTheWaitTimeout) {
  options_.server_wait_timeout_ms = 20000;
  Start();
  std::vector<int64_t> w;
  const std::string id = RunningJob(1, Spec(1), &w);
  servers_.clear();  // the server goes silent
  for (int i = 0; i < 8; ++i) Advance(2000, w, id, i);
  EXPECT_TRUE(HasEvent(id, "server_failure"));
  EXPECT_EQ(Job(id).state(), RUNNING);
  for (int i = 0; i < 10; ++i) Advance(2000, w, id, 9);
  EXPECT_EQ(Job(id).state(), FAILED);
  EXPECT_NE(Job(id).reason().find("127.0.0.1:7001"), std::string::npos);
}

TEST_F(CoordinatorTest, RestartedServerIsSetUpAgainFromItsCheckpoint) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(1, Spec(1), &w);
  shards_.Restart("127.0.0.1:7001");
  AddServer("127.0.0.1:7001");  // a new process at the same address
  coordinator_->Tick();
  ASSERT_EQ(shards_.setups.size(), 2u);
  EXPECT_TRUE(shards_.setups[1].second.restore());
  EXPECT_TRUE(HasEvent(id, "server_restored"));
}

// A restarted shard brings the whole job back to one checkpoint version:
// every shard is set up again (replace) at the next incarnation, from the
// newest version all of them hold, and the workers restart there.
TEST_F(CoordinatorTest, RestartedServerRollsTheJobBackToOneVersion) {
  shards_.checkpoints["127.0.0.1:7001"] = {20, 60};
  shards_.checkpoints["127.0.0.1:7002"] = {20, 40};
  std::vector<int64_t> w;
  const std::string id = TwoShardJob(2, Spec(2), &w);
  ASSERT_TRUE(Report(w[0], id, "train_loss", 0.9, 10).ok());
  ASSERT_TRUE(Report(w[0], id, "train_loss", 0.7, 50).ok());
  Advance(100, w, id, 57);
  EXPECT_EQ(Job(id).global_step(), 57);
  RestartServer("127.0.0.1:7002");
  // 7002 restores 40 (its newest); 7001 has nothing at 40 and restores 20;
  // 7002 goes back to 20 as well.
  std::vector<std::pair<int, int64_t>> calls;
  for (const auto& [address, r] : shards_.setups) {
    EXPECT_TRUE(r.replace());
    EXPECT_EQ(r.incarnation(), 1);
    calls.emplace_back(r.shard_index(), r.restore_max_version());
  }
  EXPECT_EQ(calls,
            (std::vector<std::pair<int, int64_t>>{{1, 0}, {0, 40}, {1, 20}}));
  EXPECT_TRUE(HasEvent(id, "server_restored"));
  EXPECT_TRUE(HasEvent(id, "rollback"));
  JobRecord r = Job(id);
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_EQ(r.incarnation(), 1);
  EXPECT_EQ(r.global_step(), 20);
  HeartbeatResponse hb = Beat(w[0], id, 57);  // not restarted yet
  EXPECT_EQ(hb.assignment().incarnation(), 1);
  EXPECT_EQ(hb.assignment().start_step(), 20);
  EXPECT_EQ(Job(id).global_step(), 20) << "a clock from before the rollback";
  HeartbeatRequest beat;
  beat.set_member_id(w[1]);
  beat.set_job_id(id);
  beat.set_clock(23);
  beat.set_incarnation(1);
  ASSERT_TRUE(coordinator_->Heartbeat(beat).ok());
  EXPECT_EQ(Job(id).global_step(), 23);
  // A metric point computed before the rollback stays in the series but
  // does not move the step; one of the new incarnation does.
  ASSERT_TRUE(Report(w[0], id, "train_loss", 0.5, 60).ok());
  EXPECT_EQ(Job(id).global_step(), 23);
  ReportMetricsRequest report;
  report.set_member_id(w[0]);
  report.set_job_id(id);
  MetricPoint* p = report.add_points();
  p->set_name("train_loss");
  p->set_value(0.4);
  p->set_step(30);
  p->set_incarnation(1);
  ASSERT_TRUE(coordinator_->ReportMetrics(report).ok());
  EXPECT_EQ(Job(id).global_step(), 30);
  // The series shows each step once: the points of steps after 20 from
  // before the rollback were computed again and are left out unless asked
  // for.
  auto steps = [&](bool include_superseded) {
    GetMetricsRequest m;
    m.set_job_id(id);
    m.set_include_superseded(include_superseded);
    std::vector<std::pair<int64_t, int64_t>> out;  // (incarnation, step)
    absl::StatusOr<GetMetricsResponse> r = coordinator_->GetMetrics(m);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    for (const MetricPoint& p : r->points()) {
      out.emplace_back(p.incarnation(), p.step());
    }
    return out;
  };
  using Steps = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(steps(false), (Steps{{0, 10}, {1, 30}}));
  EXPECT_EQ(steps(true), (Steps{{0, 10}, {0, 50}, {0, 60}, {1, 30}}));
  // The incarnation and the restart step survive a coordinator restart.
  Start();
  EXPECT_EQ(Job(id).incarnation(), 1);
  EXPECT_EQ(steps(false), (Steps{{0, 10}, {1, 30}}));
}

// ASP/SSP: every shard restores its own newest checkpoint (their versions
// are written at different moments); the workers restart at the lowest
// version / workers.
TEST_F(CoordinatorTest, AspRollbackRestoresEachShardsNewest) {
  shards_.checkpoints["127.0.0.1:7001"] = {20, 60};
  shards_.checkpoints["127.0.0.1:7002"] = {20, 40};
  JobSpec spec = Spec(2);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  std::vector<int64_t> w;
  const std::string id = TwoShardJob(2, spec, &w);
  Advance(100, w, id, 57);
  RestartServer("127.0.0.1:7002");
  std::vector<std::pair<int, int64_t>> calls;
  for (const auto& [address, r] : shards_.setups) {
    EXPECT_TRUE(r.replace());
    EXPECT_TRUE(r.restore());
    calls.emplace_back(r.shard_index(), r.restore_max_version());
  }
  EXPECT_EQ(calls, (std::vector<std::pair<int, int64_t>>{{1, 0}, {0, 0}}));
  EXPECT_EQ(Job(id).global_step(), 20);  // min(40, 60) / 2 workers
  EXPECT_EQ(Beat(w[0], id, 57).assignment().start_step(), 20);
}

// BSP shards without a common checkpoint version: rather than the initial
// weights, each restores its newest at or below the restarted shard's and
// all continue as that step.
TEST_F(CoordinatorTest, BspRollbackWithoutACommonVersionRelabels) {
  shards_.checkpoints["127.0.0.1:7001"] = {60};
  shards_.checkpoints["127.0.0.1:7002"] = {40};
  std::vector<int64_t> w;
  const std::string id = TwoShardJob(1, Spec(1), &w);
  RestartServer("127.0.0.1:7002");
  ASSERT_GE(shards_.setups.size(), 2u);
  const SetupJobRequest& last = shards_.setups.back().second;
  EXPECT_EQ(last.start_version(), 40);
  EXPECT_EQ(last.restore_max_version(), 40);
  EXPECT_EQ(Job(id).global_step(), 40);
  EXPECT_EQ(Beat(w[0], id, 70).assignment().start_step(), 40);
}

// A rollback that cannot reach a shard is retried until it does.
TEST_F(CoordinatorTest, FailedRollbackIsRetried) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(1, Spec(1), &w);
  shards_.Restart("127.0.0.1:7001");
  shards_.setup_error = absl::UnavailableError("connection refused");
  AddServer("127.0.0.1:7001");
  coordinator_->Tick();
  EXPECT_TRUE(HasEvent(id, "rollback_failed"));
  EXPECT_TRUE(Job(id).rollback_pending());
  EXPECT_EQ(Job(id).incarnation(), 0);
  shards_.setup_error = absl::OkStatus();
  Advance(1000, w, id, 5);
  JobRecord r = Job(id);
  EXPECT_FALSE(r.rollback_pending());
  EXPECT_EQ(r.incarnation(), 1);
  EXPECT_EQ(r.global_step(), 40);
  EXPECT_TRUE(HasEvent(id, "rollback"));
}

TEST_F(CoordinatorTest, DroppedGradientsBecomeEventsAndTotals) {
  JobSpec spec = Spec(2);
  spec.mutable_consistency()->set_backup_workers(1);
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, spec, &w);
  shards_.status.set_dropped_pushes(3);
  Advance(options_.shard_poll_interval_ms, w, id, 4);
  EXPECT_TRUE(HasEvent(id, "dropped_gradient"));
  EXPECT_EQ(Job(id).dropped_pushes(), 3);
  shards_.status.set_dropped_pushes(5);
  ASSERT_TRUE(Report(w[1], id, "", 0, 0, true).ok());
  ASSERT_TRUE(Report(w[0], id, "test_accuracy", 0.5, 1, true, true).ok());
  // The final counters are read before the teardown.
  EXPECT_EQ(Job(id).dropped_pushes(), 5);
  EXPECT_TRUE(HasEvent(id, "shard_summary"));
}

TEST_F(CoordinatorTest, CoordinatorRestartLosesNothingAcknowledged) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  const int64_t server = 1;
  ASSERT_TRUE(Report(w[0], id, "train_loss", 1.5, 10).ok());
  ASSERT_TRUE(Report(w[1], id, "test_accuracy", 0.8, 10).ok());
  const JobRecord before = Job(id);
  const std::string pending = Submit(Spec(5));
  Start();  // crash and restart on the same data dir
  JobRecord r = Job(id);
  EXPECT_EQ(r.state(), RUNNING);
  EXPECT_EQ(r.workers_size(), 2);
  EXPECT_EQ(r.global_step(), 10);
  EXPECT_DOUBLE_EQ(r.last_train_loss(), 1.5);
  EXPECT_DOUBLE_EQ(r.best_test_accuracy(), 0.8);
  EXPECT_EQ(Job(pending).state(), PENDING);
  GetMetricsRequest m;
  m.set_job_id(id);
  EXPECT_EQ(coordinator_->GetMetrics(m)->points_size(), 2);
  EXPECT_GE(coordinator_->GetEvents(id)->events_size(), before.num_events());
  // Members find out they must register again, keep their ids and their
  // assignments.
  EXPECT_TRUE(Beat(w[0]).reregister());
  EXPECT_EQ(AddWorker(w[0]), w[0]);
  EXPECT_EQ(AddWorker(w[1]), w[1]);
  RegisterRequest s;
  s.set_role(SERVER);
  s.set_address("127.0.0.1:7001");
  s.set_member_id(server);
  ASSERT_TRUE(coordinator_->Register(s).ok());
  const WorkerAssignment a = Beat(w[1], id, 10).assignment();
  EXPECT_EQ(a.command(), WorkerAssignment::TRAIN);
  EXPECT_EQ(a.rank(), 1);
  coordinator_->Tick();
  // The shard still held the job: no second setup, just the membership.
  EXPECT_EQ(shards_.setups.size(), 1u);
  EXPECT_EQ(shards_.memberships.back().second.membership_epoch(), 1);
  // New ids never collide with ids handed out before the restart.
  EXPECT_GT(AddWorker(), w[1]);
  EXPECT_EQ(Job(id).state(), RUNNING);
}

TEST_F(CoordinatorTest, LongSeriesAreThinnedAndTheStoreKeepsEveryPoint) {
  options_.max_points_per_series = 16;
  Start();
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  constexpr int kSteps = 100;
  for (int step = 1; step <= kSteps; ++step) {
    ASSERT_TRUE(Report(w[0], id, "train_loss", 1.0 / step, step).ok());
  }
  ASSERT_TRUE(Report(w[1], id, "test_accuracy", 0.8, 50).ok());
  auto series = [&] {
    GetMetricsRequest m;
    m.set_job_id(id);
    m.add_names("train_loss");
    absl::StatusOr<GetMetricsResponse> r = coordinator_->GetMetrics(m);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::vector<MetricPoint>(r->points().begin(),
                                             r->points().end())
                  : std::vector<MetricPoint>{};
  };
  const std::vector<MetricPoint> thinned = series();
  ASSERT_LE(thinned.size(), 16u);
  EXPECT_EQ(thinned.front().step(), 1);
  EXPECT_EQ(thinned.back().step(), kSteps);
  EXPECT_DOUBLE_EQ(thinned.back().value(), 1.0 / kSteps);
  JobRecord r = Job(id);
  EXPECT_EQ(r.metric_points_reported(), kSteps + 1);
  EXPECT_EQ(r.metric_points_kept(), static_cast<int64_t>(thinned.size()) + 1);
  EXPECT_DOUBLE_EQ(r.last_train_loss(), 1.0 / kSteps);
  // A restart with the same cap rebuilds the same series from the store.
  Start();
  const std::vector<MetricPoint> again = series();
  ASSERT_EQ(again.size(), thinned.size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].SerializeAsString(), thinned[i].SerializeAsString());
  }
  EXPECT_EQ(Job(id).global_step(), kSteps);
  // The store holds every point as reported: a larger cap shows them all.
  options_.max_points_per_series = 4096;
  Start();
  const std::vector<MetricPoint> all = series();
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(all[i].step(), i + 1);
  EXPECT_EQ(Job(id).metric_points_kept(), kSteps + 1);
}

TEST_F(CoordinatorTest, ExplainNamesWhatTheShardWaitsFor) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(2, Spec(2), &w);
  shards_.status.set_version(12);
  shards_.status.set_pending_step(13);
  shards_.status.add_waiting_for(w[1]);
  Advance(1000, {w[0]}, id, 13);
  auto text = coordinator_->ExplainJob(id);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->text().find("step 13 waits for worker " +
                              std::to_string(w[1]) + " (rank 1)"),
            std::string::npos)
      << text->text();
  EXPECT_NE(text->text().find("BSP: each step waits for every active worker"),
            std::string::npos)
      << text->text();
  EXPECT_NE(text->text().find("diagnosis:"), std::string::npos);
}

TEST_F(CoordinatorTest, ReportsFromStrangersAreRefused) {
  std::vector<int64_t> w;
  const std::string id = RunningJob(1, Spec(1), &w);
  EXPECT_EQ(Report(999, id, "train_loss", 1, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Report(w[0], "job-404", "train_loss", 1, 1).code(),
            absl::StatusCode::kNotFound);
  GetMetricsRequest m;
  m.set_job_id(id);
  EXPECT_EQ(coordinator_->GetMetrics(m)->points_size(), 0);
}

TEST_F(CoordinatorTest, WaitForChangeReturnsAtOnceThenOnChange) {
  const std::string id = Submit(Spec(1));
  int64_t seen = 0;
  ASSERT_TRUE(
      coordinator_->WaitForJobChange(id, &seen, absl::ZeroDuration()).ok());
  EXPECT_GT(seen, 0);
  const int64_t first = seen;
  // Nothing changed: returns when the (zero) timeout passes, same version.
  ASSERT_TRUE(
      coordinator_->WaitForJobChange(id, &seen, absl::ZeroDuration()).ok());
  EXPECT_EQ(seen, first);
  CancelJobRequest c;
  c.set_job_id(id);
  ASSERT_TRUE(coordinator_->CancelJob(c).ok());
  auto r = coordinator_->WaitForJobChange(id, &seen, absl::ZeroDuration());
  ASSERT_TRUE(r.ok());
  EXPECT_GT(seen, first);
  EXPECT_EQ(r->state(), CANCELLED);
}

TEST_F(CoordinatorTest, ConcurrentCallsKeepTheStateConsistent) {
  // Under TSan, tools/test.sh preloads tools/sanitizers/absl_mutex_tsan.cc
  // so that TSan sees absl::Mutex (Debian's Abseil is not instrumented).
  std::vector<int64_t> w;
  const std::string id = RunningJob(4, Spec(4), &w);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int step = 1; step <= 200; ++step) {
        Beat(w[t], id, step);
        ASSERT_TRUE(Report(w[t], id, "train_loss", 1.0 / step, step).ok());
      }
    });
  }
  threads.emplace_back([&] {
    int64_t seen = 0;
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(
          coordinator_->WaitForJobChange(id, &seen, absl::ZeroDuration()).ok());
      ASSERT_TRUE(coordinator_->ExplainJob(id).ok());
    }
  });
  for (int i = 0; i < 100; ++i) coordinator_->Tick();
  for (std::thread& t : threads) t.join();
  GetMetricsRequest m;
  m.set_job_id(id);
  EXPECT_EQ(coordinator_->GetMetrics(m)->points_size(), 800);
  EXPECT_EQ(Job(id).global_step(), 200);
  EXPECT_EQ(Job(id).state(), RUNNING);
  // Everything acknowledged is on disk too.
  Start();
  EXPECT_EQ(coordinator_->GetMetrics(m)->points_size(), 800);
}

}  // namespace
}  // namespace ps::coordinator
