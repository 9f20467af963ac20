#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "kernels/cpu_backend.h"
#include "worker/client/local_parameter_access.h"
#include "worker/client/parameter_access.h"
#include "worker/data/data_test_util.h"
#include "worker/data/spec_readers.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/plan_batches.h"
#include "worker/loop/trainer.h"
#include "worker/model/layer_model.h"
#include "worker/model/model_test_util.h"

namespace ps::worker {
namespace {

using data::testing::TempPath;
using data::testing::WriteFile;

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
  std::unique_ptr<client::LocalParameterAccess> params;
};

Job MfJob(const std::string& train, const std::string& test,
          float learning_rate = 0.5f) {
  Job j;
  WorkerAssignment& a = j.assignment;
  a.set_command(WorkerAssignment::TRAIN);
  JobSpec* spec = a.mutable_spec();
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      model::kMfModelSpec, spec->mutable_model()));
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
  j.params = std::make_unique<client::LocalParameterAccess>(
      std::move(dense),
      std::vector<client::LocalTableOptions>{
          {.name = "users", .dim = 4, .init_scale = 0.3f},
          {.name = "items", .dim = 4, .init_scale = 0.3f}},
      learning_rate, /*seed=*/5);
  return j;
}

// Trains the MF job on planted ratings (ASP with overlap_communication
// when `overlap`: steps compute while the last one's end travels, on
// weights two of their own steps old, which plain SGD at 0.5 does not
// survive: test RMSE 1.6 at the end, 0.03 at 0.3).
void ExpectMfLearns(bool overlap) {
  const std::string train = TempPath("mf.train");
  const std::string test = TempPath("mf.test");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(2000, 1)).ok());
  ASSERT_TRUE(WriteFile(test, PlantedRatings(500, 2)).ok());
  Job j = MfJob(train, test, overlap ? 0.3f : 0.5f);
  if (overlap) {
    ConsistencySpec* c = j.assignment.mutable_spec()->mutable_consistency();
    c->set_model(ConsistencySpec::ASP);
    c->set_overlap_communication(true);
  }
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
  // The steps' rows came with the step ends, but for the first step's
  // (and the second's with overlap); every other pull of rows was an
  // evaluation's, each as many as one evaluation of the test files makes.
  Job probe = MfJob(train, test);
  auto model = model::CreateLayerModel(probe.assignment.spec().model(), 0,
                                       probe.backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  DataSpec d = probe.assignment.spec().data();
  d.set_shuffle_buffer(0);
  const TestReaderOpener open = [&d, &test] {
    return data::OpenSpecReader(d, {test}, 0, {});
  };
  ASSERT_TRUE(
      ScoreOnTestData(**model, probe.params.get(), open, 0, d.eval_examples())
          .ok());
  const int64_t per_evaluation = probe.params->row_pulls();
  ASSERT_GT(per_evaluation, 0);
  EXPECT_EQ(
      j.params->row_pulls(),
      (overlap ? 2 : 1) + static_cast<int64_t>(rmse.size()) * per_evaluation);
}

TEST(TrainerOnTextData, MatrixFactorizationLearnsPlantedRatings) {
  ExpectMfLearns(false);
}

TEST(TrainerOnTextData, OverlappedAspLearnsPlantedRatings) {
  ExpectMfLearns(true);
}

// Records the keys of table 0 whose rows each step computes on, by clock:
// those a Pull reads at its clock, and those a step's Push or EndStep asks
// back (next_rows) for clock + 1 (this test's steps are not overlapped).
// A later call for the same clock (a step that pulls its rows itself,
// the batch announced being another) replaces what was recorded.
class KeyRecorder final : public client::ParameterAccess {
 public:
  explicit KeyRecorder(client::ParameterAccess* inner) : inner_(inner) {}
  client::Handle Pull(client::PullArgs request) override {
    Record(request.clock, request.rows);
    return inner_->Pull(std::move(request));
  }
  absl::Status Push(client::StepArgs request) override {
    Record(request.clock + 1, request.next_rows);
    return inner_->Push(std::move(request));
  }
  client::Handle EndStep(client::StepArgs request) override {
    Record(request.clock + 1, request.next_rows);
    return inner_->EndStep(std::move(request));
  }
  std::vector<int64_t> PartBoundaries(int index) const override {
    return inner_->PartBoundaries(index);
  }
  void CancelCalls() override { inner_->CancelCalls(); }
  const std::map<int64_t, std::vector<uint64_t>>& keys() const { return keys_; }

 private:
  void Record(int64_t clock, const std::vector<client::SparsePull>& rows) {
    for (const client::SparsePull& p : rows) {
      if (p.table == 0) keys_[clock].assign(p.keys.begin(), p.keys.end());
    }
  }

  client::ParameterAccess* inner_;
  std::map<int64_t, std::vector<uint64_t>> keys_;
};

// Two data shards of 200 ratings (6 full batches of 32 each per epoch).
Job TwoShardJob(const std::string& train, int rank) {
  Job j = MfJob(train, "");
  j.assignment.set_rank(rank);
  j.assignment.set_num_workers(2);
  j.assignment.set_num_data_shards(2);
  j.assignment.set_evaluator(false);
  j.assignment.mutable_spec()->mutable_data()->set_epochs(2);
  return j;
}

// The counting pass's shape goes to on_data_shape before the first step,
// for the coordinator's cuts of data plans.
TEST(TrainerOnTextData, ReportsTheShapeItCounted) {
  const std::string train = TempPath("mf_shape.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(400, 6)).ok());
  Job j = TwoShardJob(train, 0);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  int64_t steps_before_shape = -1;
  int64_t steps = 0;
  TrainerOptions o;
  o.on_step = [&](int64_t) { ++steps; };
  o.on_data_shape = [&](int64_t shard_steps, int64_t per_epoch) {
    shapes.emplace_back(shard_steps, per_epoch);
    steps_before_shape = steps;
  };
  absl::StatusOr<TrainResult> r = Train(
      j.assignment, nullptr, nullptr, j.backend.get(), j.params.get(),
      [](std::vector<MetricPoint>, bool) {}, nullptr, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(shapes.size(), 1u);
  // The smaller of the two byte ranges holds about 200 ratings: 6 batches.
  const int64_t per_epoch = shapes[0].second;
  EXPECT_GE(per_epoch, 5);
  EXPECT_LE(per_epoch, 6);
  EXPECT_EQ(shapes[0].first, 2 * per_epoch);
  EXPECT_EQ(steps_before_shape, 0);
  EXPECT_EQ(r->final_clock, 2 * per_epoch);

  // A worker given the job's shape (a resumed or rejoining one) does not
  // count again: a shape no count gives is followed.
  Job k = TwoShardJob(train, 0);
  k.assignment.set_shard_steps(3);
  k.assignment.set_steps_per_epoch(3);
  shapes.clear();
  r = Train(
      k.assignment, nullptr, nullptr, k.backend.get(), k.params.get(),
      [](std::vector<MetricPoint>, bool) {}, nullptr, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->final_clock, 3);
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes[0], std::make_pair(int64_t{3}, int64_t{3}));
}

// A survivor given part of another worker's data shard in its plan trains
// those batches, one per step, exactly as their owner would have: the
// examples (their users' keys) at each of its clocks are those of the
// owner's clocks. The plan grows while it trains (current_plan).
TEST(TrainerOnTextData, FollowsItsPlanBatchByBatch) {
  const std::string train = TempPath("mf_plan.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(400, 7)).ok());
  // The owner: rank 1 on its own data shard, all of it.
  Job owner = TwoShardJob(train, 1);
  KeyRecorder owner_keys(owner.params.get());
  absl::StatusOr<TrainResult> r = Train(
      owner.assignment, nullptr, nullptr, owner.backend.get(), &owner_keys,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t shard_steps = r->final_clock;
  ASSERT_GE(shard_steps, 10);

  // The survivor: rank 0 with shard 0's batches 0-3, then shard 1's 4-8
  // (batch 4 in the first epoch, the rest past it), the second part
  // appended after its fourth step.
  Job survivor = TwoShardJob(train, 0);
  DataSegment* own = survivor.assignment.add_plan();
  own->set_data_shard(0);
  own->set_end_batch(4);
  WorkerPlan plan = PlanOf(survivor.assignment);
  WorkerPlan grown = plan;
  DataSegment* moved = grown.segments.Add();
  moved->set_data_shard(1);
  moved->set_first_batch(4);
  moved->set_end_batch(9);
  int64_t at = 0;
  TrainerOptions o;
  o.on_step = [&](int64_t clock) { at = clock; };
  KeyRecorder survivor_keys(survivor.params.get());
  r = Train(
      survivor.assignment, nullptr, nullptr, survivor.backend.get(),
      &survivor_keys, [](std::vector<MetricPoint>, bool) {}, nullptr, o,
      [&] { return at >= 4 ? grown : plan; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 9);
  EXPECT_EQ(r->final_clock, 9);
  for (int64_t k = 0; k < 5; ++k) {
    ASSERT_EQ(survivor_keys.keys().count(4 + k), 1u) << k;
    EXPECT_EQ(survivor_keys.keys().at(4 + k), owner_keys.keys().at(4 + k))
        << "clock " << 4 + k << ": batch " << 4 + k << " of data shard 1";
  }
  EXPECT_NE(survivor_keys.keys().at(0), owner_keys.keys().at(0))
      << "clock 0 trains data shard 0";
}

TEST(TrainerOnTextData, MaxStepsSkipsTheCountAndWrapsEpochs) {
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

TEST(TrainerOnTextData, TooManyBadLinesFailNamingFileAndLine) {
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

TEST(TrainerOnTextData, AShardTooSmallForABatchFails) {
  const std::string train = TempPath("mf_small.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(20, 5)).ok());
  Job j = MfJob(train, "");
  absl::StatusOr<TrainResult> r = Train(
      j.assignment, nullptr, nullptr, j.backend.get(), j.params.get(),
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
      << r.status();
}

// The shards of a BSP job as a worker that joins late or falls behind
// sees them: a pull of the current step answers `joined_at`, and the end
// of step `clock` answers the version `moved_on[clock]` (the job went on
// without this worker) instead of clock + 1. The steps the worker ends
// are recorded.
class BspShards final : public client::ParameterAccess {
 public:
  explicit BspShards(client::ParameterAccess* inner) : inner_(inner) {}
  client::Handle Pull(client::PullArgs args) override {
    const bool current = args.current;
    absl::StatusOr<client::CallResult> r = inner_->Pull(std::move(args)).Wait();
    if (r.ok() && current) r->version = joined_at;
    return client::Handle(r);
  }
  absl::Status Push(client::StepArgs args) override {
    return inner_->Push(std::move(args));
  }
  client::Handle EndStep(client::StepArgs args) override {
    const int64_t clock = args.clock;
    const bool next = !args.next_weights.empty();
    ended.push_back(clock);
    absl::StatusOr<client::CallResult> r =
        inner_->EndStep(std::move(args)).Wait();
    if (r.ok() && next) {
      auto it = moved_on.find(clock);
      r->version = it != moved_on.end() ? it->second : clock + 1;
    }
    return client::Handle(r);
  }
  std::vector<int64_t> PartBoundaries(int index) const override {
    return inner_->PartBoundaries(index);
  }
  void CancelCalls() override { inner_->CancelCalls(); }

  int64_t joined_at = 0;
  std::map<int64_t, int64_t> moved_on;
  std::vector<int64_t> ended;

 private:
  client::ParameterAccess* inner_;
};

absl::StatusOr<TrainResult> TrainBsp(BspShards& shards, Job& j) {
  JobSpec* spec = j.assignment.mutable_spec();
  spec->mutable_consistency()->set_model(ConsistencySpec::BSP);
  spec->mutable_data()->set_max_steps(10);
  return Train(
      j.assignment, nullptr, nullptr, j.backend.get(), &shards,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
}

// A sparse BSP worker that joins while the shards are at step 4 (the
// others went on) starts there, as the dense pipeline's Join does.
TEST(TrainerOnTextData, ABspWorkerJoiningLateStartsAtTheShardsStep) {
  const std::string train = TempPath("mf_join.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(1000, 6)).ok());
  Job j = MfJob(train, "");
  BspShards shards(j.params.get());
  shards.joined_at = 4;
  absl::StatusOr<TrainResult> r = TrainBsp(shards, j);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 6);
  EXPECT_EQ(r->skipped_steps, 4);
  EXPECT_EQ(r->final_clock, 10);
  EXPECT_EQ(shards.ended, (std::vector<int64_t>{4, 5, 6, 7, 8, 9}));
}

// A sparse BSP worker whose step 2 ended after the job had moved on to
// step 5 (a backup worker whose gradients came late) catches up: it
// trains step 5 next instead of steps whose gradients would be dropped.
TEST(TrainerOnTextData, ABspBackupWorkerCatchesUp) {
  const std::string train = TempPath("mf_backup.train");
  ASSERT_TRUE(WriteFile(train, PlantedRatings(1000, 7)).ok());
  Job j = MfJob(train, "");
  BspShards shards(j.params.get());
  shards.moved_on[2] = 5;
  absl::StatusOr<TrainResult> r = TrainBsp(shards, j);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 8);
  EXPECT_EQ(r->skipped_steps, 2);
  EXPECT_EQ(r->final_clock, 10);
  EXPECT_EQ(shards.ended, (std::vector<int64_t>{0, 1, 2, 5, 6, 7, 8, 9}));
  // Under ASP nothing is skipped: the versions are not steps.
  Job asp = MfJob(train, "");
  BspShards same(asp.params.get());
  same.moved_on[2] = 5;
  asp.assignment.mutable_spec()->mutable_data()->set_max_steps(10);
  asp.assignment.mutable_spec()->mutable_consistency()->set_model(
      ConsistencySpec::ASP);
  absl::StatusOr<TrainResult> plain = Train(
      asp.assignment, nullptr, nullptr, asp.backend.get(), &same,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->steps, 10);
  EXPECT_EQ(plain->skipped_steps, 0);
}

}  // namespace
}  // namespace ps::worker
