#include "server/shard/sparse_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "common/spec/config.h"

namespace ps::server {
namespace {

std::unique_ptr<SparseOptimizer> Make(OptimizerSpec spec) {
  JobSpec job;
  *job.mutable_optimizer() = spec;
  // The defaults of a table's optimizer, as SetupJob writes them.
  SparseTableSpec* t = job.mutable_model()->add_sparse_tables();
  t->set_name("emb");
  t->set_dim(2);
  *t->mutable_optimizer() = spec;
  const JobSpec normal = NormalizeJobSpec(job);
  auto opt =
      SparseOptimizer::Create(normal.model().sparse_tables(0).optimizer());
  EXPECT_TRUE(opt.ok()) << opt.status();
  return *std::move(opt);
}

OptimizerSpec Kind(OptimizerSpec::Kind kind, float lr) {
  OptimizerSpec s;
  s.set_kind(kind);
  s.set_learning_rate(lr);
  return s;
}

// One row of dim 2 with weights `w`, updated once per gradient in `grads`.
struct Row {
  std::vector<float> w;
  std::vector<float> slots;
  uint32_t steps = 0;
};

Row Update(const SparseOptimizer& opt, std::vector<float> w,
           const std::vector<std::vector<float>>& grads, float scale = 1.0f) {
  Row row;
  row.w = w;
  row.slots.resize(opt.num_slots() * w.size());
  opt.InitSlots(absl::MakeSpan(row.slots));
  for (const auto& g : grads) {
    opt.Apply(opt.LearningRate(0), scale, g.data(), row.w.data(),
              row.slots.data(), &row.steps, static_cast<int>(w.size()));
  }
  return row;
}

TEST(SparseOptimizer, SgdWithLazyWeightDecayAndScale) {
  OptimizerSpec s = Kind(OptimizerSpec::SGD, 0.1f);
  auto opt = Make(s);
  EXPECT_EQ(opt->num_slots(), 0);
  Row r = Update(*opt, {1.0f, -1.0f}, {{2.0f, 4.0f}});
  EXPECT_FLOAT_EQ(r.w[0], 0.8f);
  EXPECT_FLOAT_EQ(r.w[1], -1.4f);
  // BSP's average: scale 1/2.
  r = Update(*opt, {1.0f, -1.0f}, {{2.0f, 4.0f}}, 0.5f);
  EXPECT_FLOAT_EQ(r.w[0], 0.9f);
  s.set_weight_decay(0.5f);
  r = Update(*Make(s), {1.0f, -1.0f}, {{2.0f, 4.0f}});
  EXPECT_FLOAT_EQ(r.w[0], 1.0f - 0.1f * (2.0f + 0.5f));   // 0.75
  EXPECT_FLOAT_EQ(r.w[1], -1.0f - 0.1f * (4.0f - 0.5f));  // -1.35
}

TEST(SparseOptimizer, Adagrad) {
  auto opt = Make(Kind(OptimizerSpec::ADAGRAD, 0.1f));
  ASSERT_EQ(opt->num_slots(), 1);
  // n = 0.1 (default initial accumulator) + 4; epsilon 1e-7.
  Row r = Update(*opt, {1.0f, 0.0f}, {{2.0f, 0.0f}, {-1.0f, 3.0f}});
  const double n1 = 0.1 + 4.0;
  const double w1 = 1.0 - 0.1 * 2.0 / (std::sqrt(n1) + 1e-7);
  EXPECT_NEAR(w1, 0.901227, 1e-6);
  const double n2 = n1 + 1.0;
  const double w2 = w1 - 0.1 * -1.0 / (std::sqrt(n2) + 1e-7);
  EXPECT_NEAR(r.w[0], w2, 1e-6);
  EXPECT_NEAR(r.slots[0], n2, 1e-6);
  EXPECT_NEAR(r.w[1], -0.1 * 3.0 / (std::sqrt(0.1 + 9.0) + 1e-7), 1e-6);
}

TEST(SparseOptimizer, LazyAdamCountsTheRowsOwnSteps) {
  auto opt = Make(Kind(OptimizerSpec::ADAM, 0.1f));
  ASSERT_EQ(opt->num_slots(), 2);
  // Step 1: m = 0.2, v = 0.004, m^ = 2, v^ = 4: w = 1 - 0.1 * 2 / 2 = 0.9.
  // Step 2 with the same gradient: m^ = 2 and v^ = 4 again: 0.8.
  Row r = Update(*opt, {1.0f, 1.0f}, {{2.0f, 2.0f}, {2.0f, 2.0f}});
  EXPECT_EQ(r.steps, 2u);
  EXPECT_NEAR(r.w[0], 0.8, 1e-6);
  EXPECT_NEAR(r.slots[0], 0.9 * 0.2 + 0.1 * 2.0, 1e-6);        // m
  EXPECT_NEAR(r.slots[2], 0.999 * 0.004 + 0.001 * 4.0, 1e-6);  // v
  // However many job steps passed between them: the row's count drives the
  // bias correction, so a row's first update is always a full step.
  Row first = Update(*opt, {1.0f, 1.0f}, {{2.0f, 2.0f}});
  EXPECT_NEAR(first.w[0], 0.9, 1e-6);
}

TEST(SparseOptimizer, FtrlProximal) {
  OptimizerSpec s = Kind(OptimizerSpec::FTRL, 0.1f);
  auto opt = Make(s);
  ASSERT_EQ(opt->num_slots(), 2);
  // n: 0.1 -> 4.1; sigma = (sqrt(4.1) - sqrt(0.1)) / 0.1; z = 2 - sigma * 1;
  // w = -z / (sqrt(4.1) / 0.1).
  const double sigma = (std::sqrt(4.1) - std::sqrt(0.1)) / 0.1;
  const double z = 2.0 - sigma;
  Row r = Update(*opt, {1.0f, 1.0f}, {{2.0f, 2.0f}});
  EXPECT_NEAR(r.w[0], -z / (std::sqrt(4.1) / 0.1), 1e-5);
  EXPECT_NEAR(r.w[0], 0.745052, 1e-5);
  EXPECT_NEAR(r.slots[0], z, 1e-4);    // z
  EXPECT_NEAR(r.slots[2], 4.1, 1e-6);  // n
  // L1 beyond |z| zeroes the weight; L1 and L2 below it shrink it.
  s.set_l1(20.0f);
  EXPECT_EQ(Update(*Make(s), {1.0f, 1.0f}, {{2.0f, 2.0f}}).w[0], 0.0f);
  s.set_l1(1.0f);
  s.set_l2(0.5f);
  s.set_beta(1.0f);
  r = Update(*Make(s), {1.0f, 1.0f}, {{2.0f, 2.0f}});
  EXPECT_NEAR(r.w[0], -(z + 1.0) / ((1.0 + std::sqrt(4.1)) / 0.1 + 1.0), 1e-5);
}

TEST(SparseOptimizer, ScheduleAsDense) {
  OptimizerSpec s = Kind(OptimizerSpec::ADAGRAD, 1.0f);
  s.mutable_schedule()->set_warmup_steps(4);
  auto opt = Make(s);
  EXPECT_FLOAT_EQ(opt->LearningRate(0), 0.25f);
  EXPECT_FLOAT_EQ(opt->LearningRate(3), 1.0f);
  EXPECT_FLOAT_EQ(opt->LearningRate(10), 1.0f);
}

TEST(SparseOptimizer, RefusesDenseOnlyKinds) {
  EXPECT_EQ(SparseOptimizer::Create(Kind(OptimizerSpec::MOMENTUM, 0.1f))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::server
