#include "worker/data/bad_lines.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker::data {
namespace {

using ::testing::HasSubstr;

TEST(BadLineCounter, FractionOfMinLinesEarlyThenOfLinesRead) {
  BadLinePolicy policy;
  policy.max_fraction = 0.01;
  policy.min_lines = 1000;
  BadLineCounter counter(policy, "criteo");
  // 10 bad lines are 1% of min_lines: tolerated even among the first 20.
  for (int i = 0; i < 20; ++i) {
    counter.AddLine();
    if (i < 10) counter.AddBad();
  }
  EXPECT_TRUE(counter.Check(false).ok());
  // ...but at the end of the data 10 of 20 is 50%.
  EXPECT_TRUE(absl::IsInvalidArgument(counter.Check(true)));
  counter.AddLine();
  counter.AddBad();  // the 11th within 1000 lines
  const absl::Status status = counter.Check(false);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("criteo: 11 bad lines out of 21 read"));
  // 11 in 2000 lines is 0.55%: fine, at the end too.
  for (int i = 0; i < 1979; ++i) counter.AddLine();
  EXPECT_TRUE(counter.Check(false).ok());
  EXPECT_TRUE(counter.Check(true).ok());
}

TEST(BadLineCounter, ZeroFractionFailsOnTheFirstBadLine) {
  BadLinePolicy policy;
  policy.max_fraction = 0.0;
  BadLineCounter counter(policy, "libsvm");
  counter.AddLine();
  EXPECT_TRUE(counter.Check(false).ok());
  counter.AddLine();
  counter.AddBad();
  EXPECT_FALSE(counter.Check(false).ok());
}

TEST(BadLineCounter, MinBadLinesAlwaysPass) {
  BadLinePolicy policy;
  policy.max_fraction = 0.001;
  policy.min_bad_lines = 2;
  BadLineCounter c(policy, "tiny");
  for (int i = 0; i < 10; ++i) c.AddLine();
  c.AddBad();
  EXPECT_TRUE(c.Check(/*at_end=*/true).ok());  // 1 bad line in 10
  c.AddLine();
  c.AddBad();
  EXPECT_TRUE(c.Check(/*at_end=*/true).ok());
  c.AddLine();
  c.AddBad();
  EXPECT_EQ(c.Check(/*at_end=*/true).code(),
            absl::StatusCode::kInvalidArgument);
  policy.min_bad_lines = -1;
  EXPECT_FALSE(ValidateBadLinePolicy(policy).ok());
}

TEST(BadLineCounter, FractionOneNeverFails) {
  BadLinePolicy policy;
  policy.max_fraction = 1.0;
  BadLineCounter counter(policy, "x");
  for (int i = 0; i < 5; ++i) {
    counter.AddLine();
    counter.AddBad();
  }
  EXPECT_TRUE(counter.Check(false).ok());
  EXPECT_TRUE(counter.Check(true).ok());
  EXPECT_EQ(counter.bad(), 5);
}

TEST(BadLineCounter, KeepsTheFirstSamplesAndQuotesThemInTheError) {
  BadLinePolicy policy;
  policy.max_fraction = 0.0;
  policy.max_samples = 2;
  BadLineCounter counter(policy, "movielens");
  for (int i = 1; i <= 3; ++i) {
    counter.AddLine();
    counter.AddBad();
    ASSERT_EQ(counter.WantsSample(), i <= 2);
    counter.AddSample("f.txt:" + std::to_string(i) + ": broken");
  }
  ASSERT_EQ(counter.samples().size(), 2u);
  const std::string message(counter.Check(true).message());
  EXPECT_THAT(message, HasSubstr("first: f.txt:1: broken; f.txt:2: broken"));
  EXPECT_THAT(message, HasSubstr("; ..."));
  EXPECT_THAT(message, HasSubstr("max_bad_fraction 0"));
}

TEST(BadLinePolicy, Validates) {
  EXPECT_TRUE(ValidateBadLinePolicy({}).ok());
  for (const BadLinePolicy& bad :
       {BadLinePolicy{-0.1, 1000, 20}, BadLinePolicy{1.5, 1000, 20},
        BadLinePolicy{0.1, -1, 20}, BadLinePolicy{0.1, 10, -1}}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateBadLinePolicy(bad)));
  }
}

}  // namespace
}  // namespace ps::worker::data
