#include "common/spec/config_data.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/model_graph.h"

namespace ps::config_internal {
namespace {

constexpr int kCriteoIntegers = 13;
constexpr int kCriteoCategoricals = 26;

bool IsText(const DataSpec& d) { return d.format() != DataSpec::IDX; }

void CheckFiles(const google::protobuf::RepeatedPtrField<std::string>& files,
                const char* field, Violations& v) {
  for (int i = 0; i < files.size(); ++i) {
    std::error_code ec;
    if (files[i].empty()) {
      v.Add({{"data"}, {field, i}}, "empty file name");
    } else if (!std::filesystem::is_regular_file(files[i], ec)) {
      v.Add({{"data"}, {field, i}},
            absl::StrCat("file '", files[i], "' does not exist"));
    }
  }
}

int64_t Product(const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

FormatFields FieldsOf(const DataSpec& data) {
  FormatFields f;
  switch (data.format()) {
    case DataSpec::CRITEO:
      f.dense_dim = kCriteoIntegers;
      for (int i = 1; i <= kCriteoCategoricals; ++i)
        f.sparse.push_back(absl::StrCat("C", i));
      f.labels = HeadSpec::SIGMOID_CROSS_ENTROPY;
      f.label_words = "clicks 0/1 (SIGMOID_CROSS_ENTROPY)";
      break;
    case DataSpec::LIBSVM:
      if (data.libsvm().dense_dim() > 0) {
        f.dense_dim = data.libsvm().dense_dim();
      } else {
        f.sparse.push_back("features");
      }
      switch (data.libsvm().labels()) {
        case LibsvmFormatSpec::REAL:
          f.labels = HeadSpec::MEAN_SQUARED_ERROR;
          f.label_words = "real targets (MEAN_SQUARED_ERROR)";
          break;
        case LibsvmFormatSpec::CLASS:
          f.labels = HeadSpec::SOFTMAX_CROSS_ENTROPY;
          f.label_words = "classes (SOFTMAX_CROSS_ENTROPY)";
          break;
        default:
          f.labels = HeadSpec::SIGMOID_CROSS_ENTROPY;
          f.label_words = "binary labels (SIGMOID_CROSS_ENTROPY)";
      }
      break;
    case DataSpec::MOVIELENS:
      f.sparse = {"user", "item"};
      f.labels = HeadSpec::MEAN_SQUARED_ERROR;
      f.label_words = "ratings (MEAN_SQUARED_ERROR)";
      break;
    default:
      f.dense_dim = -1;
      f.labels = HeadSpec::SOFTMAX_CROSS_ENTROPY;
      f.label_words = "classes (SOFTMAX_CROSS_ENTROPY)";
  }
  return f;
}

HeadSpec::Loss LossForLabels(const DataSpec& data) {
  return FieldsOf(data).labels;
}

void CheckDataFormat(const DataSpec& d, const ValidationOptions& options,
                     Violations& v) {
  if (!IsText(d)) {
    if (d.train_files_size() > 0 || d.test_files_size() > 0) {
      v.Add({{"data"}, {"train_files"}},
            "IDX data is read from data.path; train_files and test_files "
            "need a text format (data.format CRITEO, LIBSVM or MOVIELENS)");
    }
    return;
  }
  if (d.train_files_size() == 0) {
    v.Add(
        {{"data"}, {"train_files"}},
        absl::StrCat("required for format ", DataSpec::Format_Name(d.format()),
                     ": the training files (plain or .gz)"));
  }
  if (options.check_dataset_files) {
    CheckFiles(d.train_files(), "train_files", v);
    CheckFiles(d.test_files(), "test_files", v);
  }
  if (d.has_max_bad_line_fraction() &&
      !(d.max_bad_line_fraction() >= 0 && d.max_bad_line_fraction() <= 1)) {
    v.Add({{"data"}, {"max_bad_line_fraction"}},
          absl::StrCat("must be in [0, 1], got ", d.max_bad_line_fraction()));
  }
  if (d.min_bad_lines() < 0) {
    v.Add({{"data"}, {"min_bad_lines"}},
          absl::StrCat("must be >= 0, got ", d.min_bad_lines()));
  }
  if (d.shuffle_buffer() < 0) {
    v.Add({{"data"}, {"shuffle_buffer"}},
          absl::StrCat("must be >= 0, got ", d.shuffle_buffer()));
  }
  const LibsvmFormatSpec& l = d.libsvm();
  if (d.format() == DataSpec::LIBSVM) {
    if (l.labels() == LibsvmFormatSpec::CLASS && l.num_classes() < 2) {
      v.Add(
          {{"data"}, {"libsvm"}, {"num_classes"}},
          absl::StrCat("must be >= 2 for CLASS labels, got ", l.num_classes()));
    }
    if (l.dense_dim() < 0 || l.dense_dim() > (int64_t{1} << 24)) {
      v.Add({{"data"}, {"libsvm"}, {"dense_dim"}},
            absl::StrCat("must be in [0, 2^24], got ", l.dense_dim()));
    }
    if (l.has_index_base() && l.index_base() < 0) {
      v.Add({{"data"}, {"libsvm"}, {"index_base"}},
            absl::StrCat("must be >= 0, got ", l.index_base()));
    }
  }
  const MovieLensFormatSpec& m = d.movielens();
  if (d.format() == DataSpec::MOVIELENS &&
      !(m.min_rating() == 0 && m.max_rating() == 0) &&
      !(Finite(m.min_rating()) && Finite(m.max_rating()) &&
        m.min_rating() <= m.max_rating())) {
    v.Add({{"data"}, {"movielens"}},
          absl::StrCat("min_rating must be <= max_rating, both finite; got ",
                       m.min_rating(), " and ", m.max_rating()));
  }
}

void CheckModelInputs(const JobSpec& spec, Violations& v) {
  const DataSpec& d = spec.data();
  const ModelSpec& model = spec.model();
  if (spec.has_python()) {
    // The script computes the model: the spec holds its parameters only.
    if (HasLayers(model) || model.has_mlp() || model.has_head()) {
      v.Add({{"model"}},
            "a Python job (python {}) computes its model in its script: "
            "list only model.tensors and model.sparse_tables (the script's "
            "ps.torch.model_spec prints them)");
    }
    return;
  }
  const FormatFields fields = FieldsOf(d);
  if (!IsText(d)) {
    // A model of tables alone (no layers: the shards' tests and benchmarks
    // drive it directly) reads no data.
    for (int i = 0; i < model.inputs_size(); ++i) {
      const std::string& name = model.inputs(i).name();
      if (name != "dense" && name != "image") {
        v.Add({{"model"}, {"inputs", i}, {"name"}},
              absl::StrCat("IDX images give only the inputs \"dense\" and "
                           "\"image\", not the sparse field \"",
                           name,
                           "\": a sparse model needs data.format CRITEO, "
                           "LIBSVM or MOVIELENS and data.train_files"));
      }
    }
    return;
  }
  if (!HasLayers(model)) {
    v.Add({{"model"}},
          absl::StrCat("data.format ", DataSpec::Format_Name(d.format()),
                       " needs a layer model (model.inputs, model.layers and "
                       "model.head); model.mlp trains on IDX images only"));
    return;
  }
  for (int i = 0; i < model.inputs_size(); ++i) {
    const ModelInputSpec& in = model.inputs(i);
    if (in.name() == "dense" || in.name() == "image") {
      if (fields.dense_dim <= 0) {
        v.Add({{"model"}, {"inputs", i}, {"name"}},
              absl::StrCat("data.format ", DataSpec::Format_Name(d.format()),
                           " gives no dense features"));
      } else if (Product(in.shape()) != fields.dense_dim) {
        v.Add({{"model"}, {"inputs", i}, {"shape"}},
              absl::StrCat("data.format ", DataSpec::Format_Name(d.format()),
                           " gives ", fields.dense_dim,
                           " dense features per example, the input takes ",
                           Product(in.shape())));
      }
    } else if (std::find(fields.sparse.begin(), fields.sparse.end(),
                         in.name()) == fields.sparse.end()) {
      v.Add({{"model"}, {"inputs", i}, {"name"}},
            absl::StrCat(
                "data.format ", DataSpec::Format_Name(d.format()),
                " has no field \"", in.name(), "\" (it gives ",
                fields.dense_dim > 0 ? "\"dense\"" : "",
                fields.dense_dim > 0 && !fields.sparse.empty() ? ", " : "",
                absl::StrJoin(fields.sparse, ", ",
                              [](std::string* out, const std::string& s) {
                                absl::StrAppend(out, "\"", s, "\"");
                              }),
                ")"));
    }
  }
}

}  // namespace ps::config_internal
