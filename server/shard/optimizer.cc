#include "server/shard/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/shard/float_runs.h"
#include "server/shard/vector_clones.h"

namespace ps::server {
namespace {

absl::Status CheckSpec(const OptimizerSpec& s) {
  if (!(s.learning_rate() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.learning_rate must be > 0, got ", s.learning_rate()));
  }
  if (!(s.weight_decay() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.weight_decay must be >= 0, got ", s.weight_decay()));
  }
  if (s.kind() == OptimizerSpec::MOMENTUM &&
      !(s.momentum() >= 0 && s.momentum() < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.momentum must be in [0, 1), got ", s.momentum()));
  }
  if (s.kind() == OptimizerSpec::ADAM) {
    if (!(s.beta1() >= 0 && s.beta1() < 1) ||
        !(s.beta2() >= 0 && s.beta2() < 1) || !(s.epsilon() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer: Adam needs beta1, beta2 in [0, 1) and epsilon > 0, got ",
          s.beta1(), ", ", s.beta2(), ", ", s.epsilon()));
    }
  }
  const LrSchedule& sch = s.schedule();
  if (sch.warmup_steps() < 0) {
    return absl::InvalidArgumentError("optimizer.schedule.warmup_steps < 0");
  }
  if (sch.kind() == LrSchedule::STEP &&
      (sch.step_size() <= 0 || !(sch.gamma() > 0))) {
    return absl::InvalidArgumentError(
        "optimizer.schedule: STEP needs step_size > 0 and gamma > 0");
  }
  if (sch.kind() == LrSchedule::COSINE && sch.total_steps() <= 0) {
    return absl::InvalidArgumentError(
        "optimizer.schedule: COSINE needs total_steps > 0");
  }
  return absl::OkStatus();
}

// The update loops: plain indexed loops over restrict pointers that the
// compiler vectorises (built with -O3 -fno-math-errno), cloned for AVX2 and
// picked at load time on CPUs that have it (PS_VECTOR_CLONES, which says why
// not under sanitizers).

// `w` (in) and `o` (out) may be the same buffer: each element is read
// before it is written and nothing else is, so the loops carry no restrict
// between them (the compiler checks the overlap at run time).
PS_VECTOR_CLONES void SgdLoop(size_t n, float a, const float* __restrict g,
                              const float* w, float* o) {
  for (size_t i = 0; i < n; ++i) o[i] = w[i] - a * g[i];
}

PS_VECTOR_CLONES void SgdDecayLoop(size_t n, float lr, float scale, float wd,
                                   const float* __restrict g, const float* w,
                                   float* o) {
  for (size_t i = 0; i < n; ++i) o[i] = w[i] - lr * (g[i] * scale + wd * w[i]);
}

// The float at `p` (any alignment); sets `bad` if it is not finite, which is
// exactly when its exponent bits are all ones (an integer test whose
// OR-reduction vectorises).
inline float LoadChecked(const char* p, uint32_t& bad) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// SgdLoop and SgdDecayLoop fused with the NaN/Inf check, the gradient read
// from raw bytes at any alignment. Return nonzero if an element was not
// finite.
PS_VECTOR_CLONES uint32_t SgdCheckedLoop(size_t n, float a,
                                         const char* __restrict g,
                                         const float* w, float* o) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) o[i] = w[i] - a * LoadChecked(g + 4 * i, bad);
  return bad;
}

PS_VECTOR_CLONES uint32_t SgdDecayCheckedLoop(size_t n, float lr, float scale,
                                              float wd,
                                              const char* __restrict g,
                                              const float* w, float* o) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    o[i] = w[i] - lr * (LoadChecked(g + 4 * i, bad) * scale + wd * w[i]);
  }
  return bad;
}

PS_VECTOR_CLONES void MomentumLoop(size_t n, float lr, float scale, float wd,
                                   float mu, bool nesterov,
                                   const float* __restrict g, const float* w,
                                   float* o, float* __restrict v) {
  if (nesterov) {
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] * scale + wd * w[i];
      v[i] = mu * v[i] + gi;
      o[i] = w[i] - lr * (gi + mu * v[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] * scale + wd * w[i];
      v[i] = mu * v[i] + gi;
      o[i] = w[i] - lr * v[i];
    }
  }
}

PS_VECTOR_CLONES void AdamLoop(size_t n, float lr, float scale, float wd,
                               float b1, float b2, float eps, float c1,
                               float c2, const float* __restrict g,
                               const float* w, float* o, float* __restrict m,
                               float* __restrict v) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale + wd * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    o[i] = w[i] - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

class OptimizerImpl final : public Optimizer {
 public:
  explicit OptimizerImpl(const OptimizerSpec& spec) : spec_(spec) {
    if (spec_.kind() == OptimizerSpec::KIND_UNSPECIFIED) {
      spec_.set_kind(OptimizerSpec::SGD);
    }
    if (spec_.kind() == OptimizerSpec::ADAM) {
      if (spec_.beta1() == 0) spec_.set_beta1(0.9f);
      if (spec_.beta2() == 0) spec_.set_beta2(0.999f);
      if (spec_.epsilon() == 0) spec_.set_epsilon(1e-8f);
    }
  }

  float LearningRate(int64_t step) const override {
    const LrSchedule& s = spec_.schedule();
    const double lr = spec_.learning_rate();
    if (step < s.warmup_steps()) {
      return static_cast<float>(lr * static_cast<double>(step + 1) /
                                static_cast<double>(s.warmup_steps()));
    }
    const int64_t t = step - s.warmup_steps();
    switch (s.kind()) {
      case LrSchedule::STEP:
        return static_cast<float>(
            lr * std::pow(static_cast<double>(s.gamma()),
                          static_cast<double>(t / s.step_size())));
      case LrSchedule::COSINE: {
        const double frac = std::min<double>(
            1.0, static_cast<double>(t) / static_cast<double>(s.total_steps()));
        const double min_lr = s.min_lr();
        return static_cast<float>(
            min_lr +
            (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * frac)));
      }
      default:
        return static_cast<float>(lr);
    }
  }

  void InitSlots(int64_t n, OptimizerSlots* slots) const override {
    slots->steps = 0;
    slots->slot1.clear();
    slots->slot2.clear();
    if (spec_.kind() == OptimizerSpec::MOMENTUM ||
        spec_.kind() == OptimizerSpec::ADAM) {
      slots->slot1.assign(n, 0.0f);
    }
    if (spec_.kind() == OptimizerSpec::ADAM) slots->slot2.assign(n, 0.0f);
  }

  void ApplyTo(float lr, float scale, absl::Span<const float> grad,
               absl::Span<const float> in, absl::Span<float> weights,
               OptimizerSlots* slots) const override {
    const size_t n = weights.size();
    const float wd = spec_.weight_decay();
    ++slots->steps;
    switch (spec_.kind()) {
      case OptimizerSpec::MOMENTUM:
        MomentumLoop(n, lr, scale, wd, spec_.momentum(), spec_.nesterov(),
                     grad.data(), in.data(), weights.data(),
                     slots->slot1.data());
        return;
      case OptimizerSpec::ADAM: {
        const double t = static_cast<double>(slots->steps);
        const float c1 =
            static_cast<float>(1.0 / (1.0 - std::pow(spec_.beta1(), t)));
        const float c2 =
            static_cast<float>(1.0 / (1.0 - std::pow(spec_.beta2(), t)));
        AdamLoop(n, lr, scale, wd, spec_.beta1(), spec_.beta2(),
                 spec_.epsilon(), c1, c2, grad.data(), in.data(),
                 weights.data(), slots->slot1.data(), slots->slot2.data());
        return;
      }
      default:
        if (wd == 0.0f) {
          SgdLoop(n, lr * scale, grad.data(), in.data(), weights.data());
        } else {
          SgdDecayLoop(n, lr, scale, wd, grad.data(), in.data(),
                       weights.data());
        }
        return;
    }
  }

  bool CanApplyChecked() const override {
    return spec_.kind() == OptimizerSpec::SGD;
  }

  bool ApplyCheckedTo(float lr, float scale,
                      absl::Span<const absl::string_view> segments,
                      absl::Span<const float> in, absl::Span<float> out,
                      OptimizerSlots* slots) const override {
    const float wd = spec_.weight_decay();
    // The same arithmetic as ApplyTo's SGD loops, so that both paths give
    // the same bits.
    auto loop = [&](size_t n, const char* g, size_t at) {
      return wd == 0.0f ? SgdCheckedLoop(n, lr * scale, g, in.data() + at,
                                         out.data() + at)
                        : SgdDecayCheckedLoop(n, lr, scale, wd, g,
                                              in.data() + at, out.data() + at);
    };
    uint32_t bad = 0;
    size_t at = 0;  // the next element of `out`
    ForEachFloatRun(segments, [&](const char* g, size_t n) {
      n = std::min(n, out.size() - at);  // the caller checked the length
      bad |= loop(n, g, at);
      at += n;
      return true;
    });
    ++slots->steps;
    return bad == 0;
  }

  const OptimizerSpec& spec() const override { return spec_; }

 private:
  OptimizerSpec spec_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerSpec& spec) {
  auto impl = std::make_unique<OptimizerImpl>(spec);  // fills Adam defaults
  absl::Status s = CheckSpec(impl->spec());
  if (!s.ok()) return s;
  return impl;
}

}  // namespace ps::server
