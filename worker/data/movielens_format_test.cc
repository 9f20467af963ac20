#include "worker/data/movielens_format.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/batch.h"

namespace ps::worker::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<LineParser> Parser(const MovieLensOptions& options) {
  absl::StatusOr<std::unique_ptr<LineParser>> parser =
      NewMovieLensParser(options);
  EXPECT_TRUE(parser.ok()) << parser.status();
  return *std::move(parser);
}

TEST(MovieLensFormat, TabAndDoubleColonLines) {
  std::unique_ptr<LineParser> parser = Parser({});
  BatchBuilder builder(parser->schema());
  // ml-100k u.data, ml-1m ratings.dat, and half stars of later sets.
  for (const char* line :
       {"196\t242\t3\t881250949", "1::1193::5::978300760", "7\t8\t4.5\t0"}) {
    ASSERT_TRUE(parser->Parse(line, &builder).ok()) << line;
  }
  const Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, MovieLensSchema()).ok());
  EXPECT_EQ(batch.sparse[0].name, "user");
  EXPECT_EQ(batch.sparse[1].name, "item");
  EXPECT_THAT(batch.sparse[0].keys, ElementsAre(196, 1, 7));
  EXPECT_THAT(batch.sparse[1].keys, ElementsAre(242, 1193, 8));
  EXPECT_THAT(batch.sparse[0].offsets, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(batch.labels, ElementsAre(3.0f, 5.0f, 4.5f));
}

TEST(MovieLensFormat, FixedSeparatorRejectsTheOther) {
  MovieLensOptions tab;
  tab.separator = RatingsSeparator::kTab;
  std::unique_ptr<LineParser> parser = Parser(tab);
  BatchBuilder builder(parser->schema());
  EXPECT_THAT(std::string(parser->Parse("1::2::3::4", &builder).message()),
              HasSubstr("1 tab-separated fields"));
  MovieLensOptions colons;
  colons.separator = RatingsSeparator::kDoubleColon;
  parser = Parser(colons);
  EXPECT_THAT(std::string(parser->Parse("1\t2\t3\t4", &builder).message()),
              HasSubstr("1 '::'-separated fields"));
  EXPECT_TRUE(parser->Parse("1::2::3::4", &builder).ok());
}

TEST(MovieLensFormat, BadLines) {
  struct Case {
    const char* line;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"", "1 tab-separated fields"},
      {"1\t2\t3", "3 tab-separated fields"},
      {"1\t2\t3\t4\t5", "more than 4"},
      {"1::2::3", "3 '::'-separated"},
      {"1::2::3::4::5", "more than 4"},
      {"x\t2\t3\t4", "user id 'x'"},
      {"-1\t2\t3\t4", "user id '-1'"},
      {"1\t2.5\t3\t4", "item id '2.5'"},
      {"1\t2\tfive\t4", "rating 'five' is not a number"},
      {"1\t2\t6\t4", "rating '6' is outside [0.5, 5]"},
      {"1\t2\t0\t4", "outside"},
      {"1\t2\t3\tyesterday", "timestamp 'yesterday'"},
      {"1 2 3 4", "1 tab-separated fields"},
  };
  std::unique_ptr<LineParser> parser = Parser({});
  BatchBuilder builder(parser->schema());
  for (const Case& c : cases) {
    const absl::Status status = parser->Parse(c.line, &builder);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.line;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.line;
  }
  EXPECT_EQ(builder.size(), 0);

  MovieLensOptions range;
  range.min_rating = 6;
  range.max_rating = 5;
  EXPECT_TRUE(absl::IsInvalidArgument(NewMovieLensParser(range).status()));
}

}  // namespace
}  // namespace ps::worker::data
