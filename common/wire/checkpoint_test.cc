#include "common/wire/checkpoint.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/platform/fault_injecting_file_system.h"
#include "common/platform/file_system.h"

namespace ps {
namespace {

FileSystem* Posix() { return FileSystem::Posix(); }

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

CheckpointData Sample(int64_t version, int shard = 0, int num_shards = 1) {
  CheckpointData d;
  d.job_id = "job1";
  d.spec.set_name("sample");
  d.spec.set_seed(3);
  d.version = version;
  d.shard_index = shard;
  d.num_shards = num_shards;
  for (int i = 0; i < 3; ++i) {
    CheckpointRange r;
    r.tensor_name = "t" + std::to_string(i);
    r.offset = 10 * i;
    for (int k = 0; k < 100; ++k) r.weights.push_back(0.5f * k + i + version);
    if (i != 1) r.slot1.assign(100, 0.25f * i);
    if (i == 2) r.slot2.assign(100, 2.0f);
    r.steps = 7 + i;
    d.ranges.push_back(r);
  }
  return d;
}

void ExpectEqual(const CheckpointData& a, const CheckpointData& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.spec.SerializeAsString(), b.spec.SerializeAsString());
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.shard_index, b.shard_index);
  EXPECT_EQ(a.num_shards, b.num_shards);
  ASSERT_EQ(a.ranges.size(), b.ranges.size());
  for (size_t i = 0; i < a.ranges.size(); ++i) {
    EXPECT_EQ(a.ranges[i].tensor_name, b.ranges[i].tensor_name);
    EXPECT_EQ(a.ranges[i].offset, b.ranges[i].offset);
    EXPECT_EQ(a.ranges[i].weights, b.ranges[i].weights);
    EXPECT_EQ(a.ranges[i].slot1, b.ranges[i].slot1);
    EXPECT_EQ(a.ranges[i].slot2, b.ranges[i].slot2);
    EXPECT_EQ(a.ranges[i].steps, b.ranges[i].steps);
  }
}

TEST(Checkpoint, RoundTrip) {
  const std::string dir = TempDir("round_trip");
  const CheckpointData d = Sample(5);
  auto path = WriteCheckpoint(Posix(), dir, d, 3);
  ASSERT_TRUE(path.ok()) << path.status();
  auto back = ReadCheckpoint(Posix(), *path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectEqual(*back, d);
  EXPECT_FALSE(std::filesystem::exists(*path + ".tmp"));
}

// Flipping any single byte, or cutting the file short, is detected.
TEST(Checkpoint, EveryFlippedByteAndTruncationIsDetected) {
  const std::string dir = TempDir("corrupt");
  auto path = WriteCheckpoint(Posix(), dir, Sample(1), 3);
  ASSERT_TRUE(path.ok());
  std::string good;
  {
    std::ifstream in(*path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string bad_path = dir + "/bad";
  for (size_t pos = 0; pos < good.size(); pos += 7) {
    std::string bad = good;
    bad[pos] ^= 0x01;
    std::ofstream(bad_path, std::ios::binary | std::ios::trunc) << bad;
    auto r = ReadCheckpoint(Posix(), bad_path);
    ASSERT_FALSE(r.ok()) << "flipped byte " << pos << " went unnoticed";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }
  for (size_t len : {size_t{0}, size_t{5}, good.size() / 2, good.size() - 1}) {
    std::ofstream(bad_path, std::ios::binary | std::ios::trunc)
        << good.substr(0, len);
    EXPECT_EQ(ReadCheckpoint(Posix(), bad_path).status().code(),
              absl::StatusCode::kDataLoss)
        << "truncated to " << len;
  }
}

TEST(Checkpoint, KeepsTheNewestKPerShardAndListsCompleteSetsNewestFirst) {
  const std::string dir = TempDir("keep");
  for (int64_t v = 1; v <= 5; ++v) {
    ASSERT_TRUE(WriteCheckpoint(Posix(), dir, Sample(v, 0, 2), 2).ok());
  }
  ASSERT_TRUE(WriteCheckpoint(Posix(), dir, Sample(4, 1, 2), 2).ok());
  ASSERT_TRUE(WriteCheckpoint(Posix(), dir, Sample(3, 0, 1), 2).ok());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 4);  // shard 0 of 2: v4, v5; shard 1 of 2: v4; 1 of 1: v3
  // v5 of 2 shards is incomplete; the newest of each shard (v5, v4) makes a
  // mixed set, listed after the same-version set of its lowest version.
  const std::vector<CheckpointSet> sets = ListCheckpointSets(Posix(), dir);
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[0].version, 4);
  EXPECT_EQ(sets[0].num_shards, 2);
  EXPECT_FALSE(sets[0].mixed);
  EXPECT_EQ(sets[0].paths.size(), 2u);
  EXPECT_EQ(sets[1].version, 4);
  EXPECT_TRUE(sets[1].mixed);
  ASSERT_EQ(sets[1].paths.size(), 2u);
  EXPECT_NE(sets[1].paths[0].find("ckpt-v00000000000000000005-s0-of-2"),
            std::string::npos)
      << sets[1].paths[0];
  EXPECT_EQ(sets[2].version, 3);
  EXPECT_EQ(sets[2].num_shards, 1);
  EXPECT_TRUE(ListCheckpointSets(Posix(), dir + "/absent").empty());
}

TEST(Checkpoint, UnwritableDirectoryIsAClearError) {
  auto r = WriteCheckpoint(Posix(), "/proc/no/such/dir", Sample(1), 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/proc/no/such/dir"), std::string::npos);
}

// A checkpoint whose write fails at any step returns an error naming its
// file, and the checkpoint before it stays listed and readable (also with
// keep = 1: nothing is pruned before a new file is in place).
TEST(Checkpoint, AFailedWriteKeepsThePreviousCheckpoint) {
  using Op = FaultInjectingFileSystem::Op;
  for (Op op : {Op::kCreate, Op::kWrite, Op::kSync, Op::kRename}) {
    const std::string dir = TempDir("failed_write");
    FaultInjectingFileSystem fs;
    auto first = WriteCheckpoint(&fs, dir, Sample(1), 1);
    ASSERT_TRUE(first.ok()) << first.status();
    fs.FailNth(op, 1, ENOSPC);
    auto second = WriteCheckpoint(&fs, dir, Sample(2), 1);
    ASSERT_FALSE(second.ok()) << "op " << static_cast<int>(op);
    const std::string second_path =
        dir + "/ckpt-v00000000000000000002-s0-of-1.psckpt";
    EXPECT_NE(second.status().message().find(second_path), std::string::npos)
        << second.status();
    EXPECT_FALSE(fs.FileExists(second_path));
    EXPECT_FALSE(fs.FileExists(second_path + ".tmp"));
    const std::vector<CheckpointSet> sets = ListCheckpointSets(&fs, dir);
    ASSERT_EQ(sets.size(), 1u) << second.status();
    EXPECT_EQ(sets[0].version, 1);
    auto back = ReadCheckpoint(&fs, *first);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectEqual(*back, Sample(1));
  }
}

}  // namespace
}  // namespace ps
