#include "common/spec/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "google/protobuf/text_format.h"

namespace ps {
namespace {

constexpr char kGoodJob[] = R"pb(
  name: "t"
  model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
  optimizer { kind: MOMENTUM learning_rate: 0.1 momentum: 0.9 }
  consistency { model: BSP backup_workers: 1 }
  data { batch_size: 64 }
  num_workers: 3
)pb";

// kGoodJob with `edit` (text format) merged over it, back as text.
std::string WithEdit(const std::string& edit) {
  JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kGoodJob, &spec));
  EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(edit, &spec))
      << edit;
  std::string text;
  google::protobuf::TextFormat::PrintToString(spec, &text);
  return text;
}

ValidationOptions NoFiles() {
  ValidationOptions o;
  o.check_dataset_files = false;
  return o;
}

TEST(Config, ShippedExamplesLoadAndValidate) {
  for (const char* name : {"configs/fashion_mnist_bsp.pbtxt",
                           "configs/fashion_mnist_bsp_backup.pbtxt",
                           "configs/fashion_mnist_asp.pbtxt",
                           "configs/fashion_mnist_asp_overlap.pbtxt",
                           "configs/fashion_mnist_ssp3.pbtxt",
                           "configs/fashion_mnist_bsp_topk.pbtxt",
                           "configs/fashion_mnist_bsp_replicated.pbtxt"}) {
    // The dataset is installed by tools/setup.sh, so check its files too.
    auto spec = LoadJobSpec(name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_EQ(spec->model().tensors_size(), 6) << name;
    EXPECT_EQ(spec->num_workers(), 4);
  }
  auto cluster = LoadClusterSpec("configs/local_cluster.pbtxt");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->num_servers(), 2);
}

TEST(Config, NormalisationFillsDefaults) {
  auto spec = ParseJobSpec(R"pb(
                             model { mlp { input_dim: 4 num_classes: 2 } }
                             optimizer { kind: ADAM learning_rate: 0.001 }
                           )pb",
                           "job", NoFiles());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->consistency().model(), ConsistencySpec::BSP);
  EXPECT_EQ(spec->data().batch_size(), 128);
  EXPECT_EQ(spec->data().epochs(), 1);
  EXPECT_EQ(spec->data().path(), kDefaultDatasetPath);
  EXPECT_FLOAT_EQ(spec->optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta2(), 0.999f);
  EXPECT_EQ(spec->chunk_bytes(), 256 * 1024);
  EXPECT_EQ(spec->model().tensors(0).init().kind(),
            InitializerSpec::HE_UNIFORM);
  EXPECT_EQ(spec->model().tensors(1).init().kind(), InitializerSpec::ZEROS);
  // Idempotent.
  EXPECT_EQ(NormalizeJobSpec(*spec).DebugString(), spec->DebugString());
}

TEST(Config, SyntaxErrorsCarryLineAndColumn) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"name: \"x\"\nmodel {\n  mlp { input_dim: 7 \n", "job.pbtxt:4:1"},
      {"name: \"x\"\noptimizer { learning_rate: fast }\n", "job.pbtxt:2:28"},
      {"name: \"x\"\n\nbogus_field: 3\n", "job.pbtxt:3:1"},
      {"data { batch_size: -1.5 }", "job.pbtxt:1:21"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(c.text, "job.pbtxt", NoFiles());
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.want), std::string::npos)
        << "want " << c.want << " in: " << spec.status().message();
  }
}

TEST(Config, EachRuleNamesItsField) {
  struct Case {
    const char* edit;  // appended to kGoodJob: later fields override
    const char* want;  // substring of the error
  } cases[] = {
      {"optimizer { learning_rate: 0 }",
       "optimizer.learning_rate: must be > 0"},
      {"optimizer { learning_rate: -0.1 }",
       "optimizer.learning_rate: must be > 0"},
      {"optimizer { momentum: 1.0 }", "optimizer.momentum: must be in [0, 1)"},
      {"optimizer { weight_decay: -1 }", "optimizer.weight_decay"},
      {"optimizer { kind: SGD nesterov: true }", "optimizer.nesterov"},
      {"optimizer { schedule { kind: STEP } }", "optimizer.schedule.step_size"},
      {"optimizer { schedule { kind: COSINE warmup_steps: 10 total_steps: 5 } "
       "}",
       "optimizer.schedule.total_steps"},
      {"consistency { model: BSP staleness: 2 backup_workers: 0 }",
       "consistency.staleness: a staleness bound only applies to SSP, not BSP"},
      {"consistency { model: SSP staleness: -1 backup_workers: 0 }",
       "consistency.staleness: must be >= 0"},
      {"consistency { backup_workers: 3 }",
       "consistency.backup_workers: more backup workers (3)"},
      {"consistency { model: ASP backup_workers: 1 }",
       "consistency.backup_workers: only applies to BSP, not ASP"},
      {"consistency { model: SSP staleness: 2 overlap_communication: true }",
       "consistency.overlap_communication: only applies to ASP, not SSP"},
      {"consistency { model: BSP max_staleness: 4 }",
       "consistency.max_staleness: only applies to ASP"},
      {"consistency { barrier_timeout_ms: -5 }",
       "consistency.barrier_timeout_ms"},
      {"data { batch_size: -3 }", "data.batch_size: must be > 0"},
      {"data { epochs: -1 }", "data.epochs"},
      {"num_workers: -2", "num_workers: must be >= 0"},
      {"chunk_bytes: 2", "chunk_bytes: must be >= 4"},
      {"stragglers { worker_rank: 5 }", "stragglers[0].worker_rank"},
      {"stragglers { worker_rank: 0 compute_factor: 0.5 }",
       "stragglers[0].compute_factor"},
      {"target_accuracy: 1.5", "target_accuracy"},
      {"target_accuracy: nan", "target_accuracy: must be in [0, 1], got nan"},
      {"target { metric: \"f1\" value: 0.5 }",
       "target.metric: unknown metric 'f1'; one of auc, logloss, rmse, "
       "accuracy"},
      {"target { value: 0.5 }", "target.metric: must name a metric; one of"},
      {"target { metric: \"auc\" value: 1.2 }",
       "target.value: for auc, must be in (0, 1], got 1.2"},
      {"target { metric: \"auc\" value: nan }",
       "target.value: must be a finite number, got nan"},
      {"target { metric: \"auc\" }", "target.value: for auc, must be in"},
      {"target { metric: \"test_rmse\" value: -0.5 }",
       "target.value: for rmse, must be > 0, got -0.5"},
      {"target { metric: \"logloss\" value: -1 }",
       "target.value: for logloss, must be > 0"},
      {"target { metric: \"logloss\" value: inf }",
       "target.value: must be a finite number"},
      {"target_accuracy: 0.8 target { metric: \"accuracy\" value: 0.8 }",
       "target: set either target or target_accuracy"},
      {"model { mlp { num_classes: 1 } }",
       "model.mlp.num_classes: must be >= 2"},
      {"model { mlp { hidden: 0 } }", "model.mlp.hidden[1]"},
      {"straggler_policy { slow_ratio: 2 }", "straggler_policy.slow_ratio"},
  };
  for (const Case& c : cases) {
    const std::string text = WithEdit(c.edit);
    auto spec = ParseJobSpec(text, "job.pbtxt", NoFiles());
    ASSERT_FALSE(spec.ok()) << c.edit;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.want), std::string::npos)
        << "edit: " << c.edit << "\nwant: " << c.want
        << "\ngot:  " << spec.status().message();
  }
  EXPECT_TRUE(ParseJobSpec(kGoodJob, "job.pbtxt", NoFiles()).ok());
}

TEST(Config, CompressionAndReplicationRulesNameTheirField) {
  struct Case {
    const char* edit;
    const char* want;  // substring of the error; empty: valid
  } cases[] = {
      {"compression { kind: TOPK }",
       "compression.ratio: TOPK: the share of each chunk's elements sent must "
       "be in (0, 1], got 0"},
      {"compression { kind: TOPK ratio: -0.1 }",
       "compression.ratio: TOPK: the share"},
      {"compression { kind: TOPK ratio: 1.5 }", "must be in (0, 1], got 1.5"},
      {"compression { kind: TOPK ratio: nan }", "must be in (0, 1], got nan"},
      {"compression { ratio: 0.1 }",
       "compression.ratio: only applies to kind TOPK"},
      {"compression { kind: 7 }", "compression.kind: unknown kind 7"},
      {"compression { wire_dtype: 9 }",
       "compression.wire_dtype: unknown dtype 9"},
      {"compression { wire_dtype: FLOAT16 }", ""},
      {"compression { kind: TOPK ratio: 0.1 wire_dtype: BFLOAT16 }", ""},
      {"compression { kind: TOPK ratio: 0.1 }", ""},
      {"compression { kind: TOPK ratio: 1 }", ""},
      {"replication { factor: -1 }",
       "replication.factor: must be in [1, 8] (0: 1, unreplicated), got -1"},
      {"replication { factor: 9 }", "got 9"},
      {"replication { factor: 2 }", ""},
      {"compression { kind: TOPK ratio: 0.01 } "
       "consistency { model: ASP backup_workers: 0 }",
       ""},
      {"compression { kind: TOPK ratio: 0.01 } "
       "consistency { model: SSP staleness: 2 backup_workers: 0 }",
       ""},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(WithEdit(c.edit), "job.pbtxt", NoFiles());
    if (*c.want == '\0') {
      EXPECT_TRUE(spec.ok()) << c.edit << ": " << spec.status();
      continue;
    }
    ASSERT_FALSE(spec.ok()) << c.edit;
    EXPECT_NE(spec.status().message().find(c.want), std::string::npos)
        << "edit: " << c.edit << "\nwant: " << c.want
        << "\ngot:  " << spec.status().message();
  }
  // The line of the field.
  auto spec = ParseJobSpec(
      "model { mlp { input_dim: 4 num_classes: 2 } }\n"
      "optimizer { learning_rate: 0.1 }\n"
      "compression {\n"
      "  kind: TOPK\n"
      "  ratio: 2\n"
      "}\n",
      "job.pbtxt", NoFiles());
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job.pbtxt:5: compression.ratio"),
            std::string::npos)
      << spec.status().message();
}

TEST(Config, SparseTableRulesNameTheirField) {
  struct Case {
    const char* edit;  // merged over kGoodJob
    const char* want;  // substring of the error
  } cases[] = {
      {"model { sparse_tables { dim: 4 } }",
       "model.sparse_tables[0].name: must not be empty"},
      {"model { sparse_tables { name: \"e\" dim: 4 } "
       "sparse_tables { name: \"e\" dim: 8 } }",
       "model.sparse_tables[1].name: duplicate name 'e' (another table"},
      {"model { sparse_tables { name: \"fc0/weight\" dim: 4 } }",
       "model.sparse_tables[0].name: duplicate name 'fc0/weight' (a tensor"},
      {"model { sparse_tables { name: \"e\" } }",
       "model.sparse_tables[0].dim: must be in [1, 65536], got 0"},
      {"model { sparse_tables { name: \"e\" dim: 70000 } }",
       "model.sparse_tables[0].dim: must be in [1, 65536]"},
      {"model { sparse_tables { name: \"e\" dim: 4 capacity: -1 } }",
       "model.sparse_tables[0].capacity: must be >= 0"},
      {"model { sparse_tables { name: \"e\" dim: 4 eviction: LRU } }",
       "model.sparse_tables[0].eviction: LRU needs a capacity"},
      {"model { sparse_tables { name: \"e\" dim: 4 eviction: TTL } }",
       "model.sparse_tables[0].ttl_versions: eviction: TTL needs "
       "ttl_versions > 0"},
      {"model { sparse_tables { name: \"e\" dim: 4 ttl_versions: 5 } }",
       "model.sparse_tables[0].ttl_versions: only applies to eviction: TTL"},
      {"model { sparse_tables { name: \"e\" dim: 4 admission {} } }",
       "model.sparse_tables[0].admission.min_count: must be >= 1"},
      {"model { sparse_tables { name: \"e\" dim: 4 "
       "admission { min_count: 2 sketch_depth: 17 } } }",
       "model.sparse_tables[0].admission.sketch_depth: must be in [1, 16]"},
      {"model { sparse_tables { name: \"e\" dim: 4 "
       "admission { min_count: 2 sketch_width: -1 } } }",
       "model.sparse_tables[0].admission.sketch_width"},
      {"model { sparse_tables { name: \"e\" dim: 4 "
       "init { kind: HE_UNIFORM } } }",
       "model.sparse_tables[0].init.kind: HE_UNIFORM does not apply to "
       "sparse tables"},
      {"model { sparse_tables { name: \"e\" dim: 4 init { scale: -1 } } }",
       "model.sparse_tables[0].init.scale: must be >= 0"},
      // kGoodJob's optimizer is MOMENTUM: a table without its own is refused.
      {"model { sparse_tables { name: \"e\" dim: 4 } }",
       "model.sparse_tables[0].optimizer: unset, so the job's optimizer "
       "applies, but its kind MOMENTUM is for dense tensors only"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "MOMENTUM learning_rate: 0.1 momentum: 0.5 } } }",
       "model.sparse_tables[0].optimizer.kind: MOMENTUM is for dense tensors "
       "only; sparse tables take SGD, ADAGRAD, ADAM or FTRL"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "ADAGRAD } } }",
       "model.sparse_tables[0].optimizer.learning_rate: must be > 0"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "ADAGRAD learning_rate: 0.1 initial_accumulator: -1 } } }",
       "model.sparse_tables[0].optimizer.initial_accumulator: must be > 0"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "SGD learning_rate: 0.1 initial_accumulator: 1 } } }",
       "model.sparse_tables[0].optimizer.initial_accumulator: only applies "
       "to kind: ADAGRAD or FTRL"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "ADAGRAD learning_rate: 0.1 l1: 1 } } }",
       "model.sparse_tables[0].optimizer.l1: only applies to kind: FTRL"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "FTRL learning_rate: 0.1 l2: -1 } } }",
       "model.sparse_tables[0].optimizer.l2: must be >= 0"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "FTRL learning_rate: 0.1 lr_power: -2 } } }",
       "model.sparse_tables[0].optimizer.lr_power: must be in [-1, 0)"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "FTRL learning_rate: 0.1 weight_decay: 0.1 } } }",
       "model.sparse_tables[0].optimizer.weight_decay: does not apply to "
       "kind: FTRL"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { kind: "
       "ADAM learning_rate: 0.1 beta1: 1 } } }",
       "model.sparse_tables[0].optimizer.beta1: must be in [0, 1)"},
      {"model { sparse_tables { name: \"e\" dim: 4 optimizer { "
       "learning_rate: 0.1 schedule { kind: STEP } } } }",
       "model.sparse_tables[0].optimizer.schedule.step_size"},
      {"optimizer { kind: ADAGRAD momentum: 0 }",
       "optimizer.kind: ADAGRAD is for sparse tables only (set it as "
       "model.sparse_tables[i].optimizer); dense tensors take SGD, MOMENTUM "
       "or ADAM"},
      {"optimizer { kind: ADAM momentum: 0 beta: 1 }",
       "optimizer.beta: only applies to kind: FTRL"},
  };
  for (const Case& c : cases) {
    const std::string text = WithEdit(c.edit);
    auto spec = ParseJobSpec(text, "job.pbtxt", NoFiles());
    ASSERT_FALSE(spec.ok()) << c.edit;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.want), std::string::npos)
        << "edit: " << c.edit << "\nwant: " << c.want
        << "\ngot:  " << spec.status().message();
  }
}

TEST(Config, SparseTableErrorsGiveTheLine) {
  auto spec = ParseJobSpec(
      "model {\n"
      "  sparse_tables { name: \"a\" dim: 8 }\n"
      "  sparse_tables {\n"
      "    name: \"b\"\n"
      "    dim: 8\n"
      "    optimizer { kind: FTRL\n"
      "      learning_rate: 0.1\n"
      "      l1: -3 }\n"
      "  }\n"
      "}\n"
      "optimizer { learning_rate: 0.1 }\n",
      "job.pbtxt", NoFiles());
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(
                "job.pbtxt:8: model.sparse_tables[1].optimizer.l1: must be "
                ">= 0, got -3"),
            std::string::npos)
      << spec.status().message();
}

TEST(Config, SparseTablesNormalise) {
  // A model of sparse tables only is valid.
  auto spec = ParseJobSpec(R"pb(
                             model {
                               sparse_tables { name: "user" dim: 16 }
                               sparse_tables {
                                 name: "item"
                                 dim: 4
                                 dtype: BFLOAT16
                                 init { kind: NORMAL scale: 0.5 }
                                 optimizer { kind: FTRL learning_rate: 0.05 }
                                 capacity: 1000
                                 eviction: LRU
                                 admission { min_count: 3 }
                               }
                               sparse_tables {
                                 name: "ctx"
                                 dim: 9
                                 optimizer { kind: ADAGRAD learning_rate: 0.1 }
                                 init { kind: NORMAL }
                                 eviction: TTL
                                 ttl_versions: 100
                               }
                             }
                             optimizer { kind: ADAM learning_rate: 0.001 }
                           )pb",
                           "job", NoFiles());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().tensors_size(), 0);
  ASSERT_EQ(spec->model().sparse_tables_size(), 3);
  const SparseTableSpec& user = spec->model().sparse_tables(0);
  EXPECT_EQ(user.dtype(), FLOAT32);
  EXPECT_EQ(user.init().kind(), InitializerSpec::UNIFORM);
  EXPECT_FLOAT_EQ(user.init().scale(), 0.25f);  // 1/sqrt(16)
  EXPECT_EQ(user.eviction(), SparseTableSpec::NONE);
  EXPECT_FALSE(user.has_admission());
  // The job's optimizer, copied and normalised.
  EXPECT_EQ(user.optimizer().kind(), OptimizerSpec::ADAM);
  EXPECT_FLOAT_EQ(user.optimizer().learning_rate(), 0.001f);
  EXPECT_FLOAT_EQ(user.optimizer().beta2(), 0.999f);
  EXPECT_EQ(user.optimizer().schedule().kind(), LrSchedule::CONSTANT);

  const SparseTableSpec& item = spec->model().sparse_tables(1);
  EXPECT_EQ(item.dtype(), BFLOAT16);
  EXPECT_FLOAT_EQ(item.init().scale(), 0.5f);
  EXPECT_EQ(item.optimizer().kind(), OptimizerSpec::FTRL);
  EXPECT_FLOAT_EQ(item.optimizer().learning_rate(), 0.05f);
  EXPECT_FLOAT_EQ(item.optimizer().initial_accumulator(), 0.1f);
  EXPECT_FLOAT_EQ(item.optimizer().lr_power(), -0.5f);
  EXPECT_FLOAT_EQ(item.optimizer().l1(), 0.0f);
  EXPECT_EQ(item.admission().min_count(), 3);
  EXPECT_EQ(item.admission().sketch_width(), 1 << 20);
  EXPECT_EQ(item.admission().sketch_depth(), 4);

  const SparseTableSpec& ctx = spec->model().sparse_tables(2);
  EXPECT_EQ(ctx.optimizer().kind(), OptimizerSpec::ADAGRAD);
  EXPECT_FLOAT_EQ(ctx.optimizer().epsilon(), 1e-7f);
  EXPECT_FLOAT_EQ(ctx.optimizer().initial_accumulator(), 0.1f);
  EXPECT_FLOAT_EQ(ctx.init().scale(), 1.0f / 3.0f);
  EXPECT_EQ(ctx.eviction(), SparseTableSpec::TTL);

  // Idempotent, and the result validates again.
  EXPECT_EQ(NormalizeJobSpec(*spec).DebugString(), spec->DebugString());
  EXPECT_TRUE(ValidateJobSpec(*spec, NoFiles()).ok());
  // Next to an MLP, with a table of its own optimizer.
  EXPECT_TRUE(ParseJobSpec(WithEdit("model { sparse_tables { name: \"e\" "
                                    "dim: 8 optimizer { kind: SGD "
                                    "learning_rate: 0.5 } } }"),
                           "job", NoFiles())
                  .ok());
}

TEST(Config, ValidationErrorsGiveTheLine) {
  auto spec = ParseJobSpec(
      "model { mlp { input_dim: 4 num_classes: 2 } }\n"
      "optimizer {\n"
      "  learning_rate: -1\n"
      "}\n",
      "job.pbtxt", NoFiles());
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(
                "job.pbtxt:3: optimizer.learning_rate: must be > 0"),
            std::string::npos)
      << spec.status().message();
}

TEST(Config, TargetInTheJobsMetric) {
  for (const char* target : {"target { metric: \"auc\" value: 0.8 }",
                             "target { metric: \"test_auc\" value: 0.8 }",
                             "target { metric: \"logloss\" value: 0.45 }",
                             "target { metric: \"rmse\" value: 0.95 }",
                             "target { metric: \"accuracy\" value: 0.85 }",
                             "target_accuracy: 0.85"}) {
    auto spec = ParseJobSpec(WithEdit(target), "job.pbtxt", NoFiles());
    EXPECT_TRUE(spec.ok()) << target << ": " << spec.status();
  }
  // The error names the line the bad value is on.
  auto spec = ParseJobSpec(
      "model { mlp { input_dim: 4 num_classes: 2 } }\n"
      "optimizer { learning_rate: 0.1 }\n"
      "target {\n"
      "  metric: \"rmse\"\n"
      "  value: -0.9\n"
      "}\n",
      "job.pbtxt", NoFiles());
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(
                "job.pbtxt:5: target.value: for rmse, must be > 0, got -0.9"),
            std::string::npos)
      << spec.status().message();
}

TEST(Config, ReportsEveryViolationAtOnce) {
  auto spec =
      ParseJobSpec("optimizer { learning_rate: 0 }\ndata { batch_size: -1 }\n",
                   "j", NoFiles());
  ASSERT_FALSE(spec.ok());
  const std::string msg(spec.status().message());
  EXPECT_NE(msg.find("model: empty model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer.learning_rate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.batch_size"), std::string::npos) << msg;
}

TEST(Config, MismatchedExplicitLayerShapes) {
  auto spec =
      ParseJobSpec(R"pb(
                     model {
                       tensors { name: "fc0/weight" shape: 784 shape: 64 }
                       tensors { name: "fc0/bias" shape: 64 }
                       tensors { name: "fc1/weight" shape: 32 shape: 10 }
                       tensors { name: "fc1/bias" shape: 11 }
                     }
                     optimizer { learning_rate: 0.1 }
                   )pb",
                   "job", NoFiles());
  ASSERT_FALSE(spec.ok());
  const std::string msg(spec.status().message());
  EXPECT_NE(msg.find("model.tensors[2].shape: mismatched layer shapes"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("model.tensors[3].shape: mismatched layer shapes"),
            std::string::npos)
      << msg;
}

// A layer model's problems all at once, each with its layer's line; the
// head must fit the data's labels (IDX: classes).
TEST(Config, LayerModelProblemsGiveTheirLines) {
  auto spec = ParseJobSpec(
      "model {\n"                                            // 1
      "  inputs { name: \"image\" shape: [28, 28, 1] }\n"    // 2
      "  layers { name: \"conv\" inputs: \"image\"\n"        // 3
      "           conv2d { filters: 8 kernel_size: 3 } }\n"  // 4
      "  layers { name: \"fc\" inputs: \"conv\"\n"           // 5
      "           dense { units: 10 } }\n"                   // 6
      "  layers { name: \"x\" inputs: [\"fc\", \"nope\"]\n"  // 7
      "           concat {} }\n"                             // 8
      "  head { loss: MEAN_SQUARED_ERROR input: \"fc\" }\n"  // 9
      "}\n"
      "optimizer { learning_rate: 0.1 }\n",
      "cnn.pbtxt", NoFiles());
  ASSERT_FALSE(spec.ok());
  const std::string msg(spec.status().message());
  for (const char* want : {
           "cnn.pbtxt:5: model.layers[1].inputs[0]: layer 'fc': a dense layer "
           "takes vectors [features], but input 'conv' has shape [26, 26, 8] "
           "(flatten it first)",
           "cnn.pbtxt:7: model.layers[2].inputs[1]: layer 'x': unknown input "
           "'nope'",
           "cnn.pbtxt:9: model.head.loss: MEAN_SQUARED_ERROR does not fit the "
           "data's labels",
       }) {
    EXPECT_NE(msg.find(want), std::string::npos) << want << "\nin:\n" << msg;
  }

  // A good one: its tensors are filled in.
  spec = ParseJobSpec(R"pb(
                        model {
                          inputs { name: "dense" shape: 784 }
                          layers {
                            name: "h"
                            inputs: "dense"
                            dense { units: 16 activation: TANH }
                          }
                          layers {
                            name: "out"
                            inputs: "h"
                            dense { units: 10 }
                          }
                          head { loss: SOFTMAX_CROSS_ENTROPY }
                        }
                        optimizer { learning_rate: 0.1 }
                      )pb",
                      "job", NoFiles());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->model().tensors_size(), 4);
  EXPECT_EQ(spec->model().tensors(0).name(), "h/weight");
  EXPECT_EQ(spec->model().tensors(0).init().kind(),
            InitializerSpec::XAVIER_UNIFORM);
  EXPECT_EQ(spec->model().tensors(3).name(), "out/bias");
}

TEST(Config, DatasetDirectoryIsChecked) {
  const std::string tmp = testing::TempDir();
  const std::string missing = tmp + "/no-such-dataset";
  auto spec =
      ParseJobSpec(WithEdit("data { path: \"" + missing + "\" }"), "job.pbtxt");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("does not exist"), std::string::npos)
      << spec.status();

  // A directory with the wrong files: each missing file is named.
  const std::string wrong = tmp + "/wrong-dataset";
  std::filesystem::create_directories(wrong);
  std::ofstream(wrong + "/train-images-idx3-ubyte.gz") << "x";
  spec =
      ParseJobSpec(WithEdit("data { path: \"" + wrong + "\" }"), "job.pbtxt");
  ASSERT_FALSE(spec.ok());
  const std::string msg(spec.status().message());
  EXPECT_EQ(msg.find("lacks train-images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lacks train-labels-idx1-ubyte.gz"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("lacks t10k-images-idx3-ubyte.gz"), std::string::npos)
      << msg;
}

TEST(Config, MissingFileIsNotFound) {
  auto spec = LoadJobSpec("/nonexistent/job.pbtxt");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("/nonexistent/job.pbtxt"),
            std::string::npos);
}

TEST(Config, ClusterRules) {
  struct Case {
    const char* text;
    const char* want;  // empty: valid
  } cases[] = {
      {"num_servers: 2 num_workers: 4 device: \"cpu\"", ""},
      {"device: \"cuda:1\"", ""},
      {"num_servers: -1", "num_servers"},
      {"device: \"tpu\"", "device: must be cpu, cuda or cuda:N"},
      {"tls { cert_file: \"a\" }",
       "cert_file and key_file must be set together"},
      {"tls { ca_file: \"ca\" }", "tls.ca_file"},
      {"num_servers: 2\nnum_shards: 3", "c.pbtxt:2:1"},
  };
  for (const Case& c : cases) {
    auto spec = ParseClusterSpec(c.text, "c.pbtxt");
    if (std::string(c.want).empty()) {
      EXPECT_TRUE(spec.ok()) << c.text << ": " << spec.status();
    } else {
      ASSERT_FALSE(spec.ok()) << c.text;
      EXPECT_NE(spec.status().message().find(c.want), std::string::npos)
          << spec.status().message();
    }
  }
}

}  // namespace
}  // namespace ps
