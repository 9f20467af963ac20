// The rules of DataSpec's text formats (common/spec/config_data.h), through
// ParseJobSpec.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/spec/config.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace {

// Matrix factorization on MovieLens ratings.
constexpr char kMfJob[] = R"pb(
  name: "mf"
  model {
    sparse_tables { name: "users" dim: 4 }
    sparse_tables { name: "items" dim: 4 }
    inputs { name: "user" }
    inputs { name: "item" }
    layers {
      name: "u"
      inputs: "user"
      embedding_bag { table: "users" }
    }
    layers {
      name: "v"
      inputs: "item"
      embedding_bag { table: "items" }
    }
    layers {
      name: "mf"
      inputs: [ "u", "v" ]
      dot {}
    }
    head { loss: MEAN_SQUARED_ERROR }
  }
  optimizer { kind: SGD learning_rate: 0.1 }
  data { format: MOVIELENS train_files: "/nonexistent/u1.base" }
)pb";

ValidationOptions NoFiles() {
  ValidationOptions o;
  o.check_dataset_files = false;
  return o;
}

// kMfJob with `edit` (text format) merged over it, back as text.
std::string WithEdit(const std::string& edit) {
  JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kMfJob, &spec));
  EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(edit, &spec))
      << edit;
  std::string text;
  google::protobuf::TextFormat::PrintToString(spec, &text);
  return text;
}

absl::Status Check(const std::string& text, bool files = false) {
  return ParseJobSpec(text, "job.pbtxt",
                      files ? ValidationOptions{} : NoFiles())
      .status();
}

TEST(ConfigData, MfOnMovieLensValidates) {
  EXPECT_TRUE(Check(kMfJob).ok()) << Check(kMfJob);
}

TEST(ConfigData, ShippedSparseConfigsValidate) {
  for (const char* model : {"ctr_dlrm", "ctr_fm", "mf_movielens"}) {
    for (const char* mode : {"bsp", "asp", "ssp"}) {
      const std::string name =
          absl::StrCat("configs/", model, "_", mode, ".pbtxt");
      // Their data is generated (each file's comment says how): not here.
      absl::StatusOr<JobSpec> spec = LoadJobSpec(name, NoFiles());
      ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
      EXPECT_NE(spec->data().format(), DataSpec::IDX) << name;
      EXPECT_FALSE(spec->data().test_files().empty()) << name;
    }
  }
}

// tools/demo.sh's second comparison: generated data (not here), the
// straggler and the AUC target its table and plot follow.
TEST(ConfigData, DemoCtrConfigsValidate) {
  for (const char* mode : {"bsp", "asp"}) {
    const std::string name = absl::StrCat("configs/demo/ctr_", mode, ".pbtxt");
    absl::StatusOr<JobSpec> spec = LoadJobSpec(name, NoFiles());
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_EQ(spec->data().format(), DataSpec::CRITEO) << name;
    EXPECT_FALSE(spec->data().test_files().empty()) << name;
    EXPECT_EQ(spec->num_workers(), 4) << name;
    ASSERT_EQ(spec->stragglers_size(), 1) << name;
    EXPECT_EQ(spec->stragglers(0).worker_rank(), 3) << name;
    EXPECT_EQ(spec->target().metric(), "auc") << name;
  }
}

TEST(ConfigData, EachRuleNamesItsField) {
  struct Case {
    const char* edit;  // merged over kMfJob
    const char* want;  // substring of the error
  } cases[] = {
      {"data { format: IDX }",
       "model.inputs[0].name: IDX images give only the inputs \"dense\" and "
       "\"image\", not the sparse field \"user\": a sparse model needs "
       "data.format"},
      {"data { format: CRITEO }",
       "model.inputs[0].name: data.format CRITEO has no field \"user\" (it "
       "gives \"dense\", \"C1\""},
      {"data { format: CRITEO }",
       "model.head.loss: MEAN_SQUARED_ERROR does not fit the data's labels: "
       "the job reads CRITEO, whose labels are clicks 0/1"},
      {"data { format: LIBSVM }",
       "data.format LIBSVM has no field \"item\" (it gives \"features\")"},
      {"data { format: LIBSVM libsvm { labels: CLASS num_classes: 1 } }",
       "data.libsvm.num_classes: must be >= 2 for CLASS labels, got 1"},
      {"data { format: LIBSVM libsvm { dense_dim: -1 } }",
       "data.libsvm.dense_dim: must be in [0, 2^24], got -1"},
      {"data { max_bad_line_fraction: 1.5 }",
       "data.max_bad_line_fraction: must be in [0, 1], got 1.5"},
      {"data { min_bad_lines: -1 }",
       "data.min_bad_lines: must be >= 0, got -1"},
      {"data { shuffle_buffer: -2 }",
       "data.shuffle_buffer: must be >= 0, got -2"},
      {"data { movielens { min_rating: 5 max_rating: 1 } }",
       "data.movielens: min_rating must be <= max_rating"},
      {"model { inputs { name: \"dense\" shape: 13 } }",
       "model.inputs[2].name: data.format MOVIELENS gives no dense features"},
  };
  for (const Case& c : cases) {
    const absl::Status s = Check(WithEdit(c.edit));
    ASSERT_FALSE(s.ok()) << c.edit;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.want), std::string::npos)
        << "edit: " << c.edit << "\nwant: " << c.want << "\ngot:  " << s;
  }
}

TEST(ConfigData, APythonJobListsOnlyItsParameters) {
  const std::string params =
      "python {} model { tensors { name: \"w\" shape: [4, 3] } "
      "sparse_tables { name: \"items\" dim: 8 } } "
      "optimizer { learning_rate: 0.1 } "
      "data { format: CRITEO train_files: \"a.txt\" }";
  EXPECT_TRUE(Check(params).ok()) << Check(params);
  const absl::Status layers = Check(
      "python {} model { mlp { input_dim: 13 num_classes: 2 } } "
      "data { format: CRITEO train_files: \"a.txt\" }");
  EXPECT_NE(layers.message().find("a Python job (python {}) computes its "
                                  "model in its script"),
            std::string::npos)
      << layers;
}

TEST(ConfigData, TextFormatNeedsTrainFilesAndLayers) {
  const std::string no_files =
      absl::StrCat("model { mlp { input_dim: 13 num_classes: 2 } } ",
                   "data { format: CRITEO }");
  const absl::Status s = Check(no_files);
  EXPECT_NE(s.message().find("data.train_files: required for format CRITEO"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("model: data.format CRITEO needs a layer model"),
            std::string::npos)
      << s;
  const absl::Status idx = Check(
      "model { mlp { input_dim: 784 num_classes: 10 } } "
      "data { train_files: \"a.txt\" }");
  EXPECT_NE(idx.message().find("data.train_files: IDX data is read from "
                               "data.path"),
            std::string::npos)
      << idx;
}

TEST(ConfigData, MissingFilesAreNamed) {
  const absl::Status s = Check(kMfJob, /*files=*/true);
  EXPECT_NE(s.message().find("data.train_files[0]: file "
                             "'/nonexistent/u1.base' does not exist"),
            std::string::npos)
      << s;
  const std::string dir = ::testing::TempDir();
  const std::string train = absl::StrCat(dir, "/config_data_u1.base");
  std::ofstream(train) << "1\t2\t3\t4\n";
  std::string text = kMfJob;
  text.replace(text.find("/nonexistent/u1.base"),
               std::string("/nonexistent/u1.base").size(), train);
  EXPECT_TRUE(Check(text, /*files=*/true).ok()) << Check(text, true);
  std::filesystem::remove(train);
}

}  // namespace
}  // namespace ps
