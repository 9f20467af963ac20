#include "server/shard/sparse_optimizer.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::server {
namespace {

int SlotsOf(OptimizerSpec::Kind kind) {
  switch (kind) {
    case OptimizerSpec::ADAGRAD:
      return 1;
    case OptimizerSpec::ADAM:
    case OptimizerSpec::FTRL:
      return 2;
    default:
      return 0;
  }
}

void SgdRow(int dim, float lr, float scale, float wd, const float* g,
            float* w) {
  for (int i = 0; i < dim; ++i) w[i] -= lr * (g[i] * scale + wd * w[i]);
}

void AdagradRow(int dim, float lr, float scale, float wd, float eps,
                const float* g, float* w, float* n) {
  for (int i = 0; i < dim; ++i) {
    const float gi = g[i] * scale + wd * w[i];
    n[i] += gi * gi;
    w[i] -= lr * gi / (std::sqrt(n[i]) + eps);
  }
}

void AdamRow(int dim, float lr, float scale, const OptimizerSpec& s, uint32_t t,
             const float* g, float* w, float* m, float* v) {
  const float b1 = s.beta1(), b2 = s.beta2(), wd = s.weight_decay();
  // Lazy Adam as TensorFlow's LazyAdam and torch.optim.SparseAdam compute
  // it, with the row's own step count: the bias corrections fold into the
  // step size and epsilon is added to sqrt(v) uncorrected. (The dense Adam,
  // server/shard/optimizer.cc, follows torch.optim.Adam: epsilon added to
  // the corrected sqrt(v). The two differ only through epsilon.)
  const double t_d = static_cast<double>(t);
  const float step = static_cast<float>(
      static_cast<double>(lr) *
      std::sqrt(1.0 - std::pow(static_cast<double>(b2), t_d)) /
      (1.0 - std::pow(static_cast<double>(b1), t_d)));
  for (int i = 0; i < dim; ++i) {
    const float gi = g[i] * scale + wd * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] -= step * (m[i] / (std::sqrt(v[i]) + s.epsilon()));
  }
}

// n^q, with the common q = 0.5 as a square root.
float Pow(float n, float q) {
  return q == 0.5f ? std::sqrt(n) : std::pow(n, q);
}

void FtrlRow(int dim, float lr, float scale, const OptimizerSpec& s,
             const float* g, float* w, float* z, float* n) {
  const float q = -s.lr_power();
  const float l1 = s.l1(), l2 = s.l2(), beta = s.beta();
  for (int i = 0; i < dim; ++i) {
    const float gi = g[i] * scale;
    const float n_new = n[i] + gi * gi;
    const float sigma = (Pow(n_new, q) - Pow(n[i], q)) / lr;
    z[i] += gi - sigma * w[i];
    n[i] = n_new;
    if (std::abs(z[i]) <= l1) {
      w[i] = 0.0f;
    } else {
      const float sign = z[i] < 0 ? -1.0f : 1.0f;
      w[i] = -(z[i] - sign * l1) / ((beta + Pow(n[i], q)) / lr + 2.0f * l2);
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparseOptimizer>> SparseOptimizer::Create(
    const OptimizerSpec& spec) {
  switch (spec.kind()) {
    case OptimizerSpec::KIND_UNSPECIFIED:
    case OptimizerSpec::SGD:
    case OptimizerSpec::ADAGRAD:
    case OptimizerSpec::ADAM:
    case OptimizerSpec::FTRL:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("sparse tables take SGD, ADAGRAD, ADAM or FTRL, not ",
                       OptimizerSpec::Kind_Name(spec.kind())));
  }
  // The dense optimizer knows the schedule; its kind does not matter.
  OptimizerSpec schedule_spec = spec;
  schedule_spec.set_kind(OptimizerSpec::SGD);
  absl::StatusOr<std::unique_ptr<Optimizer>> schedule =
      Optimizer::Create(schedule_spec);
  if (!schedule.ok()) return schedule.status();
  return std::unique_ptr<SparseOptimizer>(
      new SparseOptimizer(spec, *std::move(schedule)));
}

SparseOptimizer::SparseOptimizer(const OptimizerSpec& spec,
                                 std::unique_ptr<Optimizer> schedule)
    : spec_(spec),
      num_slots_(SlotsOf(spec.kind())),
      schedule_(std::move(schedule)) {}

void SparseOptimizer::InitSlots(absl::Span<float> slots) const {
  const size_t dim = slots.size() / (num_slots_ > 0 ? num_slots_ : 1);
  for (float& x : slots) x = 0.0f;
  switch (spec_.kind()) {
    case OptimizerSpec::ADAGRAD:
      for (float& x : slots) x = spec_.initial_accumulator();
      return;
    case OptimizerSpec::FTRL:
      for (size_t i = dim; i < slots.size(); ++i) {
        slots[i] = spec_.initial_accumulator();  // n
      }
      return;
    default:
      return;
  }
}

void SparseOptimizer::Apply(float lr, float scale, const float* grad, float* w,
                            float* slots, uint32_t* steps, int dim) const {
  ++*steps;
  switch (spec_.kind()) {
    case OptimizerSpec::ADAGRAD:
      AdagradRow(dim, lr, scale, spec_.weight_decay(), spec_.epsilon(), grad, w,
                 slots);
      return;
    case OptimizerSpec::ADAM:
      AdamRow(dim, lr, scale, spec_, *steps, grad, w, slots, slots + dim);
      return;
    case OptimizerSpec::FTRL:
      FtrlRow(dim, lr, scale, spec_, grad, w, slots, slots + dim);
      return;
    default:
      SgdRow(dim, lr, scale, spec_.weight_decay(), grad, w);
      return;
  }
}

}  // namespace ps::server
