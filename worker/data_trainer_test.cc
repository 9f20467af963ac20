#include "worker/data_trainer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "worker/data/data_test_util.h"
#include "worker/local_parameter_access.h"
#include "worker/model/layer_model.h"
#include "worker/trainer.h"

namespace ps::worker {
namespace {

using data::testing::TempPath;
using data::testing::WriteFile;

// Matrix factorization: rating = <u, v> + bias.
constexpr char kMfModel[] = R"pb(
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
)pb";

// Ratings of a rank-1 model: 3 + 1.5 s(u) s(i), s = +-1 by parity, over
// 20 users and 20 items, in a fixed pseudo-random order.
std::string PlantedRatings(int n, uint64_t seed) {
  std::string s;
  uint64_t x = seed;
  for (int k = 0; k < n; ++k) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int u = static_cast<int>((x >> 33) % 20);
    const int i = static_cast<int>((x >> 45) % 20);
    const double r = 3 + 1.5 * (u % 2 ? 1 : -1) * (i % 2 ? 1 : -1);
    absl::StrAppend(&s, u, "\t", i, "\t", r, "\t", 880000000 + k, "\n");
  }
  return s;
}

struct Job {
  WorkerAssignment assignment;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<LocalParameterAccess> params;
};

Job MfJob(const std::string& train, const std::string& test) {
  Job j;
  WorkerAssignment& a = j.assignment;
  a.set_command(WorkerAssignment::TRAIN);
  JobSpec* spec = a.mutable_spec();
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      kMfModel, spec->mutable_model()));
  DataSpec* d = spec->mutable_data();
  d->set_format(DataSpec::MOVIELENS);
  d->add_train_files(train);
  if (!test.empty()) d->add_test_files(test);
  d->set_batch_size(32);
  d->set_epochs(8);
  d->set_shuffle_buffer(64);
  a.set_rank(0);
  a.set_num_workers(1);
  a.set_num_data_shards(1);
  a.set_evaluator(true);
  j.backend = *kernels::CreateCpuBackend({});
  auto model = model::CreateLayerModel(spec->model(), 0, j.backend.get());
  EXPECT_TRUE(model.ok()) << model.status();
  std::vector<std::vector<float>> dense;
  for (const ParameterInfo& p : (*model)->parameters())
    dense.emplace_back(static_cast<size_t>(p.size), 0.0f);
  j.params = std::make_unique<LocalParameterAccess>(
      std::move(dense),
      std::vector<LocalTableOptions>{
          {.name = "users", .dim = 4, .init_scale = 0.3f},
          {.name = "items", .dim = 4, .init_scale = 0.3f}},
      /*learning_rate=*/0.5f, /*seed=*/5);
  return j;
}

TEST(DataTrainer, MatrixFactorizationLearnsPlantedRatings) {
  const std::string train = TempPath("mf.train");
  const std::string test = TempPath("mf.test");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(2000, 1)).ok());
  ASSERT_TRUE(WriteFile(test, PlantedRatings(500, 2)).ok());
  Job j = MfJob(train, test);
  std::vector<MetricPoint> points;
  bool done = false;
  absl::StatusOr<TrainResult> r = Train(
      j.assignment, nullptr, nullptr, j.backend.get(), j.params.get(),
      [&](std::vector<MetricPoint> p, bool d) {
        points.insert(points.end(), p.begin(), p.end());
        done = done || d;
      },
      nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  // 2000 examples / 32 = 62 full batches per epoch, 8 epochs.
  EXPECT_EQ(r->steps, 8 * 62);
  EXPECT_EQ(r->final_clock, 8 * 62);
  EXPECT_TRUE(done);
  std::vector<double> rmse;
  int bad_lines_points = 0;
  for (const MetricPoint& p : points) {
    if (p.name() == "test_rmse") rmse.push_back(p.value());
    if (p.name() == "bad_lines") {
      ++bad_lines_points;
      EXPECT_EQ(p.value(), 0);
    }
    EXPECT_NE(p.name(), "test_auc");
  }
  // One evaluation per epoch (steps 62, 124, ...) and the final one.
  ASSERT_EQ(rmse.size(), 8u);
  // Predicting the mean rating (3) would give RMSE 1.5.
  EXPECT_LT(rmse.back(), 0.3) << "first " << rmse.front();
  EXPECT_GT(bad_lines_points, 0);
  EXPECT_GT(j.params->table_size(0), 0);
}

TEST(DataTrainer, MaxStepsSkipsTheCountAndWrapsEpochs) {
  const std::string train = TempPath("mf_steps.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(100, 3)).ok());
  Job j = MfJob(train, "");
  j.assignment.mutable_spec()->mutable_data()->set_max_steps(10);  // 3 passes
  absl::StatusOr<TrainResult> r = Train(
      j.assignment, nullptr, nullptr, j.backend.get(), j.params.get(),
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 10);
  EXPECT_EQ(r->test_accuracy, -1);  // no test files
}

TEST(DataTrainer, TooManyBadLinesFailNamingFileAndLine) {
  const std::string train = TempPath("mf_bad.train");
  std::string text = PlantedRatings(100, 4);
  for (int i = 0; i < 20; ++i) absl::StrAppend(&text, "1\t2\tnine\t3\n");
  ASSERT_TRUE(WriteFile(train, text).ok());
  for (const bool counted : {true, false}) {
    Job j = MfJob(train, "");
    if (!counted) j.assignment.mutable_spec()->mutable_data()->set_max_steps(5);
    j.assignment.mutable_spec()->mutable_data()->set_shuffle_buffer(0);
    absl::StatusOr<TrainResult> r = Train(
        j.assignment, nullptr, nullptr, j.backend.get(), j.params.get(),
        [](std::vector<MetricPoint>, bool) {}, nullptr);
    ASSERT_FALSE(r.ok()) << counted;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(absl::StrCat(train, ":101:")),
              std::string::npos)
        << r.status();
  }
}

TEST(DataTrainer, AShardTooSmallForABatchFails) {
  const std::string train = TempPath("mf_small.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(20, 5)).ok());
  Job j = MfJob(train, "");
  absl::StatusOr<TrainResult> r = Train(
      j.assignment, nullptr, nullptr, j.backend.get(), j.params.get(),
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
      << r.status();
}

}  // namespace
}  // namespace ps::worker
