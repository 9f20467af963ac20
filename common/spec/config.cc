#include "common/spec/config.h"

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/platform/file_system.h"
#include "common/spec/config_data.h"
#include "common/spec/config_sparse.h"
#include "common/spec/config_violations.h"
#include "common/spec/job_metric.h"
#include "common/spec/model.h"
#include "common/spec/model_graph.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace {

using config_internal::CheckDataFormat;
using config_internal::CheckModelInputs;
using config_internal::CheckOptimizer;
using config_internal::CheckSparseTables;
using config_internal::FieldsOf;
using config_internal::Finite;
using config_internal::LossForLabels;
using config_internal::NormalizeOptimizer;
using config_internal::NormalizeSparseTable;
using config_internal::OptimizerPath;
using config_internal::PathElem;
using config_internal::Violations;
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

// A layer model: every problem of its graph, each at its field's line; and
// a head that does not fit the data's labels.
void CheckLayerModel(const JobSpec& spec, Violations& v) {
  const ModelSpec& model = spec.model();
  std::vector<ModelIssue> issues;
  absl::StatusOr<ModelGraph> graph =
      ResolveModelGraph(model, SparseTablesOf(model), &issues);
  for (const ModelIssue& issue : issues) {
    std::vector<PathElem> path = {{"model"}};
    for (const FieldStep& s : issue.path)
      path.push_back({s.field.c_str(), s.index});
    v.Add(path, issue.message);
  }
  const HeadSpec::Loss fits = LossForLabels(spec.data());
  const HeadSpec::Loss loss = model.head().loss();
  if (loss != HeadSpec::LOSS_UNSPECIFIED && loss != fits) {
    v.Add(
        {{"model"}, {"head"}, {"loss"}},
        absl::StrCat(HeadSpec::Loss_Name(loss),
                     " does not fit the data's labels: the job reads ",
                     spec.data().format() == DataSpec::IDX
                         ? "IDX images (data.path)"
                         : DataSpec::Format_Name(spec.data().format()),
                     ", whose labels are ", FieldsOf(spec.data()).label_words));
  }
  if (!graph.ok() || model.tensors().empty()) return;
  if (auto expanded = ExpandModel(model); !expanded.ok()) {
    v.Add({{"model"}, {"tensors"}}, expanded.status().message());
  }
}

void CheckModel(const JobSpec& spec, Violations& v) {
  const ModelSpec& model = spec.model();
  if (HasLayers(model)) {
    CheckLayerModel(spec, v);
    return;
  }
  if (!model.has_mlp() && model.tensors().empty()) {
    if (model.sparse_tables().empty()) {
      v.Add({{"model"}},
            "empty model: set model.mlp or model.layers, or list "
            "model.tensors or model.sparse_tables");
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
    if (mlp.activation() == SIGMOID) {
      v.Add({{"model"}, {"mlp"}, {"activation"}},
            "an MLP takes RELU or TANH (SIGMOID is for layers)");
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
  CheckDataFormat(d, options, v);
  if (!options.check_dataset_files || d.format() != DataSpec::IDX) return;
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

// The target's metric and value (common/spec/job_metric.h); target_accuracy is
// its accuracy case, so a spec sets one or the other.
void CheckTarget(const JobSpec& spec, Violations& v) {
  if (!spec.has_target()) return;
  if (spec.target_accuracy() != 0) {
    v.Add({{"target"}},
          "set either target or target_accuracy (the accuracy case), not both");
  }
  const JobSpec::Target& t = spec.target();
  const TestMetricInfo* metric = FindTestMetric(t.metric());
  if (metric == nullptr) {
    v.Add({{"target"}, {"metric"}},
          absl::StrCat(t.metric().empty()
                           ? "must name a metric"
                           : absl::StrCat("unknown metric '", t.metric(), "'"),
                       "; one of ", TestMetricNames()));
    return;
  }
  if (std::string problem = TargetValueProblem(*metric, t.value());
      !problem.empty()) {
    v.Add({{"target"}, {"value"}}, problem);
  }
}

// Top-k goes with any wire dtype (fp16/bf16 narrow the values sent; the
// error feedback keeps fp32, only the rounding of what is sent is lost).
// Top-k with error feedback applies under every consistency model: the
// residual is the worker's own, so BSP, ASP and SSP differ only in when
// the sent part lands (as for an uncompressed gradient); a push the shards
// drop or refuse (a backup worker's, one too stale) loses its sent part as
// it would lose a dense one.
void CheckCompression(const CompressionSpec& c, Violations& v) {
  switch (c.wire_dtype()) {
    case DTYPE_UNSPECIFIED:
    case FLOAT32:
    case FLOAT16:
    case BFLOAT16:
      break;
    default:
      v.Add({{"compression"}, {"wire_dtype"}},
            absl::StrCat("unknown dtype ", static_cast<int>(c.wire_dtype())));
  }
  switch (c.kind()) {
    case CompressionSpec::NONE:
      if (c.ratio() != 0) {
        v.Add({{"compression"}, {"ratio"}},
              "only applies to kind TOPK (the kind is NONE)");
      }
      return;
    case CompressionSpec::TOPK:
      if (!(c.ratio() > 0 && c.ratio() <= 1)) {
        v.Add({{"compression"}, {"ratio"}},
              absl::StrCat("TOPK: the share of each chunk's elements sent "
                           "must be in (0, 1], got ",
                           c.ratio()));
      }
      return;
    default:
      v.Add({{"compression"}, {"kind"}},
            absl::StrCat("unknown kind ", static_cast<int>(c.kind())));
  }
}

void CheckJob(const JobSpec& spec, const ValidationOptions& options,
              Violations& v) {
  CheckModel(spec, v);
  CheckOptimizer(spec.optimizer(), OptimizerPath({{"optimizer"}}),
                 /*sparse=*/false, v);
  CheckSparseTables(spec, v);
  CheckConsistency(spec, v);
  CheckData(spec.data(), options, v);
  CheckModelInputs(spec, v);
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
  if (!(spec.target_accuracy() >= 0 && spec.target_accuracy() <= 1)) {
    v.Add({{"target_accuracy"}},
          absl::StrCat("must be in [0, 1], got ", spec.target_accuracy()));
  }
  CheckTarget(spec, v);
  CheckCompression(spec.compression(), v);
  // Replicated shards: the servers' count is checked at submit.
  if (spec.replication().factor() < 0 || spec.replication().factor() > 8) {
    v.Add({{"replication"}, {"factor"}},
          absl::StrCat("must be in [1, 8] (0: 1, unreplicated), got ",
                       spec.replication().factor()));
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
  if (spec.model().tensors().empty() &&
      (spec.model().has_mlp() || HasLayers(spec.model()))) {
    absl::StatusOr<std::vector<TensorSpec>> tensors = ExpandModel(spec.model());
    if (tensors.ok()) {
      for (TensorSpec& t : *tensors) {
        *spec.mutable_model()->add_tensors() = std::move(t);
      }
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
