#include "server/coordinator/job_store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/platform/fault_injecting_file_system.h"

namespace ps::coordinator {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

JobRecord Record(const std::string& id, JobState state) {
  JobRecord r;
  r.set_job_id(id);
  r.set_state(state);
  r.mutable_spec()->set_name("test");
  return r;
}

MetricPoint Point(const std::string& name, double value, int64_t step) {
  MetricPoint p;
  p.set_name(name);
  p.set_value(value);
  p.set_step(step);
  return p;
}

JobEvent Event(const std::string& kind) {
  JobEvent e;
  e.set_kind(kind);
  e.set_message("m");
  return e;
}

TEST(JobStore, EverythingAcknowledgedSurvivesACrash) {
  const std::string dir = FreshDir("crash");
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutRecord(Record("job-1", PENDING), 1).ok());
    ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 2).ok());
    ASSERT_TRUE((*store)->PutRecord(Record("job-2", PENDING), 1).ok());
    std::vector<JobEvent> events = {Event("state")};
    std::vector<MetricPoint> points = {Point("train_loss", 2.0, 1),
                                       Point("train_loss", 1.5, 2)};
    ASSERT_TRUE((*store)->Append("job-1", events, points).ok());
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("x", 3, 3)}).ok());
    ASSERT_TRUE((*store)->PutNextMemberId(17).ok());
    // "Crash": the object goes away without any shutdown step (it holds no
    // buffers, so its destructor writes nothing); every call above returned
    // only after its fsync.
    store->reset();
  }
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].record.job_id(), "job-1");
  EXPECT_EQ((*jobs)[0].record.state(), RUNNING);
  ASSERT_EQ((*jobs)[0].events.size(), 1u);
  EXPECT_EQ((*jobs)[0].events[0].kind(), "state");
  ASSERT_EQ((*jobs)[0].points.size(), 3u);
  EXPECT_EQ((*jobs)[0].points[1].value(), 1.5);
  EXPECT_EQ((*jobs)[0].points[2].name(), "x");
  EXPECT_EQ((*jobs)[1].record.state(), PENDING);
  EXPECT_TRUE((*jobs)[1].points.empty());
  EXPECT_EQ(*(*store)->GetNextMemberId(), 17);
}

TEST(JobStore, TornTailIsCutOffAndAppendsContinue) {
  const std::string dir = FreshDir("torn");
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 1).ok());
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("a", 1, 1)}).ok());
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("b", 2, 2)}).ok());
  }
  // A crash in the middle of the second append: its last bytes never made
  // it to disk.
  const std::string log = dir + "/jobs/job-1/log";
  const auto size = std::filesystem::file_size(log);
  std::filesystem::resize_file(log, size - 3);
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  ASSERT_EQ((*jobs)[0].points.size(), 1u);
  EXPECT_EQ((*jobs)[0].points[0].name(), "a");
  EXPECT_GT((*jobs)[0].dropped_tail_bytes, 0);
  ASSERT_TRUE((*store)->Append("job-1", {}, {Point("c", 3, 3)}).ok());
  jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ((*jobs)[0].points.size(), 2u);
  EXPECT_EQ((*jobs)[0].points[1].name(), "c");
  EXPECT_EQ((*jobs)[0].dropped_tail_bytes, 0);
}

TEST(JobStore, CorruptRecordInTheLogStopsThereWithoutCrashing) {
  const std::string dir = FreshDir("corrupt");
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 1).ok());
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("a", 1, 1)}).ok());
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("b", 2, 2)}).ok());
  }
  const std::string log = dir + "/jobs/job-1/log";
  {
    std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('\x7f');
  }
  auto store = JobStore::Open(dir);
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ((*jobs)[0].points.size(), 1u);
}

TEST(JobStore, OlderRecordWriteDoesNotOverwriteNewer) {
  const std::string dir = FreshDir("seq");
  auto store = JobStore::Open(dir);
  ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 5).ok());
  ASSERT_TRUE((*store)->PutRecord(Record("job-1", PENDING), 4).ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_EQ((*jobs)[0].record.state(), RUNNING);
}

TEST(JobStore, RejectsBadIdsAndAppendsWithoutRecord) {
  const std::string dir = FreshDir("bad");
  auto store = JobStore::Open(dir);
  EXPECT_EQ((*store)->PutRecord(Record("../escape", PENDING), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Append("job-9", {Event("x")}, {}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*(*store)->GetNextMemberId(), 1);
}

using Op = FaultInjectingFileSystem::Op;

// A record or member-id write that fails at any step is an error naming the
// file; a reload still finds the value acknowledged before it.
TEST(JobStore, AFailedRecordWriteIsNotAcknowledged) {
  for (Op op : {Op::kCreate, Op::kWrite, Op::kSync, Op::kRename}) {
    const std::string dir = FreshDir("failed_record");
    FaultInjectingFileSystem fs;
    auto store = JobStore::Open(dir, {.file_system = &fs});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 1).ok());
    ASSERT_TRUE((*store)->PutNextMemberId(5).ok());
    fs.FailNth(op, 1, ENOSPC);
    const absl::Status s = (*store)->PutRecord(Record("job-1", SUCCEEDED), 2);
    ASSERT_FALSE(s.ok()) << "op " << static_cast<int>(op);
    EXPECT_NE(s.message().find(dir + "/jobs/job-1/record.pb"),
              std::string::npos)
        << s;
    fs.FailNth(op, 1, ENOSPC);
    EXPECT_FALSE((*store)->PutNextMemberId(9).ok());

    auto reopened = JobStore::Open(dir);
    ASSERT_TRUE(reopened.ok());
    auto jobs = (*reopened)->LoadAll();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ((*jobs)[0].record.state(), RUNNING) << s;
    EXPECT_EQ(*(*reopened)->GetNextMemberId(), 5);
  }
}

// A failed append (here a short write, or an fsync error after the write)
// is not seen by a reload, and appends acknowledged after it are: the
// failed bytes are cut off instead of staying in front of them.
TEST(JobStore, AFailedAppendIsNotSeenAndLaterAppendsSurvive) {
  for (Op op : {Op::kWrite, Op::kSync}) {
    const std::string dir = FreshDir("failed_append");
    FaultInjectingFileSystem fs;
    auto store = JobStore::Open(dir, {.file_system = &fs});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 1).ok());
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("a", 1, 1)}).ok());
    fs.FailNth(op, 1);
    const absl::Status s = (*store)->Append(
        "job-1", {Event("lost")}, {Point("b", 2, 2), Point("c", 3, 3)});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(dir + "/jobs/job-1/log"), std::string::npos)
        << s;
    ASSERT_TRUE((*store)->Append("job-1", {}, {Point("d", 4, 4)}).ok());

    auto reopened = JobStore::Open(dir);
    auto jobs = (*reopened)->LoadAll();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ((*jobs)[0].points.size(), 2u) << "op " << static_cast<int>(op);
    EXPECT_EQ((*jobs)[0].points[0].name(), "a");
    EXPECT_EQ((*jobs)[0].points[1].name(), "d");
    EXPECT_TRUE((*jobs)[0].events.empty());
    EXPECT_EQ((*jobs)[0].dropped_tail_bytes, 0);
  }
}

// When the failed bytes cannot be cut off at once, the next append cuts
// them first.
TEST(JobStore, AFailedAppendThatCannotBeCutIsCutBeforeTheNextAppend) {
  const std::string dir = FreshDir("failed_cut");
  FaultInjectingFileSystem fs;
  auto store = JobStore::Open(dir, {.file_system = &fs});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->PutRecord(Record("job-1", RUNNING), 1).ok());
  ASSERT_TRUE((*store)->Append("job-1", {}, {Point("a", 1, 1)}).ok());
  fs.FailNth(Op::kWrite, 1);
  fs.FailNth(Op::kTruncate, 1);
  EXPECT_FALSE(
      (*store)->Append("job-1", {}, {Point("b", 2, 2), Point("c", 3, 3)}).ok());
  ASSERT_TRUE((*store)->Append("job-1", {}, {Point("d", 4, 4)}).ok());
  EXPECT_EQ(fs.Count(Op::kTruncate), 2);

  auto reopened = JobStore::Open(dir);
  auto jobs = (*reopened)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ((*jobs)[0].points.size(), 2u);
  EXPECT_EQ((*jobs)[0].points[1].name(), "d");
  EXPECT_EQ((*jobs)[0].dropped_tail_bytes, 0);
}

TEST(JobStore, UnwritableDirectoryIsAClearError) {
  auto store = JobStore::Open("/proc/no/such/dir");
  EXPECT_FALSE(store.ok());
}

}  // namespace
}  // namespace ps::coordinator
