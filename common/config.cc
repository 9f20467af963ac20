#include "common/config.h"

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "common/model.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::TextFormat;

// Collects protobuf's parse errors as "source:line:column: message".
class ParseErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit ParseErrors(absl::string_view source) : source_(source) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(
        absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, absl::StrCat("warning: ", message));
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

struct PathElem {
  const char* field;
  int index = -1;  // for repeated fields
};

// Accumulates rule violations, each prefixed with the field's dotted path
// and, when the spec came from text, the line it was written on.
class Violations {
 public:
  Violations(const Descriptor* root, const TextFormat::ParseInfoTree* tree,
             absl::string_view source)
      : root_(root), tree_(tree), source_(source) {}

  void Add(absl::Span<const PathElem> path, absl::string_view problem) {
    std::string name;
    const Descriptor* desc = root_;
    const TextFormat::ParseInfoTree* tree = tree_;
    int line = -1;
    for (const PathElem& e : path) {
      if (!name.empty()) absl::StrAppend(&name, ".");
      absl::StrAppend(&name, e.field);
      if (e.index >= 0) absl::StrAppend(&name, "[", e.index, "]");
      const FieldDescriptor* field =
          desc != nullptr ? desc->FindFieldByName(e.field) : nullptr;
      if (field == nullptr) {
        desc = nullptr;
        tree = nullptr;
        continue;
      }
      // A repeated field named without an index has no single location.
      if (field->is_repeated() != (e.index >= 0)) tree = nullptr;
      if (tree != nullptr) {
        const auto loc = tree->GetLocation(field, e.index);
        if (loc.line >= 0) line = loc.line;
        tree = field->message_type() != nullptr
                   ? tree->GetTreeForNested(field, e.index)
                   : nullptr;
      }
      desc = field->message_type();
    }
    std::string where = name;
    if (line >= 0) where = absl::StrCat(source_, ":", line + 1, ": ", name);
    messages_.push_back(absl::StrCat(where, ": ", problem));
  }

  absl::Status ToStatus() const {
    if (messages_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(messages_, "\n"));
  }

 private:
  const Descriptor* root_;
  const TextFormat::ParseInfoTree* tree_;
  std::string source_;
  std::vector<std::string> messages_;
};

bool Finite(double x) { return std::isfinite(x); }

constexpr int kMaxSparseDim = 65536;
constexpr int kMaxSketchWidth = 1 << 28;
constexpr int kMaxSketchDepth = 16;
constexpr int kDefaultSketchWidth = 1 << 20;
constexpr int kDefaultSketchDepth = 4;

void CheckModel(const ModelSpec& model, Violations& v) {
  if (!model.has_mlp() && model.tensors().empty()) {
    if (model.sparse_tables().empty()) {
      v.Add({{"model"}},
            "empty model: set model.mlp or list model.tensors or "
            "model.sparse_tables");
    }
    return;
  }
  if (model.has_mlp()) {
    const MlpSpec& mlp = model.mlp();
    if (mlp.input_dim() <= 0) {
      v.Add({{"model"}, {"mlp"}, {"input_dim"}},
            absl::StrCat("must be > 0, got ", mlp.input_dim()));
    }
    if (mlp.num_classes() < 2) {
      v.Add({{"model"}, {"mlp"}, {"num_classes"}},
            absl::StrCat("must be >= 2, got ", mlp.num_classes()));
    }
    for (int i = 0; i < mlp.hidden_size(); ++i) {
      if (mlp.hidden(i) <= 0) {
        v.Add({{"model"}, {"mlp"}, {"hidden", i}},
              absl::StrCat("layer width must be > 0, got ", mlp.hidden(i)));
      }
    }
  }
  std::vector<std::string> names;
  for (int i = 0; i < model.tensors_size(); ++i) {
    const TensorSpec& t = model.tensors(i);
    if (t.name().empty()) {
      v.Add({{"model"}, {"tensors", i}, {"name"}}, "must not be empty");
    }
    for (const std::string& n : names) {
      if (n == t.name() && !n.empty()) {
        v.Add({{"model"}, {"tensors", i}, {"name"}},
              absl::StrCat("duplicate tensor name '", n, "'"));
      }
    }
    names.push_back(t.name());
    if (t.shape().empty()) {
      v.Add({{"model"}, {"tensors", i}, {"shape"}}, "must not be empty");
    }
    for (int d = 0; d < t.shape_size(); ++d) {
      if (t.shape(d) <= 0) {
        v.Add({{"model"}, {"tensors", i}, {"shape", d}},
              absl::StrCat("dimension must be > 0, got ", t.shape(d)));
      }
    }
  }
  // Layer chaining for explicitly listed fc<i>/weight, fc<i>/bias tensors:
  // weight i is [in_i, out_i], bias i is [out_i], and out_i == in_{i+1}.
  if (!model.has_mlp()) {
    int64_t prev_out = -1;
    for (int i = 0; i < model.tensors_size(); ++i) {
      const TensorSpec& t = model.tensors(i);
      const bool is_weight =
          t.name().starts_with("fc") && t.name().ends_with("/weight");
      const bool is_bias =
          t.name().starts_with("fc") && t.name().ends_with("/bias");
      if (is_weight && t.shape_size() == 2) {
        if (prev_out >= 0 && t.shape(0) != prev_out) {
          v.Add({{"model"}, {"tensors", i}, {"shape"}},
                absl::StrCat("mismatched layer shapes: ", t.name(), " takes ",
                             t.shape(0), " inputs but the previous layer has ",
                             prev_out, " outputs"));
        }
        prev_out = t.shape(1);
      } else if (is_bias && t.shape_size() == 1 && prev_out >= 0 &&
                 t.shape(0) != prev_out) {
        v.Add({{"model"}, {"tensors", i}, {"shape"}},
              absl::StrCat("mismatched layer shapes: ", t.name(), " has ",
                           t.shape(0), " elements but its layer has ", prev_out,
                           " outputs"));
      }
    }
  } else if (!model.tensors().empty()) {
    auto expanded = ExpandModel(model);
    if (!expanded.ok()) {
      v.Add({{"model"}, {"tensors"}}, expanded.status().message());
    }
  }
}

// `at` prefixes the path of the optimizer spec being checked ("optimizer" or
// "model.sparse_tables[i].optimizer").
class OptimizerPath {
 public:
  explicit OptimizerPath(std::vector<PathElem> prefix)
      : prefix_(std::move(prefix)) {}
  std::vector<PathElem> operator()(std::initializer_list<PathElem> rest) const {
    std::vector<PathElem> path = prefix_;
    path.insert(path.end(), rest.begin(), rest.end());
    return path;
  }

 private:
  std::vector<PathElem> prefix_;
};

bool IsSparseKind(OptimizerSpec::Kind kind) {
  return kind == OptimizerSpec::KIND_UNSPECIFIED ||
         kind == OptimizerSpec::SGD || kind == OptimizerSpec::ADAGRAD ||
         kind == OptimizerSpec::ADAM || kind == OptimizerSpec::FTRL;
}

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

// `sparse`: the spec of a sparse table (kinds SGD, ADAGRAD, ADAM, FTRL), else
// the job's, which the dense tensors use (SGD, MOMENTUM, ADAM).
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

void CheckConsistency(const JobSpec& spec, Violations& v) {
  const ConsistencySpec& c = spec.consistency();
  ConsistencySpec::Model model = c.model();
  if (model == ConsistencySpec::MODEL_UNSPECIFIED) model = ConsistencySpec::BSP;
  const std::string model_name = ConsistencySpec::Model_Name(model);
  if (c.staleness() < 0) {
    v.Add({{"consistency"}, {"staleness"}},
          absl::StrCat("must be >= 0, got ", c.staleness()));
  } else if (c.staleness() > 0 && model != ConsistencySpec::SSP) {
    v.Add({{"consistency"}, {"staleness"}},
          absl::StrCat("a staleness bound only applies to SSP, not ",
                       model_name));
  }
  if (c.max_staleness() < 0) {
    v.Add({{"consistency"}, {"max_staleness"}},
          absl::StrCat("must be >= 0, got ", c.max_staleness()));
  } else if (c.max_staleness() > 0 && model != ConsistencySpec::ASP) {
    v.Add({{"consistency"}, {"max_staleness"}},
          absl::StrCat("only applies to ASP, not ", model_name));
  }
  if (c.staleness_aware_lr() && model != ConsistencySpec::ASP) {
    v.Add({{"consistency"}, {"staleness_aware_lr"}},
          absl::StrCat("only applies to ASP, not ", model_name));
  }
  if (c.overlap_communication() && model != ConsistencySpec::ASP) {
    v.Add({{"consistency"}, {"overlap_communication"}},
          absl::StrCat("only applies to ASP, not ", model_name,
                       " (a worker would compute on weights without its own "
                       "last update)"));
  }
  if (c.backup_workers() < 0) {
    v.Add({{"consistency"}, {"backup_workers"}},
          absl::StrCat("must be >= 0, got ", c.backup_workers()));
  } else if (c.backup_workers() > 0) {
    if (model != ConsistencySpec::BSP) {
      v.Add({{"consistency"}, {"backup_workers"}},
            absl::StrCat("only applies to BSP, not ", model_name));
    }
    if (spec.num_workers() == 0) {
      v.Add({{"consistency"}, {"backup_workers"}},
            "needs num_workers to be set (backups are counted out of it)");
    } else if (c.backup_workers() >= spec.num_workers()) {
      v.Add({{"consistency"}, {"backup_workers"}},
            absl::StrCat("more backup workers (", c.backup_workers(),
                         ") than workers can spare: num_workers is ",
                         spec.num_workers(),
                         " and at least one gradient must make a step"));
    }
  }
  if (c.barrier_timeout_ms() < 0) {
    v.Add({{"consistency"}, {"barrier_timeout_ms"}},
          absl::StrCat("must be >= 0, got ", c.barrier_timeout_ms()));
  }
  if (c.heartbeat_timeout_ms() < 0) {
    v.Add({{"consistency"}, {"heartbeat_timeout_ms"}},
          absl::StrCat("must be >= 0, got ", c.heartbeat_timeout_ms()));
  }
}

void CheckData(const DataSpec& d, const ValidationOptions& options,
               Violations& v) {
  if (d.batch_size() < 0) {
    v.Add({{"data"}, {"batch_size"}},
          absl::StrCat("must be > 0, got ", d.batch_size()));
  }
  if (d.epochs() < 0) {
    v.Add({{"data"}, {"epochs"}},
          absl::StrCat("must be >= 0, got ", d.epochs()));
  }
  if (d.max_steps() < 0) {
    v.Add({{"data"}, {"max_steps"}},
          absl::StrCat("must be >= 0, got ", d.max_steps()));
  }
  if (d.eval_every_steps() < 0) {
    v.Add({{"data"}, {"eval_every_steps"}},
          absl::StrCat("must be >= 0, got ", d.eval_every_steps()));
  }
  if (d.eval_examples() < 0) {
    v.Add({{"data"}, {"eval_examples"}},
          absl::StrCat("must be >= 0, got ", d.eval_examples()));
  }
  if (!options.check_dataset_files) return;
  const std::string dir = d.path().empty() ? kDefaultDatasetPath : d.path();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    v.Add({{"data"}, {"path"}},
          absl::StrCat("dataset directory '", dir, "' does not exist",
                       d.path().empty()
                           ? " (install Debian's dataset-fashion-mnist)"
                           : ""));
    return;
  }
  for (const char* file : kDatasetFiles) {
    const std::filesystem::path p = std::filesystem::path(dir) / file;
    if (!std::filesystem::is_regular_file(p, ec)) {
      v.Add({{"data"}, {"path"}},
            absl::StrCat("dataset directory '", dir, "' lacks ", file,
                         " (expected the four MNIST-format IDX .gz files)"));
    }
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

void CheckJob(const JobSpec& spec, const ValidationOptions& options,
              Violations& v) {
  CheckModel(spec.model(), v);
  CheckOptimizer(spec.optimizer(), OptimizerPath({{"optimizer"}}),
                 /*sparse=*/false, v);
  CheckSparseTables(spec, v);
  CheckConsistency(spec, v);
  CheckData(spec.data(), options, v);
  if (spec.num_workers() < 0) {
    v.Add({{"num_workers"}},
          absl::StrCat("must be >= 0 (0 = every registered worker), got ",
                       spec.num_workers()));
  }
  if (spec.chunk_bytes() != 0 && spec.chunk_bytes() < 4) {
    v.Add({{"chunk_bytes"}},
          absl::StrCat("must be >= 4, got ", spec.chunk_bytes()));
  }
  const CheckpointSpec& ck = spec.checkpoint();
  if (ck.every_versions() < 0 || ck.every_seconds() < 0 || ck.keep() < 0) {
    v.Add({{"checkpoint"}},
          "every_versions, every_seconds and keep must be >= 0");
  }
  for (int i = 0; i < spec.stragglers_size(); ++i) {
    const StragglerInjection& s = spec.stragglers(i);
    if (s.worker_rank() < 0 ||
        (spec.num_workers() > 0 && s.worker_rank() >= spec.num_workers())) {
      v.Add({{"stragglers", i}, {"worker_rank"}},
            absl::StrCat("must be in [0, num_workers), got ", s.worker_rank()));
    }
    if (s.delay_ms() < 0) {
      v.Add({{"stragglers", i}, {"delay_ms"}},
            absl::StrCat("must be >= 0, got ", s.delay_ms()));
    }
    if (s.compute_factor() != 0 && !(s.compute_factor() >= 1)) {
      v.Add({{"stragglers", i}, {"compute_factor"}},
            absl::StrCat("must be >= 1 (or unset), got ", s.compute_factor()));
    }
  }
  const StragglerPolicy& sp = spec.straggler_policy();
  if (sp.slow_ratio() < 0 || sp.slow_ratio() >= 1) {
    v.Add({{"straggler_policy"}, {"slow_ratio"}},
          absl::StrCat("must be in [0, 1), got ", sp.slow_ratio()));
  }
  if (sp.window_steps() < 0) {
    v.Add({{"straggler_policy"}, {"window_steps"}},
          absl::StrCat("must be >= 0, got ", sp.window_steps()));
  }
  if (spec.target_accuracy() < 0 || spec.target_accuracy() > 1) {
    v.Add({{"target_accuracy"}},
          absl::StrCat("must be in [0, 1], got ", spec.target_accuracy()));
  }
}

template <typename Message>
absl::Status ParseText(absl::string_view text, absl::string_view source,
                       Message* out, TextFormat::ParseInfoTree* tree) {
  ParseErrors errors(source);
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(tree);
  if (!parser.ParseFromString(std::string(text), out)) {
    if (errors.errors().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": not a valid ", Message::descriptor()->name(),
                       " in text format"));
    }
    return absl::InvalidArgumentError(absl::StrJoin(errors.errors(), "\n"));
  }
  return absl::OkStatus();
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

// `job_optimizer` is normalised already.
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

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  return FileSystem::Posix()->ReadFile(path);
}

absl::Status ValidateJobSpec(const JobSpec& spec,
                             const ValidationOptions& options) {
  Violations v(JobSpec::descriptor(), nullptr, "");
  CheckJob(spec, options, v);
  return v.ToStatus();
}

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text,
                                     absl::string_view source,
                                     const ValidationOptions& options) {
  JobSpec spec;
  TextFormat::ParseInfoTree tree;
  if (absl::Status s = ParseText(text, source, &spec, &tree); !s.ok()) {
    return s;
  }
  Violations v(JobSpec::descriptor(), &tree, source);
  CheckJob(spec, options, v);
  if (absl::Status s = v.ToStatus(); !s.ok()) return s;
  return NormalizeJobSpec(spec);
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path,
                                    const ValidationOptions& options) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, path, options);
}

JobSpec NormalizeJobSpec(const JobSpec& in) {
  JobSpec spec = in;
  if (spec.name().empty()) spec.set_name("job");
  if (spec.model().tensors().empty() && spec.model().has_mlp()) {
    for (TensorSpec& t : MlpTensors(spec.model().mlp())) {
      *spec.mutable_model()->add_tensors() = std::move(t);
    }
  }
  if (spec.model().has_mlp() &&
      spec.model().mlp().activation() == ACTIVATION_UNSPECIFIED) {
    spec.mutable_model()->mutable_mlp()->set_activation(RELU);
  }
  for (TensorSpec& t : *spec.mutable_model()->mutable_tensors()) {
    if (t.init().kind() == InitializerSpec::KIND_UNSPECIFIED) {
      t.mutable_init()->set_kind(t.shape_size() < 2
                                     ? InitializerSpec::ZEROS
                                     : InitializerSpec::HE_UNIFORM);
    }
  }
  NormalizeOptimizer(spec.mutable_optimizer());
  for (SparseTableSpec& t : *spec.mutable_model()->mutable_sparse_tables()) {
    NormalizeSparseTable(spec.optimizer(), &t);
  }
  ConsistencySpec* c = spec.mutable_consistency();
  if (c->model() == ConsistencySpec::MODEL_UNSPECIFIED) {
    c->set_model(ConsistencySpec::BSP);
  }
  if (c->barrier_timeout_ms() == 0) c->set_barrier_timeout_ms(30000);
  if (c->heartbeat_timeout_ms() == 0) c->set_heartbeat_timeout_ms(10000);
  DataSpec* d = spec.mutable_data();
  if (d->path().empty()) d->set_path(kDefaultDatasetPath);
  if (d->batch_size() == 0) d->set_batch_size(128);
  if (d->epochs() == 0 && d->max_steps() == 0) d->set_epochs(1);
  if (spec.chunk_bytes() == 0) spec.set_chunk_bytes(256 * 1024);
  if (spec.checkpoint().keep() == 0) spec.mutable_checkpoint()->set_keep(3);
  return spec;
}

absl::Status ValidateClusterSpec(const ClusterSpec& spec) {
  Violations v(ClusterSpec::descriptor(), nullptr, "");
  if (spec.num_servers() < 0) {
    v.Add({{"num_servers"}}, absl::StrCat("must be >= 1 (0 = default 1), got ",
                                          spec.num_servers()));
  }
  if (spec.num_workers() < 0) {
    v.Add({{"num_workers"}}, absl::StrCat("must be >= 1 (0 = default 1), got ",
                                          spec.num_workers()));
  }
  if (spec.cpu_threads() < 0) {
    v.Add({{"cpu_threads"}},
          absl::StrCat("must be >= 0, got ", spec.cpu_threads()));
  }
  const std::string& dev = spec.device();
  if (!dev.empty() && dev != "cpu" && dev != "cuda" &&
      !dev.starts_with("cuda:")) {
    v.Add({{"device"}},
          absl::StrCat("must be cpu, cuda or cuda:N, got '", dev, "'"));
  }
  const TlsSpec& tls = spec.tls();
  if (tls.cert_file().empty() != tls.key_file().empty()) {
    v.Add({{"tls"}}, "cert_file and key_file must be set together");
  }
  if (!tls.ca_file().empty() && tls.cert_file().empty()) {
    v.Add({{"tls"}, {"ca_file"}}, "mutual TLS needs cert_file and key_file");
  }
  return v.ToStatus();
}

absl::StatusOr<ClusterSpec> ParseClusterSpec(absl::string_view text,
                                             absl::string_view source) {
  ClusterSpec spec;
  TextFormat::ParseInfoTree tree;
  if (absl::Status s = ParseText(text, source, &spec, &tree); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateClusterSpec(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return spec;
}

absl::StatusOr<ClusterSpec> LoadClusterSpec(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseClusterSpec(*text, path);
}

}  // namespace ps
