#include "common/platform/file_system.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/platform/fault_injecting_file_system.h"

namespace ps {
namespace {

using Op = FaultInjectingFileSystem::Op;

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" +
                          "file_system_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(PosixFileSystem, WritesReadsListsAndRemoves) {
  FileSystem* fs = FileSystem::Posix();
  const std::string dir = FreshDir("basic");
  const std::string path = dir + "/a";
  ASSERT_TRUE(WriteFileAtomically(fs, path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(fs, path, "second").ok());
  EXPECT_EQ(*fs->ReadFile(path), "second");
  EXPECT_FALSE(fs->FileExists(path + ".tmp"));
  EXPECT_EQ(*fs->FileSize(path), 6);

  auto file = fs->NewAppendableFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append(" and third").ok());
  ASSERT_TRUE((*file)->SyncData().ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(*fs->ReadFile(path), "second and third");
  ASSERT_TRUE(fs->TruncateFile(path, 3).ok());
  EXPECT_EQ(*fs->ReadFile(path), "sec");

  ASSERT_TRUE(fs->CreateDirs(dir + "/b/c").ok());
  ASSERT_TRUE(fs->CreateDirs(dir + "/b/c").ok());  // exists: fine
  EXPECT_TRUE(fs->IsDirectory(dir + "/b/c"));
  EXPECT_FALSE(fs->IsDirectory(path));
  auto names = fs->ListDir(dir);
  ASSERT_TRUE(names.ok()) << names.status();
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));

  ASSERT_TRUE(fs->RemoveFile(path).ok());
  EXPECT_FALSE(fs->FileExists(path));
  EXPECT_EQ(fs->ReadFile(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs->FileSize(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs->ListDir(dir + "/absent").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs->RemoveFile(path).ok());
}

TEST(PosixFileSystem, ErrorsNameThePath) {
  FileSystem* fs = FileSystem::Posix();
  const absl::Status s =
      WriteFileAtomically(fs, "/proc/no/such/dir/port", "1\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/proc/no/such/dir/port"), std::string::npos) << s;
  const absl::Status d = fs->CreateDirs("/proc/no/such/dir");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("/proc/no/such/dir"), std::string::npos) << d;
}

TEST(WriteFileAtomically, WritesSyncsRenamesAndSyncsTheDirectory) {
  FaultInjectingFileSystem fs;
  const std::string dir = FreshDir("counts");
  ASSERT_TRUE(WriteFileAtomically(&fs, dir + "/port", "4242\n").ok());
  EXPECT_EQ(fs.Count(Op::kCreate), 1);
  EXPECT_EQ(fs.Count(Op::kWrite), 1);
  EXPECT_EQ(fs.Count(Op::kSync), 1);
  EXPECT_EQ(fs.Count(Op::kRename), 1);
  EXPECT_EQ(fs.Count(Op::kSyncDir), 1);
  EXPECT_EQ(*fs.ReadFile(dir + "/port"), "4242\n");
}

// Whichever step before the rename fails, the old contents stay readable,
// the temporary file is gone, and the error names the file.
TEST(WriteFileAtomically, AFailureBeforeTheRenameKeepsTheOldContents) {
  for (Op op : {Op::kCreate, Op::kWrite, Op::kSync, Op::kRename}) {
    FaultInjectingFileSystem fs;
    const std::string dir = FreshDir("fail");
    const std::string path = dir + "/record.pb";
    ASSERT_TRUE(WriteFileAtomically(&fs, path, "old contents").ok());
    fs.FailNth(op, 1, ENOSPC);
    const absl::Status s = WriteFileAtomically(&fs, path, "new contents!");
    ASSERT_FALSE(s.ok()) << "op " << static_cast<int>(op);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
    EXPECT_NE(s.message().find("No space left on device"), std::string::npos)
        << s;
    EXPECT_EQ(*fs.ReadFile(path), "old contents") << s;
    EXPECT_FALSE(fs.FileExists(path + ".tmp")) << s;
    // The next write goes through.
    ASSERT_TRUE(WriteFileAtomically(&fs, path, "new contents!").ok());
    EXPECT_EQ(*fs.ReadFile(path), "new contents!");
  }
}

// After the rename the new contents are in place; a failed directory sync
// is still reported (the rename may not survive a crash).
TEST(WriteFileAtomically, AFailedDirectorySyncIsReported) {
  FaultInjectingFileSystem fs;
  const std::string path = FreshDir("syncdir") + "/f";
  fs.FailNth(Op::kSyncDir, 1);
  EXPECT_FALSE(WriteFileAtomically(&fs, path, "x").ok());
  EXPECT_EQ(*fs.ReadFile(path), "x");
}

TEST(FaultInjectingFileSystem, FailsTheNthCallAndLeavesAShortWrite) {
  FaultInjectingFileSystem fs;
  const std::string path = FreshDir("nth") + "/log";
  auto file = fs.NewAppendableFile(path);
  ASSERT_TRUE(file.ok());
  fs.FailNth(Op::kWrite, 2);
  EXPECT_TRUE((*file)->Append("abcd").ok());
  const absl::Status s = (*file)->Append("efgh");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_TRUE((*file)->Append("ijkl").ok());  // only the 2nd call failed
  EXPECT_EQ(fs.Count(Op::kWrite), 3);
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(*fs.ReadFile(path), "abcdefijkl");
}

TEST(DirName, OfPaths) {
  EXPECT_EQ(DirName("/a/b/c"), "/a/b");
  EXPECT_EQ(DirName("b/c"), "b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
}

}  // namespace
}  // namespace ps
