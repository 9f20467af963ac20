#include "server/coordinator/write_batch.h"

#include <gtest/gtest.h>

#include "server/coordinator/test_fakes.h"

namespace ps::coordinator {
namespace {

JobRecord Record(const std::string& id, JobState state) {
  JobRecord r;
  r.set_job_id(id);
  r.set_state(state);
  return r;
}

JobEvent Event(const std::string& kind) {
  JobEvent e;
  e.set_kind(kind);
  return e;
}

MetricPoint Point(const std::string& name, int64_t step) {
  MetricPoint p;
  p.set_name(name);
  p.set_step(step);
  return p;
}

TEST(WriteBatch, RecordsInOrderThenEachJobsAppendsInOne) {
  WriteBatch batch;
  EXPECT_TRUE(batch.empty());
  batch.PutRecord(Record("job-2", PENDING), 1);
  batch.AppendEvent("job-2", Event("state"));
  batch.AppendPoints("job-1", {Point("train_loss", 3), Point("test_loss", 3)});
  batch.PutRecord(Record("job-1", RUNNING), 4);
  batch.AppendEvent("job-1", Event("evicted"));
  batch.PutRecord(Record("job-2", RUNNING), 2);
  EXPECT_FALSE(batch.empty());
  RecordingJobStore store;
  ASSERT_TRUE(batch.Flush(&store).ok());
  ASSERT_EQ(store.records.size(), 3u);
  EXPECT_EQ(store.records[0].first.job_id(), "job-2");
  EXPECT_EQ(store.records[0].second, 1);
  EXPECT_EQ(store.records[1].first.job_id(), "job-1");
  EXPECT_EQ(store.records[1].second, 4);
  EXPECT_EQ(store.records[2].first.state(), RUNNING);
  ASSERT_EQ(store.appends.size(), 2u);
  EXPECT_EQ(store.appends[0].job_id, "job-1");  // job id order
  ASSERT_EQ(store.appends[0].events.size(), 1u);
  EXPECT_EQ(store.appends[0].events[0].kind(), "evicted");
  ASSERT_EQ(store.appends[0].points.size(), 2u);
  EXPECT_EQ(store.appends[0].points[1].name(), "test_loss");
  EXPECT_EQ(store.appends[1].job_id, "job-2");
  EXPECT_TRUE(store.appends[1].points.empty());
  EXPECT_TRUE(batch.empty());
  store.records.clear();
  ASSERT_TRUE(batch.Flush(&store).ok());
  EXPECT_TRUE(store.records.empty()) << "a flushed batch writes nothing again";
}

TEST(WriteBatch, AFailedWriteIsInternalAndTheRestAreStillTried) {
  WriteBatch batch;
  batch.PutRecord(Record("job-1", RUNNING), 1);
  batch.PutRecord(Record("job-2", RUNNING), 1);
  batch.AppendEvent("job-1", Event("state"));
  RecordingJobStore store;
  store.error = absl::PermissionDeniedError("/data/jobs: read-only");
  const absl::Status s = batch.Flush(&store);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "job store: /data/jobs: read-only");
  EXPECT_EQ(store.records.size(), 2u);
  EXPECT_EQ(store.appends.size(), 1u);
  EXPECT_TRUE(batch.empty());
}

}  // namespace
}  // namespace ps::coordinator
