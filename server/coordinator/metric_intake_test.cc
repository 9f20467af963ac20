#include "server/coordinator/metric_intake.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/platform/fake_clock.h"

namespace ps::coordinator {
namespace {

MetricPoint Point(const std::string& name, double value, int64_t step,
                  int64_t member = 1, int64_t incarnation = 0) {
  MetricPoint p;
  p.set_name(name);
  p.set_value(value);
  p.set_step(step);
  p.set_member_id(member);
  p.set_incarnation(incarnation);
  return p;
}

TEST(MetricIntake, PointsFoldIntoTheSummary) {
  Job job;
  job.record.set_incarnation(1);
  ApplyPoint(job, Point("train_loss", 2.0, 10, 1, 1));
  ApplyPoint(job, Point("test_accuracy", 0.8, 12, 1, 1));
  ApplyPoint(job, Point("test_accuracy", 0.7, 14, 1, 1));
  ApplyPoint(job, Point("train_loss", 1.5, 99, 1, /*incarnation=*/0));
  ApplyPoint(job, Point("examples_per_sec", 100, 14, 1, 1));
  ApplyPoint(job, Point("examples_per_sec", 300, 14, 2, 1));
  ApplyPoint(job, Point("examples_per_sec", 200, 15, 1, 1));
  ApplyPoint(job, Point("staleness", 1, 15, 1, 1));
  ApplyPoint(job, Point("staleness", 3, 15, 2, 1));
  ApplyPoint(job, Point("staleness", std::nan(""), 15, 2, 1));
  const JobRecord& r = job.record;
  EXPECT_EQ(r.global_step(), 15) << "a point of an earlier incarnation "
                                    "does not move the step";
  EXPECT_DOUBLE_EQ(r.last_train_loss(), 1.5) << "but it is the last loss";
  EXPECT_DOUBLE_EQ(r.last_test_accuracy(), 0.7);
  EXPECT_DOUBLE_EQ(r.best_test_accuracy(), 0.8);
  EXPECT_DOUBLE_EQ(r.examples_per_sec(), 500) << "latest per worker, summed";
  EXPECT_DOUBLE_EQ(r.mean_staleness(), 2) << "a NaN is left out";
  ForgetThroughput(job, 2);
  EXPECT_DOUBLE_EQ(job.record.examples_per_sec(), 200);
  ResetSummary(job);
  EXPECT_EQ(job.record.global_step(), 0);
  EXPECT_EQ(job.record.best_test_accuracy(), 0);
  EXPECT_EQ(job.record.examples_per_sec(), 0);
}

TEST(MetricIntake, EpochsMoveWithTheCurrentIncarnationOnly) {
  Job job;
  MetricPoint p = Point("train_loss", 1, 5);
  p.set_epoch(2.5);
  ApplyPoint(job, p);
  EXPECT_DOUBLE_EQ(job.record.epoch(), 2.5);
  p.set_epoch(1);
  ApplyPoint(job, p);
  EXPECT_DOUBLE_EQ(job.record.epoch(), 2.5) << "the epoch never goes back";
  MetricPoint later = Point("train_loss", 1, 50, 1, /*incarnation=*/1);
  later.set_epoch(4);
  ApplyPoint(job, later);
  EXPECT_DOUBLE_EQ(job.record.epoch(), 2.5) << "not this job's incarnation";
  EXPECT_EQ(job.record.global_step(), 5);
}

TEST(MetricIntake, PointsAreCheckedAndStamped) {
  Job job;
  job.record.mutable_spec()->mutable_data()->set_max_steps(100);
  job.record.set_start_time_ms(1000);
  ReportMetricsRequest req;
  req.set_member_id(7);
  *req.add_points() = Point("train_loss", 1, 100, /*member=*/99);
  MetricPoint timed = Point("test_loss", 1, 0);
  timed.set_time_ms(42);
  *req.add_points() = timed;
  absl::StatusOr<std::vector<MetricPoint>> out = StampPoints(job, req, 4000);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].member_id(), 7) << "the sender, whatever it wrote";
  EXPECT_EQ((*out)[0].time_ms(), 3000) << "since the job started";
  EXPECT_EQ((*out)[1].time_ms(), 42);

  struct Case {
    std::string name;
    int64_t step;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"", 1, "points[1].name: must be 1..64 characters"},
           {std::string(65, 'x'), 1, "points[1].name: must be 1..64"},
           {"train_loss", -1, "points[1].step: must be in 0..100, got -1"},
           {"train_loss", 101, "points[1].step: must be in 0..100, got 101"},
       }) {
    ReportMetricsRequest bad;
    *bad.add_points() = Point("train_loss", 1, 1);
    *bad.add_points() = Point(c.name, 1, c.step);
    absl::StatusOr<std::vector<MetricPoint>> r = StampPoints(job, bad, 4000);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << r.status();
  }
}

class IntakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto job = std::make_unique<Job>();
    job->record.set_job_id("job-1");
    job->record.set_state(RUNNING);
    for (int64_t id : {1, 2}) {
      WorkerSlot* s = job->record.add_slots();
      s->set_member_id(id);
      s->set_rank(static_cast<int>(id) - 1);
      s->set_active(true);
      job->runtime[id];
    }
    WorkerSlot* left = job->record.add_slots();  // left the job earlier
    left->set_member_id(3);
    left->set_rank(2);
    absl::MutexLock l(&table_.mu());
    job_ = &table_.Insert(std::move(job));
  }

  absl::StatusOr<bool> Report(int64_t member, bool done,
                              std::vector<MetricPoint> points = {}) {
    ReportMetricsRequest req;
    req.set_job_id("job-1");
    req.set_member_id(member);
    req.set_done(done);
    for (MetricPoint& p : points) *req.add_points() = std::move(p);
    absl::MutexLock l(&table_.mu());
    return IntakeMetrics(table_, *job_, req, &writes_);
  }

  FakeClock clock_;
  JobTable table_{&clock_};
  Job* job_ = nullptr;
  WriteBatch writes_;
};

TEST_F(IntakeTest, DoneWorkersEndTheJob) {
  absl::StatusOr<bool> ended = Report(1, /*done=*/true);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_FALSE(*ended);
  EXPECT_TRUE(job_->record.slots(0).done());
  EXPECT_EQ(job_->events.back().kind(), "worker_done");
  ended = Report(1, true);
  ASSERT_TRUE(ended.ok());
  EXPECT_FALSE(*ended) << "done twice is done once";
  ended = Report(2, true);
  ASSERT_TRUE(ended.ok());
  EXPECT_TRUE(*ended);
  EXPECT_EQ(job_->record.state(), SUCCEEDED);
  EXPECT_EQ(job_->record.reason(), "every worker finished");
}

TEST_F(IntakeTest, PointsAreKeptAndFeedTheStragglerPolicy) {
  const int64_t change = job_->change;
  ASSERT_TRUE(Report(2, false,
                     {Point("compute_ms", 20, 3), Point("train_loss", 0.5, 3)})
                  .ok());
  ASSERT_EQ(job_->points.size(), 2);
  EXPECT_EQ(job_->points.Points()[1].member_id(), 2);
  EXPECT_DOUBLE_EQ(job_->record.last_train_loss(), 0.5);
  EXPECT_DOUBLE_EQ(job_->runtime[2].busy_ms, 20);
  EXPECT_GT(job_->change, change);
  // A worker that left may still report (its last points), but its share
  // is not marked done and it has no runtime to feed.
  ASSERT_TRUE(Report(3, true, {Point("compute_ms", 5, 3)}).ok());
  EXPECT_FALSE(job_->record.slots(2).done());
  EXPECT_EQ(job_->runtime.count(3), 0u);
  EXPECT_EQ(job_->points.size(), 3);
}

TEST_F(IntakeTest, StrangersAndBadPointsAreRefusedWholly) {
  EXPECT_EQ(Report(9, false, {Point("train_loss", 1, 1)}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Report(1, true, {Point("train_loss", 1, 1), Point("", 1, 1)})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(job_->points.empty());
  EXPECT_FALSE(job_->record.slots(0).done());
  EXPECT_TRUE(writes_.empty());
}

TEST(MetricIntake, SupersededPointsAreLeftOutUnlessAskedFor) {
  Job job;
  // Two rollbacks: incarnation 0 restarted at step 20, 1 at step 25.
  job.record.add_rollback_steps(20);
  job.record.add_rollback_steps(25);
  for (auto [inc, step] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 10}, {0, 20}, {0, 22}, {0, 30}, {1, 24}, {1, 26}, {2, 27}}) {
    job.points.Add(Point("train_loss", 1, step, 1, inc));
  }
  job.points.Add(Point("test_accuracy", 1, 5));
  auto steps = [&](bool include_superseded, std::vector<std::string> names) {
    GetMetricsRequest req;
    req.set_include_superseded(include_superseded);
    for (const std::string& n : names) req.add_names(n);
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const MetricPoint& p : SelectPoints(job, req)) {
      out.emplace_back(p.incarnation(), p.step());
    }
    return out;
  };
  using Steps = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(steps(false, {"train_loss"}),
            (Steps{{0, 10}, {0, 20}, {1, 24}, {2, 27}}));
  EXPECT_EQ(steps(true, {"train_loss"}).size(), 7u);
  EXPECT_EQ(steps(false, {}).size(), 5u);
  EXPECT_EQ(steps(false, {"test_accuracy"}), (Steps{{0, 5}}));
}

}  // namespace
}  // namespace ps::coordinator

namespace ps::coordinator {
namespace {

// A worker whose data plan grew while its steps ended (it was given a
// leaver's batches) is not done: it trains on from the clock it reached.
TEST(IntakeDone, AWorkerShortOfItsGrownPlanTrainsOn) {
  FakeClock clock;
  JobTable table(&clock);
  auto owned = std::make_unique<Job>();
  owned->record.set_job_id("job-1");
  owned->record.set_state(RUNNING);
  owned->record.mutable_spec()->mutable_data()->set_max_steps(100);
  WorkerSlot* s = owned->record.add_slots();
  s->set_member_id(1);
  s->set_active(true);
  s->add_plan()->set_data_shard(0);   // clocks 0-99
  DataSegment* more = s->add_plan();  // and 100-129
  more->set_data_shard(1);
  more->set_first_batch(70);
  more->set_end_batch(100);
  WriteBatch writes;
  absl::MutexLock l(&table.mu());
  Job& job = table.Insert(std::move(owned));
  ReportMetricsRequest req;
  req.set_job_id("job-1");
  req.set_member_id(1);
  req.set_done(true);
  req.set_clock(100);
  absl::StatusOr<bool> ended = IntakeMetrics(table, job, req, &writes);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_FALSE(*ended);
  EXPECT_FALSE(job.record.slots(0).done());
  EXPECT_EQ(job.record.slots(0).start_step(), 100);
  EXPECT_EQ(job.record.membership_epoch(), 1) << "so the worker sees it";
  EXPECT_EQ(job.events.back().kind(), "worker_not_done");
  req.set_clock(130);
  ended = IntakeMetrics(table, job, req, &writes);
  ASSERT_TRUE(ended.ok());
  EXPECT_TRUE(*ended);
  EXPECT_TRUE(job.record.slots(0).done());
  EXPECT_EQ(job.record.state(), SUCCEEDED);
}

}  // namespace
}  // namespace ps::coordinator

namespace ps::coordinator {
namespace {

TEST(IntakeSteps, PointsPastMaxStepsAreTakenWhenAPlanRunsThere) {
  FakeClock clock;
  JobTable table(&clock);
  auto owned = std::make_unique<Job>();
  owned->record.set_job_id("job-1");
  owned->record.set_state(RUNNING);
  owned->record.mutable_spec()->mutable_data()->set_max_steps(100);
  owned->record.set_total_steps(160);  // a survivor's plan ends at 160
  owned->record.add_slots()->set_member_id(1);
  owned->record.mutable_slots(0)->set_active(true);
  WriteBatch writes;
  absl::MutexLock l(&table.mu());
  Job& job = table.Insert(std::move(owned));
  ReportMetricsRequest req;
  req.set_job_id("job-1");
  req.set_member_id(1);
  MetricPoint* p = req.add_points();
  p->set_name("test_accuracy");
  p->set_value(0.8);
  p->set_step(160);
  EXPECT_TRUE(IntakeMetrics(table, job, req, &writes).ok());
  req.mutable_points(0)->set_step(161);
  EXPECT_EQ(IntakeMetrics(table, job, req, &writes).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::coordinator
