#include "common/spec/config_sparse.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/model.h"

namespace ps::config_internal {
namespace {

constexpr int kMaxSparseDim = 65536;
constexpr int kMaxSketchWidth = 1 << 28;
constexpr int kMaxSketchDepth = 16;
constexpr int kDefaultSketchWidth = 1 << 20;
constexpr int kDefaultSketchDepth = 4;

bool IsDenseKind(OptimizerSpec::Kind kind) {
  return kind == OptimizerSpec::KIND_UNSPECIFIED ||
         kind == OptimizerSpec::SGD || kind == OptimizerSpec::MOMENTUM ||
         kind == OptimizerSpec::ADAM;
}

// The fields of ADAGRAD and FTRL: set only with their kinds, in range.
void CheckSparseOptimizerFields(const OptimizerSpec& o, const OptimizerPath& at,
                                Violations& v) {
  const bool ftrl = o.kind() == OptimizerSpec::FTRL;
  const bool accumulates = ftrl || o.kind() == OptimizerSpec::ADAGRAD;
  if (o.initial_accumulator() != 0 && !accumulates) {
    v.Add(at({{"initial_accumulator"}}),
          "only applies to kind: ADAGRAD or FTRL");
  } else if (o.initial_accumulator() < 0 || !Finite(o.initial_accumulator())) {
    v.Add(at({{"initial_accumulator"}}),
          absl::StrCat("must be > 0 (0 = default 0.1), got ",
                       o.initial_accumulator()));
  }
  for (auto [name, value] : {std::pair{"l1", o.l1()}, std::pair{"l2", o.l2()},
                             std::pair{"beta", o.beta()}}) {
    if (value != 0 && !ftrl) {
      v.Add(at({{name}}), "only applies to kind: FTRL");
    } else if (value < 0 || !Finite(value)) {
      v.Add(at({{name}}), absl::StrCat("must be >= 0, got ", value));
    }
  }
  if (o.lr_power() != 0 && !ftrl) {
    v.Add(at({{"lr_power"}}), "only applies to kind: FTRL");
  } else if (!(o.lr_power() >= -1 && o.lr_power() <= 0)) {
    v.Add(at({{"lr_power"}}),
          absl::StrCat("must be in [-1, 0) (0 = default -0.5), got ",
                       o.lr_power()));
  }
  if (ftrl && o.weight_decay() != 0) {
    v.Add(at({{"weight_decay"}}),
          "does not apply to kind: FTRL (its L2 term is l2)");
  }
}

void CheckSparseInit(const InitializerSpec& init, int i, Violations& v) {
  switch (init.kind()) {
    case InitializerSpec::KIND_UNSPECIFIED:
    case InitializerSpec::ZEROS:
    case InitializerSpec::CONSTANT:
    case InitializerSpec::UNIFORM:
    case InitializerSpec::NORMAL:
      break;
    default:
      v.Add({{"model"}, {"sparse_tables", i}, {"init"}, {"kind"}},
            absl::StrCat(InitializerSpec::Kind_IsValid(init.kind())
                             ? InitializerSpec::Kind_Name(init.kind())
                             : absl::StrCat(static_cast<int>(init.kind())),
                         " does not apply to sparse tables (the fan-based "
                         "kinds need a weight matrix): use ZEROS, CONSTANT, "
                         "UNIFORM or NORMAL"));
  }
  if (init.scale() < 0 || !Finite(init.scale())) {
    v.Add({{"model"}, {"sparse_tables", i}, {"init"}, {"scale"}},
          absl::StrCat("must be >= 0 (0 = 1/sqrt(dim)), got ", init.scale()));
  }
  if (!Finite(init.value())) {
    v.Add({{"model"}, {"sparse_tables", i}, {"init"}, {"value"}},
          absl::StrCat("must be finite, got ", init.value()));
  }
}

void CheckAdmission(const AdmissionSpec& a, int i, Violations& v) {
  if (a.min_count() < 1) {
    v.Add({{"model"}, {"sparse_tables", i}, {"admission"}, {"min_count"}},
          absl::StrCat("must be >= 1 (drop the admission block to admit "
                       "every key), got ",
                       a.min_count()));
  }
  if (a.sketch_width() < 0 || a.sketch_width() > kMaxSketchWidth) {
    v.Add({{"model"}, {"sparse_tables", i}, {"admission"}, {"sketch_width"}},
          absl::StrCat("must be in [1, ", kMaxSketchWidth,
                       "] (0 = default 1048576), got ", a.sketch_width()));
  }
  if (a.sketch_depth() < 0 || a.sketch_depth() > kMaxSketchDepth) {
    v.Add({{"model"}, {"sparse_tables", i}, {"admission"}, {"sketch_depth"}},
          absl::StrCat("must be in [1, ", kMaxSketchDepth,
                       "] (0 = default 4), got ", a.sketch_depth()));
  }
}

}  // namespace

bool IsSparseKind(OptimizerSpec::Kind kind) {
  return kind == OptimizerSpec::KIND_UNSPECIFIED ||
         kind == OptimizerSpec::SGD || kind == OptimizerSpec::ADAGRAD ||
         kind == OptimizerSpec::ADAM || kind == OptimizerSpec::FTRL;
}

void CheckOptimizer(const OptimizerSpec& o, const OptimizerPath& at,
                    bool sparse, Violations& v) {
  if (!OptimizerSpec::Kind_IsValid(o.kind())) {
    v.Add(at({{"kind"}}),
          absl::StrCat("unknown optimizer kind ", static_cast<int>(o.kind())));
  } else if (sparse && !IsSparseKind(o.kind())) {
    v.Add(at({{"kind"}}),
          absl::StrCat(OptimizerSpec::Kind_Name(o.kind()),
                       " is for dense tensors only; sparse tables take SGD, "
                       "ADAGRAD, ADAM or FTRL"));
  } else if (!sparse && !IsDenseKind(o.kind())) {
    v.Add(at({{"kind"}}),
          absl::StrCat(OptimizerSpec::Kind_Name(o.kind()),
                       " is for sparse tables only (set it as "
                       "model.sparse_tables[i].optimizer); dense tensors take "
                       "SGD, MOMENTUM or ADAM"));
  }
  if (!(o.learning_rate() > 0) || !Finite(o.learning_rate())) {
    v.Add(at({{"learning_rate"}}),
          absl::StrCat("must be > 0, got ", o.learning_rate()));
  }
  if (o.momentum() < 0 || o.momentum() >= 1 || !Finite(o.momentum())) {
    v.Add(at({{"momentum"}}),
          absl::StrCat("must be in [0, 1), got ", o.momentum()));
  }
  if (o.nesterov() && o.kind() != OptimizerSpec::MOMENTUM) {
    v.Add(at({{"nesterov"}}), "only applies to kind: MOMENTUM");
  }
  if (o.kind() == OptimizerSpec::MOMENTUM && o.momentum() == 0) {
    v.Add(at({{"momentum"}}), "kind: MOMENTUM needs a momentum in (0, 1)");
  }
  for (auto [name, value] :
       {std::pair{"beta1", o.beta1()}, std::pair{"beta2", o.beta2()}}) {
    if (value < 0 || value >= 1 || !Finite(value)) {
      v.Add(at({{name}}), absl::StrCat("must be in [0, 1), got ", value));
    }
  }
  if (o.epsilon() < 0 || !Finite(o.epsilon())) {
    v.Add(at({{"epsilon"}}), absl::StrCat("must be >= 0, got ", o.epsilon()));
  }
  if (o.weight_decay() < 0 || !Finite(o.weight_decay())) {
    v.Add(at({{"weight_decay"}}),
          absl::StrCat("must be >= 0, got ", o.weight_decay()));
  }
  CheckSparseOptimizerFields(o, at, v);
  const LrSchedule& s = o.schedule();
  if (s.warmup_steps() < 0) {
    v.Add(at({{"schedule"}, {"warmup_steps"}}),
          absl::StrCat("must be >= 0, got ", s.warmup_steps()));
  }
  if (s.kind() == LrSchedule::STEP) {
    if (s.step_size() <= 0) {
      v.Add(
          at({{"schedule"}, {"step_size"}}),
          absl::StrCat("kind: STEP needs step_size > 0, got ", s.step_size()));
    }
    if (!(s.gamma() > 0 && s.gamma() <= 1)) {
      v.Add(at({{"schedule"}, {"gamma"}}),
            absl::StrCat("kind: STEP needs gamma in (0, 1], got ", s.gamma()));
    }
  }
  if (s.kind() == LrSchedule::COSINE && s.total_steps() <= s.warmup_steps()) {
    v.Add(at({{"schedule"}, {"total_steps"}}),
          absl::StrCat("kind: COSINE needs total_steps > warmup_steps (",
                       s.warmup_steps(), "), got ", s.total_steps()));
  }
  if (s.min_lr() < 0 || s.min_lr() > o.learning_rate()) {
    v.Add(at({{"schedule"}, {"min_lr"}}),
          absl::StrCat("must be in [0, learning_rate], got ", s.min_lr()));
  }
}

void CheckSparseTables(const JobSpec& spec, Violations& v) {
  const ModelSpec& model = spec.model();
  std::vector<std::string> names;
  for (const TensorSpec& t : model.tensors()) names.push_back(t.name());
  if (model.has_mlp() && model.tensors().empty()) {
    for (const TensorSpec& t : MlpTensors(model.mlp())) {
      names.push_back(t.name());
    }
  }
  const size_t num_dense = names.size();
  for (int i = 0; i < model.sparse_tables_size(); ++i) {
    const SparseTableSpec& t = model.sparse_tables(i);
    if (t.name().empty()) {
      v.Add({{"model"}, {"sparse_tables", i}, {"name"}}, "must not be empty");
    }
    for (size_t j = 0; j < names.size(); ++j) {
      if (names[j] == t.name() && !t.name().empty()) {
        v.Add({{"model"}, {"sparse_tables", i}, {"name"}},
              absl::StrCat("duplicate name '", t.name(), "' (",
                           j < num_dense ? "a tensor" : "another table",
                           " has it)"));
        break;
      }
    }
    names.push_back(t.name());
    if (t.dim() < 1 || t.dim() > kMaxSparseDim) {
      v.Add({{"model"}, {"sparse_tables", i}, {"dim"}},
            absl::StrCat("must be in [1, ", kMaxSparseDim, "], got ", t.dim()));
    }
    if (!DType_IsValid(t.dtype())) {
      v.Add({{"model"}, {"sparse_tables", i}, {"dtype"}},
            absl::StrCat("unknown dtype ", static_cast<int>(t.dtype())));
    }
    CheckSparseInit(t.init(), i, v);
    if (t.has_optimizer()) {
      CheckOptimizer(
          t.optimizer(),
          OptimizerPath({{"model"}, {"sparse_tables", i}, {"optimizer"}}),
          /*sparse=*/true, v);
    } else if (!IsSparseKind(spec.optimizer().kind())) {
      v.Add({{"model"}, {"sparse_tables", i}, {"optimizer"}},
            absl::StrCat("unset, so the job's optimizer applies, but its kind ",
                         OptimizerSpec::Kind_IsValid(spec.optimizer().kind())
                             ? OptimizerSpec::Kind_Name(spec.optimizer().kind())
                             : "?",
                         " is for dense tensors only: give the table its own "
                         "optimizer (SGD, ADAGRAD, ADAM or FTRL)"));
    }
    if (t.capacity() < 0) {
      v.Add({{"model"}, {"sparse_tables", i}, {"capacity"}},
            absl::StrCat("must be >= 0 (0 = unbounded), got ", t.capacity()));
    }
    if (!SparseTableSpec::Eviction_IsValid(t.eviction())) {
      v.Add({{"model"}, {"sparse_tables", i}, {"eviction"}},
            absl::StrCat("unknown eviction ", static_cast<int>(t.eviction())));
    } else if (t.eviction() == SparseTableSpec::LRU && t.capacity() == 0) {
      v.Add({{"model"}, {"sparse_tables", i}, {"eviction"}},
            "LRU needs a capacity (rows per shard) to evict at");
    }
    if (t.eviction() == SparseTableSpec::TTL) {
      if (t.ttl_versions() <= 0) {
        v.Add({{"model"}, {"sparse_tables", i}, {"ttl_versions"}},
              absl::StrCat("eviction: TTL needs ttl_versions > 0, got ",
                           t.ttl_versions()));
      }
    } else if (t.ttl_versions() != 0) {
      v.Add({{"model"}, {"sparse_tables", i}, {"ttl_versions"}},
            "only applies to eviction: TTL");
    }
    if (t.has_admission()) CheckAdmission(t.admission(), i, v);
  }
}

void NormalizeOptimizer(OptimizerSpec* o) {
  if (o->kind() == OptimizerSpec::KIND_UNSPECIFIED) {
    o->set_kind(OptimizerSpec::SGD);
  }
  if (o->kind() == OptimizerSpec::ADAM) {
    if (o->beta1() == 0) o->set_beta1(0.9f);
    if (o->beta2() == 0) o->set_beta2(0.999f);
    if (o->epsilon() == 0) o->set_epsilon(1e-8f);
  }
  if (o->kind() == OptimizerSpec::ADAGRAD) {
    if (o->epsilon() == 0) o->set_epsilon(1e-7f);
  }
  if (o->kind() == OptimizerSpec::ADAGRAD || o->kind() == OptimizerSpec::FTRL) {
    if (o->initial_accumulator() == 0) o->set_initial_accumulator(0.1f);
  }
  if (o->kind() == OptimizerSpec::FTRL && o->lr_power() == 0) {
    o->set_lr_power(-0.5f);
  }
  if (o->schedule().kind() == LrSchedule::KIND_UNSPECIFIED) {
    o->mutable_schedule()->set_kind(LrSchedule::CONSTANT);
  }
}

void NormalizeSparseTable(const OptimizerSpec& job_optimizer,
                          SparseTableSpec* t) {
  if (t->dtype() == DTYPE_UNSPECIFIED) t->set_dtype(FLOAT32);
  InitializerSpec* init = t->mutable_init();
  if (init->kind() == InitializerSpec::KIND_UNSPECIFIED) {
    init->set_kind(InitializerSpec::UNIFORM);
  }
  if ((init->kind() == InitializerSpec::UNIFORM ||
       init->kind() == InitializerSpec::NORMAL) &&
      init->scale() == 0 && t->dim() > 0) {
    init->set_scale(static_cast<float>(1.0 / std::sqrt(t->dim())));
  }
  if (!t->has_optimizer()) *t->mutable_optimizer() = job_optimizer;
  NormalizeOptimizer(t->mutable_optimizer());
  if (t->eviction() == SparseTableSpec::EVICTION_UNSPECIFIED) {
    t->set_eviction(SparseTableSpec::NONE);
  }
  if (t->has_admission()) {
    AdmissionSpec* a = t->mutable_admission();
    if (a->sketch_width() == 0) a->set_sketch_width(kDefaultSketchWidth);
    if (a->sketch_depth() == 0) a->set_sketch_depth(kDefaultSketchDepth);
  }
}

}  // namespace ps::config_internal
