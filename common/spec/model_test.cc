#include "common/spec/model.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

ModelSpec Mlp() {
  ModelSpec m;
  m.mutable_mlp()->set_input_dim(784);
  m.mutable_mlp()->add_hidden(256);
  m.mutable_mlp()->add_hidden(128);
  m.mutable_mlp()->set_num_classes(10);
  return m;
}

TEST(Model, MlpExpandsToWeightAndBiasPerLayer) {
  auto tensors = ExpandModel(Mlp());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 6u);
  const std::pair<const char*, const char*> want[] = {
      {"fc0/weight", "[784, 256]"}, {"fc0/bias", "[256]"},
      {"fc1/weight", "[256, 128]"}, {"fc1/bias", "[128]"},
      {"fc2/weight", "[128, 10]"},  {"fc2/bias", "[10]"}};
  int64_t total = 0;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ((*tensors)[i].name(), want[i].first);
    EXPECT_EQ(ShapeString((*tensors)[i]), want[i].second);
    total += NumElements((*tensors)[i]);
  }
  EXPECT_EQ(total, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

TEST(Model, EmptyModelIsAnError) {
  auto tensors = ExpandModel(ModelSpec());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tensors.status().message().find("empty model"), std::string::npos);
}

TEST(Model, SparseTablesOnlyHaveNoDenseTensors) {
  ModelSpec m;
  SparseTableSpec* t = m.add_sparse_tables();
  t->set_name("emb");
  t->set_dim(8);
  auto tensors = ExpandModel(m);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_TRUE(tensors->empty());
  // Next to an MLP, the tables add no dense tensors.
  *m.mutable_mlp() = Mlp().mlp();
  tensors = ExpandModel(m);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), MlpTensors(m.mlp()).size());
}

TEST(Model, ExplicitTensorsMustMatchMlp) {
  ModelSpec m = Mlp();
  for (TensorSpec& t : MlpTensors(m.mlp())) *m.add_tensors() = t;
  EXPECT_TRUE(ExpandModel(m).ok());
  m.mutable_tensors(2)->set_shape(0, 255);
  auto bad = ExpandModel(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fc1/weight [255, 128]"),
            std::string::npos)
      << bad.status();
}

TEST(Model, NumElementsRejectsNegativeAndOverflow) {
  TensorSpec t;
  t.add_shape(3);
  t.add_shape(-1);
  EXPECT_EQ(NumElements(t), -1);
  TensorSpec huge;
  huge.add_shape(int64_t{1} << 40);
  huge.add_shape(int64_t{1} << 40);
  EXPECT_EQ(NumElements(huge), -1);
  EXPECT_EQ(NumElements(TensorSpec()), 1);
}

}  // namespace
}  // namespace ps
