#include "server/shard/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps::server {
namespace {

constexpr float kTol = 1e-6f;

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), kTol + 1e-5f * std::fabs(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

OptimizerSpec Spec(OptimizerSpec::Kind kind, float lr) {
  OptimizerSpec s;
  s.set_kind(kind);
  s.set_learning_rate(lr);
  return s;
}

struct UpdateCase {
  const char* name;
  OptimizerSpec spec;
  float scale;
  int steps;  // the same gradient applied this many times
  std::vector<float> want;
};

// w0 = {1, -2}, g = {0.5, 1}; expectations computed by hand below.
std::vector<UpdateCase> UpdateCases() {
  std::vector<UpdateCase> cases;
  cases.push_back(
      {"sgd", Spec(OptimizerSpec::SGD, 0.1f), 1.0f, 1, {1 - 0.05f, -2 - 0.1f}});
  // BSP passes the sum of 2 gradients with scale 1/2.
  cases.push_back({"sgd_scaled",
                   Spec(OptimizerSpec::SGD, 0.1f),
                   0.5f,
                   1,
                   {1 - 0.025f, -2 - 0.05f}});
  {
    OptimizerSpec s = Spec(OptimizerSpec::SGD, 0.1f);
    s.set_weight_decay(0.01f);
    // g' = g + 0.01 w = {0.51, 0.98}
    cases.push_back(
        {"sgd_weight_decay", s, 1.0f, 1, {1 - 0.051f, -2 - 0.098f}});
  }
  {
    OptimizerSpec s = Spec(OptimizerSpec::MOMENTUM, 0.1f);
    s.set_momentum(0.9f);
    // v1 = g, w1 = w0 - 0.1 g; v2 = 0.9 g + g = 1.9 g, w2 = w1 - 0.19 g.
    cases.push_back({"momentum_two_steps",
                     s,
                     1.0f,
                     2,
                     {1 - 0.29f * 0.5f, -2 - 0.29f * 1.0f}});
  }
  {
    OptimizerSpec s = Spec(OptimizerSpec::MOMENTUM, 0.1f);
    s.set_momentum(0.9f);
    s.set_nesterov(true);
    // step 1: v = g, w -= 0.1 (g + 0.9 g) = 0.19 g.
    cases.push_back(
        {"nesterov_one_step", s, 1.0f, 1, {1 - 0.19f * 0.5f, -2 - 0.19f}});
  }
  {
    // Adam's first step moves each weight by lr * g / (|g| + eps) ~ lr.
    OptimizerSpec s = Spec(OptimizerSpec::ADAM, 0.01f);
    cases.push_back({"adam_one_step", s, 1.0f, 1, {1 - 0.01f, -2 - 0.01f}});
    // Constant gradient: m_hat = g, v_hat = g^2 at every step.
    cases.push_back({"adam_three_steps", s, 1.0f, 3, {1 - 0.03f, -2 - 0.03f}});
  }
  return cases;
}

TEST(Optimizer, MatchesHandComputedUpdates) {
  for (const UpdateCase& c : UpdateCases()) {
    SCOPED_TRACE(c.name);
    auto opt = Optimizer::Create(c.spec);
    ASSERT_TRUE(opt.ok()) << opt.status();
    std::vector<float> w = {1.0f, -2.0f};
    const std::vector<float> g = {0.5f, 1.0f};
    OptimizerSlots slots;
    (*opt)->InitSlots(w.size(), &slots);
    const float lr = (*opt)->LearningRate(0);
    for (int i = 0; i < c.steps; ++i) {
      (*opt)->Apply(lr, c.scale, g, absl::MakeSpan(w), &slots);
    }
    ExpectNear(w, c.want);
    EXPECT_EQ(slots.steps, c.steps);
  }
}

TEST(Optimizer, AdamSecondStepByHand) {
  OptimizerSpec s = Spec(OptimizerSpec::ADAM, 0.1f);
  s.set_beta1(0.5f);
  s.set_beta2(0.5f);
  s.set_epsilon(1e-8f);
  auto opt = Optimizer::Create(s);
  ASSERT_TRUE(opt.ok());
  std::vector<float> w = {0.0f};
  OptimizerSlots slots;
  (*opt)->InitSlots(1, &slots);
  (*opt)->Apply(0.1f, 1.0f, std::vector<float>{1.0f}, absl::MakeSpan(w),
                &slots);
  // m1 = 0.5, v1 = 0.5, m^ = 1, v^ = 1: w = -0.1.
  // g = 3: m2 = 0.25 + 1.5 = 1.75, v2 = 0.25 + 4.5 = 4.75,
  // m^ = 1.75 / 0.75, v^ = 4.75 / 0.75: w = -0.1 - 0.1 * 2.3333 / 2.5166.
  (*opt)->Apply(0.1f, 1.0f, std::vector<float>{3.0f}, absl::MakeSpan(w),
                &slots);
  const float want = -0.1f - 0.1f * (1.75f / 0.75f) / std::sqrt(4.75f / 0.75f);
  ExpectNear(w, {want});
}

struct ScheduleCase {
  const char* name;
  LrSchedule schedule;
  int64_t step;
  float want;
};

TEST(Optimizer, LearningRateSchedules) {
  LrSchedule constant;
  constant.set_kind(LrSchedule::CONSTANT);
  LrSchedule warm = constant;
  warm.set_warmup_steps(4);
  LrSchedule step;
  step.set_kind(LrSchedule::STEP);
  step.set_step_size(10);
  step.set_gamma(0.5f);
  LrSchedule step_warm = step;
  step_warm.set_warmup_steps(2);
  LrSchedule cosine;
  cosine.set_kind(LrSchedule::COSINE);
  cosine.set_total_steps(100);
  cosine.set_min_lr(0.0f);
  const std::vector<ScheduleCase> cases = {
      {"constant", constant, 1000, 1.0f},
      {"warmup_first", warm, 0, 0.25f},
      {"warmup_mid", warm, 2, 0.75f},
      {"warmup_done", warm, 4, 1.0f},
      {"step_0", step, 9, 1.0f},
      {"step_1", step, 10, 0.5f},
      {"step_2", step, 25, 0.25f},
      {"step_after_warmup", step_warm, 12, 0.5f},
      {"cosine_start", cosine, 0, 1.0f},
      {"cosine_half", cosine, 50, 0.5f},
      {"cosine_end", cosine, 100, 0.0f},
      {"cosine_past_end", cosine, 500, 0.0f},
  };
  for (const ScheduleCase& c : cases) {
    SCOPED_TRACE(c.name);
    OptimizerSpec s = Spec(OptimizerSpec::SGD, 1.0f);
    *s.mutable_schedule() = c.schedule;
    auto opt = Optimizer::Create(s);
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_NEAR((*opt)->LearningRate(c.step), c.want, 1e-6);
  }
}

TEST(Optimizer, RejectsBadSpecs) {
  std::vector<OptimizerSpec> bad;
  bad.push_back(Spec(OptimizerSpec::SGD, 0.0f));
  {
    OptimizerSpec s = Spec(OptimizerSpec::MOMENTUM, 0.1f);
    s.set_momentum(1.0f);
    bad.push_back(s);
  }
  {
    OptimizerSpec s = Spec(OptimizerSpec::SGD, 0.1f);
    s.set_weight_decay(-1.0f);
    bad.push_back(s);
  }
  {
    OptimizerSpec s = Spec(OptimizerSpec::SGD, 0.1f);
    s.mutable_schedule()->set_kind(LrSchedule::STEP);
    bad.push_back(s);
  }
  for (const OptimizerSpec& s : bad) {
    EXPECT_EQ(Optimizer::Create(s).status().code(),
              absl::StatusCode::kInvalidArgument)
        << s.ShortDebugString();
  }
}

// The fused apply-and-check of SGD gives ApplyTo's bits whatever way the
// gradient's bytes are split (even inside a float), and finds a NaN or Inf
// wherever it is, a float split between two segments included.
TEST(Optimizer, CheckedApplyMatchesApplyToAndFindsNonFinite) {
  for (float wd : {0.0f, 0.01f}) {
    OptimizerSpec spec = Spec(OptimizerSpec::SGD, 0.1f);
    spec.set_weight_decay(wd);
    auto opt = Optimizer::Create(spec);
    ASSERT_TRUE(opt.ok()) << opt.status();
    ASSERT_TRUE((*opt)->CanApplyChecked());
    const size_t n = 1000;
    std::vector<float> w(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      w[i] = std::sin(static_cast<float>(i));
      g[i] = std::cos(static_cast<float>(i) * 0.37f);
    }
    OptimizerSlots ref_slots;
    std::vector<float> want(n);
    (*opt)->ApplyTo(0.1f, 0.5f, g, w, absl::MakeSpan(want), &ref_slots);
    // Offsets one byte past the start of a buffer: misaligned floats too.
    std::vector<char> bytes(n * 4 + 1);
    std::memcpy(bytes.data() + 1, g.data(), n * 4);
    const char* p = bytes.data() + 1;
    for (size_t piece : {size_t{1}, size_t{6}, size_t{4096}, n * 4}) {
      SCOPED_TRACE(testing::Message() << "wd " << wd << " piece " << piece);
      std::vector<absl::string_view> segments;
      for (size_t off = 0; off < n * 4; off += piece) {
        segments.emplace_back(p + off, std::min(piece, n * 4 - off));
      }
      std::vector<float> got(n);
      OptimizerSlots slots;
      EXPECT_TRUE((*opt)->ApplyCheckedTo(0.1f, 0.5f, segments, w,
                                         absl::MakeSpan(got), &slots));
      EXPECT_EQ(got, want);
      EXPECT_EQ(slots.steps, 1);
      // A non-finite element at the start, inside, and at the end.
      for (size_t at : {size_t{0}, size_t{501}, n - 1}) {
        for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::infinity()}) {
          std::vector<char> copy = bytes;
          std::memcpy(copy.data() + 1 + 4 * at, &bad, 4);
          std::vector<absl::string_view> bad_segments;
          for (size_t off = 0; off < n * 4; off += piece) {
            bad_segments.emplace_back(copy.data() + 1 + off,
                                      std::min(piece, n * 4 - off));
          }
          EXPECT_FALSE((*opt)->ApplyCheckedTo(0.1f, 0.5f, bad_segments, w,
                                              absl::MakeSpan(got), &slots))
              << "element " << at;
        }
      }
    }
  }
  // Momentum and Adam change their slots in place: not for the fused path.
  for (auto kind : {OptimizerSpec::MOMENTUM, OptimizerSpec::ADAM}) {
    OptimizerSpec spec = Spec(kind, 0.1f);
    spec.set_momentum(0.9f);
    auto opt = Optimizer::Create(spec);
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_FALSE((*opt)->CanApplyChecked());
  }
}

}  // namespace
}  // namespace ps::server
