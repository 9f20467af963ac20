#include "worker/data/libsvm_format.h"

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

std::unique_ptr<LineParser> Parser(const LibsvmOptions& options) {
  absl::StatusOr<std::unique_ptr<LineParser>> parser = NewLibsvmParser(options);
  EXPECT_TRUE(parser.ok()) << parser.status();
  return *std::move(parser);
}

TEST(LibsvmFormat, SparseWeightedFeaturesAndBinaryLabels) {
  std::unique_ptr<LineParser> parser = Parser({});
  BatchBuilder builder(parser->schema());
  const std::vector<std::string> lines = {
      "1 3:0.5 10:-2 7:1e-3", "-1 qid:4 1:1", "+1\t2:3  # a comment 5:5", "0",
      "-1.0 4:+0.25 ",
  };
  for (const std::string& line : lines) {
    ASSERT_TRUE(parser->Parse(line, &builder).ok()) << line;
  }
  const Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, parser->schema()).ok());
  EXPECT_THAT(batch.labels, ElementsAre(1, 0, 1, 0, 0));
  ASSERT_EQ(batch.sparse.size(), 1u);
  const SparseField& f = batch.sparse[0];
  EXPECT_EQ(f.name, "features");
  EXPECT_THAT(f.keys, ElementsAre(3, 10, 7, 1, 2, 4));
  EXPECT_THAT(f.weights, ElementsAre(0.5f, -2.0f, 1e-3f, 1.0f, 3.0f, 0.25f));
  EXPECT_THAT(f.offsets, ElementsAre(0, 3, 4, 5, 5, 6));
  EXPECT_EQ(batch.dense_dim, 0);
}

TEST(LibsvmFormat, DenseModeRealAndClassLabels) {
  LibsvmOptions dense;
  dense.dense_dim = 4;
  dense.labels = LibsvmLabels::kReal;
  std::unique_ptr<LineParser> parser = Parser(dense);
  EXPECT_TRUE(parser->schema().sparse.empty());
  BatchBuilder builder(parser->schema());
  ASSERT_TRUE(parser->Parse("2.75 1:1 4:4 2:0.5 2:2", &builder).ok());
  ASSERT_TRUE(parser->Parse("-3e2", &builder).ok());
  Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, parser->schema()).ok());
  EXPECT_THAT(batch.labels, ElementsAre(2.75f, -300.0f));
  // Repeated index 2: the last value wins. Absent features are 0.
  EXPECT_THAT(batch.dense, ElementsAre(1, 2, 0, 4, 0, 0, 0, 0));
  BatchBuilder more(parser->schema());
  EXPECT_THAT(std::string(parser->Parse("1 5:1", &more).message()),
              HasSubstr("outside [1, 5)"));
  EXPECT_FALSE(parser->Parse("1 0:1", &more).ok());

  LibsvmOptions classes;
  classes.labels = LibsvmLabels::kClass;
  classes.num_classes = 3;
  classes.class_base = 1;
  parser = Parser(classes);
  BatchBuilder class_builder(parser->schema());
  ASSERT_TRUE(parser->Parse("1 1:1", &class_builder).ok());
  ASSERT_TRUE(parser->Parse("3.0 1:1", &class_builder).ok());
  EXPECT_THAT(std::string(parser->Parse("4 1:1", &class_builder).message()),
              HasSubstr("not a class in [1, 4)"));
  EXPECT_FALSE(parser->Parse("1.5 1:1", &class_builder).ok());
  EXPECT_FALSE(parser->Parse("0 1:1", &class_builder).ok());
  batch = class_builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, parser->schema()).ok());
  EXPECT_THAT(batch.classes, ElementsAre(0, 2));
}

TEST(LibsvmFormat, BadLines) {
  struct Case {
    const char* line;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"", "empty line"},
      {"   ", "empty line"},
      {"# only a comment", "empty line"},
      {"2 1:1", "out of range"},
      {"0.5 1:1", "out of range"},
      {"x 1:1", "label 'x' is not a number"},
      {"nan 1:1", "is not a number"},
      {"1 3", "token '3' is not index:value"},
      {"1 a:1", "feature index 'a'"},
      {"1 -3:1", "feature index '-3'"},
      {"1 3:", "value '' of feature 3"},
      {"1 3:abc", "value 'abc'"},
      {"1 3:inf", "value 'inf'"},
      {"1 3:1e39", "not a finite float"},
      {"1 1:1 2:2 3:x", "value 'x' of feature 3"},
  };
  std::unique_ptr<LineParser> parser = Parser({});
  BatchBuilder builder(parser->schema());
  for (const Case& c : cases) {
    const absl::Status status = parser->Parse(c.line, &builder);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.line;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.line;
  }
  const Batch batch = builder.Take();
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(batch.sparse[0].keys.empty()) << "a bad line left ids behind";
  EXPECT_TRUE(batch.sparse[0].weights.empty());
}

TEST(LibsvmFormat, BadOptions) {
  LibsvmOptions classes;
  classes.labels = LibsvmLabels::kClass;
  EXPECT_TRUE(absl::IsInvalidArgument(NewLibsvmParser(classes).status()));
  LibsvmOptions dense;
  dense.dense_dim = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(NewLibsvmParser(dense).status()));
  dense.dense_dim = int64_t{1} << 30;
  EXPECT_TRUE(absl::IsInvalidArgument(NewLibsvmParser(dense).status()));
}

}  // namespace
}  // namespace ps::worker::data
