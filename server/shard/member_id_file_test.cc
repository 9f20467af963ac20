#include "server/shard/member_id_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ps::server {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") +
                          "/member_id_file_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(MemberIdFile, KeptAcrossLoads) {
  FileSystem* fs = FileSystem::Posix();
  const std::string dir = FreshDir("kept");
  absl::StatusOr<int64_t> none = LoadMemberId(fs, dir);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0) << "a new directory holds no id yet";
  ASSERT_TRUE(SaveMemberId(fs, dir, 7).ok()) << "creates the directory";
  EXPECT_EQ(*LoadMemberId(fs, dir), 7);
  ASSERT_TRUE(SaveMemberId(fs, dir, 7).ok());
  ASSERT_TRUE(SaveMemberId(fs, dir, 12).ok());
  EXPECT_EQ(*LoadMemberId(fs, dir), 12);
}

TEST(MemberIdFile, NoDataDirKeepsNothing) {
  FileSystem* fs = FileSystem::Posix();
  EXPECT_EQ(*LoadMemberId(fs, ""), 0);
  EXPECT_TRUE(SaveMemberId(fs, "", 5).ok());
  EXPECT_FALSE(SaveMemberId(fs, FreshDir("bad_id"), 0).ok());
}

TEST(MemberIdFile, AFileWithoutAnIdIsAnError) {
  FileSystem* fs = FileSystem::Posix();
  const std::string dir = FreshDir("garbage");
  std::filesystem::create_directories(dir);
  for (const char* text : {"abc\n", "-3\n", "0\n", ""}) {
    ASSERT_TRUE(WriteFileAtomically(fs, MemberIdPath(dir), text).ok());
    absl::StatusOr<int64_t> id = LoadMemberId(fs, dir);
    ASSERT_FALSE(id.ok()) << "'" << text << "'";
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(MemberIdPath(dir)), std::string::npos);
  }
}

}  // namespace
}  // namespace ps::server
