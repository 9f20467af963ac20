#include "worker/data/batch.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

BatchSchema TwoFieldSchema() {
  BatchSchema schema;
  schema.dense_dim = 2;
  schema.sparse.push_back({"plain", false});
  schema.sparse.push_back({"weighted", true});
  schema.label_kind = LabelKind::kFloat;
  return schema;
}

TEST(BatchBuilder, BuildsCsrBagsDenseRowsAndLabels) {
  BatchBuilder builder(TwoFieldSchema());
  builder.Reset(/*first_example=*/40);

  builder.BeginExample();
  builder.dense()[0] = 1.5f;
  builder.AddId(0, 7);
  builder.AddId(0, 8);
  builder.AddWeightedId(1, 100, 0.25f);
  builder.SetLabel(1.0f);
  ASSERT_TRUE(builder.EndExample().ok());

  builder.BeginExample();  // empty bags, dense row of zeros
  ASSERT_TRUE(builder.EndExample().ok());

  builder.BeginExample();
  builder.dense()[1] = -2.0f;
  builder.AddId(1, 5);  // weight 1 on a weighted field
  builder.SetLabel(3.5f);
  ASSERT_TRUE(builder.EndExample().ok());

  const Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, TwoFieldSchema()).ok());
  EXPECT_EQ(batch.size, 3);
  EXPECT_EQ(batch.first_example, 40);
  EXPECT_THAT(batch.dense, ElementsAre(1.5f, 0, 0, 0, 0, -2.0f));
  EXPECT_THAT(batch.dense_row(2), ElementsAre(0, -2.0f));
  EXPECT_EQ(batch.sparse[0].name, "plain");
  EXPECT_THAT(batch.sparse[0].keys, ElementsAre(7, 8));
  EXPECT_THAT(batch.sparse[0].offsets, ElementsAre(0, 2, 2, 2));
  EXPECT_TRUE(batch.sparse[0].weights.empty());
  EXPECT_EQ(batch.sparse[0].bag_size(0), 2);
  EXPECT_THAT(batch.sparse[1].keys, ElementsAre(100, 5));
  EXPECT_THAT(batch.sparse[1].offsets, ElementsAre(0, 1, 1, 2));
  EXPECT_THAT(batch.sparse[1].weights, ElementsAre(0.25f, 1.0f));
  EXPECT_THAT(batch.labels, ElementsAre(1.0f, 0.0f, 3.5f));
  EXPECT_TRUE(batch.classes.empty());
}

TEST(BatchBuilder, AbortDropsTheOpenExampleOnly) {
  BatchBuilder builder(TwoFieldSchema());
  builder.BeginExample();
  builder.dense()[0] = 1;
  builder.AddId(0, 1);
  builder.AddWeightedId(1, 2, 0.5f);
  ASSERT_TRUE(builder.EndExample().ok());

  builder.BeginExample();
  builder.dense()[0] = 9;
  builder.AddId(0, 99);
  builder.AddWeightedId(1, 98, 9.0f);
  builder.AbortExample();

  const Batch batch = builder.Take();
  ASSERT_TRUE(ValidateBatch(batch, TwoFieldSchema()).ok());
  EXPECT_EQ(batch.size, 1);
  EXPECT_THAT(batch.dense, ElementsAre(1, 0));
  EXPECT_THAT(batch.sparse[0].keys, ElementsAre(1));
  EXPECT_THAT(batch.sparse[1].weights, ElementsAre(0.5f));
}

TEST(BatchBuilder, ClassLabelsAndReuseAfterReset) {
  BatchSchema schema;
  schema.label_kind = LabelKind::kClass;
  schema.num_classes = 10;
  BatchBuilder builder(schema);
  for (int c : {3, 9}) {
    builder.BeginExample();
    builder.SetClass(c);
    ASSERT_TRUE(builder.EndExample().ok());
  }
  Batch first = builder.Take();
  EXPECT_THAT(first.classes, ElementsAre(3, 9));
  EXPECT_TRUE(first.labels.empty());
  ASSERT_TRUE(ValidateBatch(first, schema).ok());

  builder.Reset(2);
  EXPECT_EQ(builder.size(), 0);
  builder.BeginExample();
  builder.SetClass(4);
  ASSERT_TRUE(builder.EndExample().ok());
  Batch second = builder.Take();
  EXPECT_EQ(second.first_example, 2);
  EXPECT_THAT(second.classes, ElementsAre(4));
}

TEST(ValidateBatch, NamesTheBrokenInvariant) {
  const BatchSchema schema = TwoFieldSchema();
  BatchBuilder builder(schema);
  builder.BeginExample();
  builder.AddId(0, 1);
  builder.AddWeightedId(1, 2, 0.5f);
  ASSERT_TRUE(builder.EndExample().ok());
  const Batch good = builder.Take();
  ASSERT_TRUE(ValidateBatch(good, schema).ok());

  struct Case {
    const char* name;
    std::function<void(Batch&)> corrupt;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"dense size", [](Batch& b) { b.dense.push_back(0); }, "dense holds"},
      {"dense_dim", [](Batch& b) { b.dense_dim = 3; }, "dense_dim"},
      {"field count", [](Batch& b) { b.sparse.pop_back(); }, "sparse fields"},
      {"field name", [](Batch& b) { b.sparse[0].name = "x"; }, "is named"},
      {"offsets length", [](Batch& b) { b.sparse[0].offsets.push_back(1); },
       "offsets must be"},
      {"offsets start", [](Batch& b) { b.sparse[0].offsets[0] = 1; },
       "offsets must be"},
      {"offsets end", [](Batch& b) { b.sparse[0].keys.push_back(3); },
       "offsets end"},
      {"weights", [](Batch& b) { b.sparse[1].weights.clear(); }, "weights"},
      {"unweighted with weights",
       [](Batch& b) { b.sparse[0].weights.push_back(1); }, "weights"},
      {"label kind", [](Batch& b) { b.label_kind = LabelKind::kClass; },
       "label kind"},
      {"labels", [](Batch& b) { b.labels.clear(); }, "float labels"},
  };
  for (const Case& c : cases) {
    Batch bad = good;
    c.corrupt(bad);
    const absl::Status status = ValidateBatch(bad, schema);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.name;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.name;
  }

  Batch decreasing;
  decreasing.size = 2;
  decreasing.sparse.push_back({"f", {1, 2}, {0, 2, 1}, {}});
  BatchSchema one_field;
  one_field.sparse.push_back({"f", false});
  EXPECT_THAT(std::string(ValidateBatch(decreasing, one_field).message()),
              HasSubstr("decrease"));

  BatchSchema classes;
  classes.label_kind = LabelKind::kClass;
  classes.num_classes = 3;
  Batch out_of_range;
  out_of_range.size = 1;
  out_of_range.label_kind = LabelKind::kClass;
  out_of_range.classes = {3};
  EXPECT_THAT(std::string(ValidateBatch(out_of_range, classes).message()),
              HasSubstr("outside [0, 3)"));
}

}  // namespace
}  // namespace ps::worker::data
