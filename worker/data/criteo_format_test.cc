#include "worker/data/criteo_format.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/batch.h"
#include "worker/data/random.h"

namespace ps::worker::data {
namespace {

using ::testing::HasSubstr;

// A line of the real format: label, 13 integers, 26 hex ids.
std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  ints.resize(kCriteoIntegerFeatures);
  cats.resize(kCriteoCategoricalFeatures);
  return absl::StrCat(label, label.empty() ? "" : "\t",
                      absl::StrJoin(ints, "\t"), "\t",
                      absl::StrJoin(cats, "\t"));
}

// The first line of Kaggle's train.txt has this shape (values made up).
std::string FullLine() {
  std::vector<std::string> ints = {"1", "-1",  "5", "0", "1382", "4", "15",
                                   "2", "181", "1", "2", "",     "2"};
  std::vector<std::string> cats;
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    cats.push_back(f == 20 ? "" : absl::StrFormat("%08x", 0x68fd1e64 + f));
  }
  return Line("1", ints, cats);
}

TEST(CriteoFormat, ParsesALine) {
  const CriteoOptions options;
  std::unique_ptr<LineParser> parser = NewCriteoParser(options);
  BatchBuilder builder(parser->schema());
  ASSERT_TRUE(parser->Parse(FullLine(), &builder).ok());
  ASSERT_TRUE(parser->Parse(Line("0", {}, {}), &builder).ok());
  const Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, CriteoSchema(options)).ok());
  ASSERT_EQ(batch.size, 2);
  EXPECT_EQ(batch.labels[0], 1.0f);
  EXPECT_EQ(batch.labels[1], 0.0f);
  const int64_t ints[] = {1, -1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2};
  for (int i = 0; i < kCriteoIntegerFeatures; ++i) {
    const double want = std::log1p(std::max<int64_t>(ints[i], 0));
    EXPECT_NEAR(batch.dense[i], want, 1e-6 * (1 + want)) << "I" << i + 1;
    EXPECT_EQ(batch.dense[kCriteoIntegerFeatures + i], 0.0f) << "missing";
  }
  ASSERT_EQ(batch.sparse.size(), 26u);
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    const SparseField& field = batch.sparse[f];
    EXPECT_EQ(field.name, absl::StrCat("C", f + 1));
    ASSERT_EQ(field.bag_size(0), 1);
    ASSERT_EQ(field.bag_size(1), 1);
    EXPECT_EQ(field.keys[0],
              f == 20 ? CriteoMissingKey(f) : CriteoKey(f, 0x68fd1e64 + f));
    EXPECT_EQ(field.keys[1], CriteoMissingKey(f));
  }
}

TEST(CriteoFormat, KeysAreSaltedPerFieldAndBySeed) {
  std::set<uint64_t> keys;
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    keys.insert(CriteoKey(f, 0x1234abcd));
    keys.insert(CriteoMissingKey(f));
    keys.insert(CriteoKey(f, 0x1234abcd, /*hash_seed=*/7));
  }
  EXPECT_EQ(keys.size(), 3u * kCriteoCategoricalFeatures);
  // Within a field the map is a bijection of the id: no collisions.
  std::set<uint64_t> field_keys;
  for (uint64_t id = 0; id < 5000; ++id) field_keys.insert(CriteoKey(3, id));
  EXPECT_EQ(field_keys.size(), 5000u);
}

TEST(CriteoFormat, HexIdsInEitherCaseAndAnyLength) {
  std::unique_ptr<LineParser> parser = NewCriteoParser({});
  BatchBuilder builder(parser->schema());
  ASSERT_TRUE(
      parser
          ->Parse(Line("0", {},
                       {"ABCDEF01", "abcdef01", "0a", "a", "ffffffffffffffff"}),
                  &builder)
          .ok());
  const Batch batch = builder.Take();
  EXPECT_EQ(batch.sparse[0].keys[0], CriteoKey(0, 0xabcdef01));
  EXPECT_EQ(batch.sparse[1].keys[0], CriteoKey(1, 0xabcdef01));
  EXPECT_EQ(batch.sparse[2].keys[0], CriteoKey(2, 10));
  EXPECT_EQ(batch.sparse[3].keys[0], CriteoKey(3, 10));
  EXPECT_EQ(batch.sparse[4].keys[0], CriteoKey(4, ~uint64_t{0}));
}

TEST(CriteoFormat, EmptyBagOptionAndUnlabelledFiles) {
  CriteoOptions options;
  options.missing_categorical = MissingCategorical::kEmptyBag;
  options.has_label = false;
  std::unique_ptr<LineParser> parser = NewCriteoParser(options);
  EXPECT_EQ(parser->schema().label_kind, LabelKind::kNone);
  BatchBuilder builder(parser->schema());
  ASSERT_TRUE(parser->Parse(Line("", {"3"}, {"", "00000001"}), &builder).ok());
  const Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, CriteoSchema(options)).ok());
  EXPECT_TRUE(batch.labels.empty());
  EXPECT_NEAR(batch.dense[0], std::log(4.0), 1e-6);
  EXPECT_EQ(batch.sparse[0].bag_size(0), 0);
  EXPECT_EQ(batch.sparse[1].bag_size(0), 1);
  EXPECT_EQ(batch.sparse[2].bag_size(0), 0);
  // A labelled line has one field too many for an unlabelled parser.
  BatchBuilder again(parser->schema());
  EXPECT_FALSE(parser->Parse(FullLine(), &again).ok());
}

TEST(CriteoFormat, LargeIntegersAndTheTable) {
  for (int64_t x : {int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{1} << 40,
                    int64_t{-5}}) {
    std::unique_ptr<LineParser> parser = NewCriteoParser({});
    BatchBuilder builder(parser->schema());
    ASSERT_TRUE(
        parser->Parse(Line("1", {std::to_string(x)}, {}), &builder).ok());
    const double want =
        std::log1p(static_cast<double>(std::max<int64_t>(x, 0)));
    EXPECT_NEAR(builder.Take().dense[0], want, 1e-6 * (1 + want)) << x;
    EXPECT_NEAR(CriteoDenseValue(x), want, 1e-6 * (1 + want)) << x;
  }
}

TEST(CriteoFormat, BadLinesAreRejectedWithAReasonAndLeaveNoTrace) {
  std::string one_too_many = FullLine() + "\tabc";
  std::string one_too_few = FullLine().substr(0, FullLine().rfind('\t'));
  std::vector<std::string> cats_bad(kCriteoCategoricalFeatures, "1");
  cats_bad[5] = "12xz";
  struct Case {
    std::string line;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"", "1 tab-separated fields, expected 40"},
      {one_too_few, "39 tab-separated fields, expected 40"},
      {one_too_many, "more than 40 tab-separated fields"},
      {Line("2", {}, {}), "label '2' is not 0 or 1"},
      {Line("", {}, {}), "39 tab-separated fields"},
      {"\t" + Line("", {}, {}), "label '' is not 0 or 1"},
      {Line("-1", {}, {}), "label '-1'"},
      {Line(" 1", {}, {}), "label ' 1'"},
      {Line("1", {"", "1.5"}, {}), "integer feature I2 '1.5'"},
      {Line("1", {"abc"}, {}), "integer feature I1 'abc'"},
      {Line("1", {"99999999999999999999"}, {}), "integer feature I1"},
      {Line("1", {"+-3"}, {}), "integer feature I1"},
      {Line("1", {}, cats_bad), "categorical feature C6 '12xz'"},
      {Line("1", {}, {"0x12"}), "categorical feature C1"},
      {Line("1", {}, {"11112222333344445"}), "1 to 16 hex digits"},
  };
  std::unique_ptr<LineParser> parser = NewCriteoParser({});
  BatchBuilder builder(parser->schema());
  ASSERT_TRUE(parser->Parse(FullLine(), &builder).ok());
  for (const Case& c : cases) {
    const absl::Status status = parser->Parse(c.line, &builder);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.line;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.line;
  }
  const Batch batch = builder.Take();
  EXPECT_EQ(batch.size, 1);
  EXPECT_TRUE(ValidateBatch(batch, CriteoSchema({})).ok());
}

}  // namespace
}  // namespace ps::worker::data
