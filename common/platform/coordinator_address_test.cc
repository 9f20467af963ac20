#include "common/platform/coordinator_address.h"

#include <gtest/gtest.h>

#include <string>

namespace ps {
namespace {

class CoordinatorAddressTest : public ::testing::Test {
 protected:
  std::string File(const std::string& name) {
    return ::testing::TempDir() + "/" + name;
  }
  FileSystem* fs() { return FileSystem::Posix(); }
};

TEST_F(CoordinatorAddressTest, PublishedAddressReadsBack) {
  const std::string f = File("published.addr");
  ASSERT_TRUE(PublishCoordinatorAddress(fs(), f, "10.0.0.7:4567").ok());
  absl::StatusOr<std::string> a = ReadCoordinatorFile(fs(), f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "10.0.0.7:4567");
}

TEST_F(CoordinatorAddressTest, BadFilesAreRefused) {
  EXPECT_EQ(ReadCoordinatorFile(fs(), File("missing.addr")).status().code(),
            absl::StatusCode::kNotFound);
  struct Case {
    const char* text;
  } cases[] = {{""},      {"  \n"},     {"hostonly"}, {":4000"},
               {"host:"}, {"a:1\nb:2"}, {"a b:1"}};
  for (const Case& c : cases) {
    const std::string f = File("bad.addr");
    ASSERT_TRUE(WriteFileAtomically(fs(), f, c.text).ok());
    EXPECT_EQ(ReadCoordinatorFile(fs(), f).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "'" << c.text << "'";
  }
}

TEST_F(CoordinatorAddressTest, ExactlyOneOfAddressAndFile) {
  EXPECT_EQ(CoordinatorConnection::Create("", "", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CoordinatorConnection::Create("a:1", File("x.addr"), {}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorAddressTest, AFixedAddressNeverMoves) {
  auto c = CoordinatorConnection::Create("127.0.0.1:1", "", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Stub().ok());
  EXPECT_FALSE((*c)->Refresh());
  EXPECT_EQ((*c)->address(), "127.0.0.1:1");
  EXPECT_EQ((*c)->Describe(), "127.0.0.1:1");
  EXPECT_FALSE((*c)->follows_file());
}

TEST_F(CoordinatorAddressTest, TheFileIsFollowedWhenItChanges) {
  const std::string f = File("moving.addr");
  fs()->RemoveFile(f).IgnoreError();
  auto c = CoordinatorConnection::Create("", f, {});
  ASSERT_TRUE(c.ok()) << c.status();
  // Not written yet: no stub, and nothing to refresh to.
  EXPECT_EQ((*c)->Stub().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE((*c)->Refresh());

  ASSERT_TRUE(PublishCoordinatorAddress(fs(), f, "127.0.0.1:1000").ok());
  absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>> first =
      (*c)->Stub();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*c)->address(), "127.0.0.1:1000");
  EXPECT_FALSE((*c)->Refresh()) << "the same address";
  EXPECT_EQ((*c)->Stub()->get(), first->get());

  // The coordinator restarted on another port.
  ASSERT_TRUE(PublishCoordinatorAddress(fs(), f, "127.0.0.1:2000").ok());
  EXPECT_TRUE((*c)->Refresh());
  EXPECT_EQ((*c)->address(), "127.0.0.1:2000");
  EXPECT_NE((*c)->Stub()->get(), first->get());
  EXPECT_EQ((*c)->Describe(), "127.0.0.1:2000 (from " + f + ")");

  // A file rewritten badly (or removed) keeps the last good address.
  ASSERT_TRUE(WriteFileAtomically(fs(), f, "garbage").ok());
  EXPECT_FALSE((*c)->Refresh());
  EXPECT_EQ((*c)->address(), "127.0.0.1:2000");
}

TEST(AdvertisedAddress, FlagHostOrListeningAddress) {
  EXPECT_EQ(AdvertisedAddress("node7:7000", "0.0.0.0", 4242), "node7:7000");
  EXPECT_EQ(AdvertisedAddress("node7", "0.0.0.0", 4242), "node7:4242");
  EXPECT_EQ(AdvertisedAddress("", "127.0.0.1", 4242), "127.0.0.1:4242");
  const std::string wildcard = AdvertisedAddress("", "0.0.0.0", 4242);
  EXPECT_NE(wildcard.rfind(":4242"), std::string::npos);
  EXPECT_NE(wildcard.substr(0, 7), "0.0.0.0") << "the hostname instead";
}

}  // namespace
}  // namespace ps
