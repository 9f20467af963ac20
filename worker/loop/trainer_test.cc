#include "worker/loop/trainer.h"
#include "worker/loop/training_data.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/spec/config.h"
#include "common/spec/initializer.h"
#include "common/spec/model.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_emulated_backend.h"
#include "worker/client/parameter_access.h"
#include "worker/loop/step_pipeline.h"

namespace ps::worker {
namespace {

// Parameters held in-process with plain SGD applied on every push: the
// training loop without the network. Gradient parts (TensorGrad offsets)
// are applied where they fall; the weights pushes ask back
// (next_weights) come with the step's end, which fetches all of them as a
// pull of the next step would. Every Handle it returns is over.
class LocalParams : public client::ParameterAccess {
 public:
  LocalParams(const JobSpec& spec, float lr) : lr_(lr) {
    absl::StatusOr<std::vector<TensorSpec>> tensors = ExpandModel(spec.model());
    EXPECT_TRUE(tensors.ok());
    if (!tensors.ok()) return;
    for (const TensorSpec& t : *tensors) {
      std::vector<float> w(NumElements(t));
      EXPECT_TRUE(InitializeRange(t, spec.seed(), 0, absl::MakeSpan(w)).ok());
      tensors_.push_back(std::move(w));
    }
  }
  client::Handle Pull(client::PullArgs request) override {
    if (!request.rows.empty()) {
      return client::Handle(absl::UnimplementedError("no sparse tables"));
    }
    absl::StatusOr<int64_t> version = Read(request.tensors);
    if (!version.ok()) return client::Handle(version.status());
    return client::Handle(client::CallResult{.version = *version});
  }
  absl::Status Push(client::StepArgs request) override {
    return Apply(request);
  }
  client::Handle EndStep(client::StepArgs request) override {
    if (absl::Status s = Apply(request); !s.ok()) return client::Handle(s);
    ++version_;
    if (request.next_weights.empty()) return client::Handle();
    ++finish_and_pulls;
    absl::StatusOr<int64_t> version = Read(request.next_weights);
    if (!version.ok()) return client::Handle(version.status());
    return client::Handle(client::CallResult{.version = *version});
  }
  std::vector<int64_t> PartBoundaries(int) const override { return {}; }
  void CancelCalls() override {}

  // The shards' version (BSP: the step they are at).
  void set_version(int64_t version) { version_ = version; }
  // Pulls: Pull calls and step ends that fetched the next weights; pushes:
  // dense gradients (or parts) applied; finish_and_pulls: step ends that
  // fetched the next weights.
  int pulls = 0, pushes = 0, finish_and_pulls = 0;
  std::map<int64_t, int64_t> base_versions;  // by clock
  // The sum of squares of each pushed gradient, by (clock, tensor index).
  std::map<std::pair<int64_t, int>, double> grad_sums;

 protected:
  // Applies the dense gradients (or parts) of `request`, one by one.
  virtual absl::Status Apply(const client::StepArgs& request) {
    if (!request.rows.empty() || !request.next_rows.empty()) {
      return absl::UnimplementedError("no sparse tables");
    }
    for (const client::TensorGrad& g : request.dense) {
      const int index = g.tensor_index;
      if (index == 0) base_versions[request.clock] = request.base_version;
      // Squares: an output bias's gradient sums to about zero at every step.
      double& sum = grad_sums[{request.clock, index}];
      for (float x : g.grad) sum += static_cast<double>(x) * x;
      if (index < 0 || index >= static_cast<int>(tensors_.size())) {
        return absl::InvalidArgumentError("index");
      }
      auto& t = tensors_[index];
      const bool whole = g.offset == 0 && g.grad.size() == t.size();
      if (g.offset < 0 || g.offset + g.grad.size() > t.size() ||
          (!whole && PartBoundaries(index).empty())) {
        return absl::InvalidArgumentError("size");
      }
      for (size_t j = 0; j < g.grad.size(); ++j) {
        t[g.offset + j] -= lr_ * g.grad[j];
      }
      ++pushes;
    }
    return absl::OkStatus();
  }

 private:
  // Copies the weights into `out`; their version.
  absl::StatusOr<int64_t> Read(const std::vector<absl::Span<float>>& out) {
    if (out.size() != tensors_.size())
      return absl::InvalidArgumentError("count");
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].size() != tensors_[i].size()) {
        return absl::InvalidArgumentError("size");
      }
      std::copy(tensors_[i].begin(), tensors_[i].end(), out[i].begin());
    }
    ++pulls;
    return version_;
  }

  float lr_;
  int64_t version_ = 0;
  std::vector<std::vector<float>> tensors_;
};

// A MetricSink that keeps the train_loss points.
MetricSink LossesInto(std::vector<double>* losses) {
  return [losses](std::vector<MetricPoint> p, bool) {
    for (const MetricPoint& m : p) {
      if (m.name() == "train_loss") losses->push_back(m.value());
    }
  };
}

JobSpec Spec(int64_t max_steps) {
  auto spec = ParseJobSpec(
      absl::StrCat(R"pb(
                     model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
                     optimizer { learning_rate: 0.1 }
                     data { batch_size: 64 shuffle_seed: 3 eval_every_steps: 100
                            eval_examples: 2000
                            max_steps:)pb",
                   max_steps, " }\n seed: 5"),
      "job");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

class TrainerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tr = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
    ASSERT_TRUE(tr.ok()) << tr.status();
    train_ = std::shared_ptr<const Dataset>(std::move(*tr));
    DatasetOptions o;
    o.stats = train_->stats;
    auto te = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest, o);
    ASSERT_TRUE(te.ok()) << te.status();
    test_ = std::shared_ptr<const Dataset>(std::move(*te));
  }
  void OverlapComputesOneStepBehind(
      absl::StatusOr<std::unique_ptr<kernels::Backend>> backend, int steps);
  static std::shared_ptr<const Dataset> train_, test_;
};
std::shared_ptr<const Dataset> TrainerTest::train_, TrainerTest::test_;

TEST_F(TrainerTest, DrivesLossDownAndReportsMetrics) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  a.set_command(WorkerAssignment::TRAIN);
  *a.mutable_spec() = Spec(300);
  a.set_rank(1);
  a.set_num_workers(2);
  a.add_data_shards(1);
  a.set_num_data_shards(2);
  a.set_evaluator(true);
  LocalParams params(a.spec(), 0.1f);
  std::vector<MetricPoint> points;
  bool done = false;
  auto result = Train(
      a, train_, test_, backend->get(), &params,
      [&](std::vector<MetricPoint> p, bool d) {
        points.insert(points.end(), p.begin(), p.end());
        done = done || d;
      },
      nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 300);
  EXPECT_TRUE(done);
  EXPECT_EQ(params.pushes, 300 * 4);  // 2 layers x (weight, bias)
  // Every step but the last fetches the next step's weights as it ends.
  EXPECT_EQ(params.finish_and_pulls, 299);
  std::vector<double> losses;
  int accuracy_points = 0;
  for (const MetricPoint& p : points) {
    if (p.name() == "train_loss") losses.push_back(p.value());
    if (p.name() == "test_accuracy") ++accuracy_points;
  }
  ASSERT_GE(losses.size(), 10u);
  EXPECT_LT(losses.back(), 0.7 * losses.front());
  EXPECT_EQ(accuracy_points, 3);  // steps 100, 200 and the final one
  EXPECT_GT(result->test_accuracy, 0.75);
}

// ASP with overlap_communication: step t computes on the weights that
// include the updates up to step t - 2 (the pull of step t - 1's end lands
// during step t), and training still works. On the CPU backend the weights
// and gradients in flight are buffers swapped with the model's; on the
// emulated GPU backend (memory not the host's; slow, so fewer steps and no
// evaluation), host copies. Either way every step pushes its own gradient:
// no two steps in a row push the same one.
TEST_F(TrainerTest, OverlapComputesOneStepBehind) {
  OverlapComputesOneStepBehind(kernels::CreateCpuBackend({}), 300);
  OverlapComputesOneStepBehind(kernels::CreateCudaEmulatedBackend(), 30);
}

void TrainerTest::OverlapComputesOneStepBehind(
    absl::StatusOr<std::unique_ptr<kernels::Backend>> backend, int steps) {
  ASSERT_TRUE(backend.ok());
  SCOPED_TRACE((*backend)->HostAddressable() ? "host memory" : "device memory");
  WorkerAssignment a;
  *a.mutable_spec() = Spec(steps);
  a.mutable_spec()->mutable_consistency()->set_model(ConsistencySpec::ASP);
  a.mutable_spec()->mutable_consistency()->set_overlap_communication(true);
  a.add_data_shards(0);
  a.set_num_data_shards(1);
  const bool learns = steps >= 300;  // long enough to check the learning
  a.set_evaluator(learns);
  LocalParams params(a.spec(), 0.1f);
  std::vector<double> losses;
  auto result = Train(a, train_, test_, backend->get(), &params,
                      LossesInto(&losses), nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, steps);
  EXPECT_EQ(params.pushes, steps * 4);
  ASSERT_EQ(params.base_versions.size(), static_cast<size_t>(steps));
  EXPECT_EQ(params.base_versions[0], 0);
  EXPECT_EQ(params.base_versions[1], 0);  // still the initial weights
  for (int64_t t = 2; t < steps; ++t) {
    ASSERT_EQ(params.base_versions[t], t - 1) << "step " << t;
  }
  for (int64_t t = 1; t < steps; ++t) {
    for (int i = 0; i < 4; ++i) {
      const double now = params.grad_sums[std::make_pair(t, i)];
      const double before = params.grad_sums[std::make_pair(t - 1, i)];
      ASSERT_NE(now, before) << "step " << t << " tensor " << i;
    }
  }
  if (!learns) return;
  ASSERT_GE(losses.size(), 10u);
  EXPECT_LT(losses.back(), 0.7 * losses.front());
  EXPECT_GT(result->test_accuracy, 0.75);
}

TEST_F(TrainerTest, StopsWithinOneStep) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  *a.mutable_spec() = Spec(1000);
  a.add_data_shards(0);
  a.set_num_data_shards(1);
  LocalParams params(a.spec(), 0.1f);
  std::atomic<bool> stop{false};
  int reports = 0;
  auto result = Train(
      a, train_, test_, backend->get(), &params,
      [&](std::vector<MetricPoint>, bool) {
        if (++reports == 2) stop = true;
      },
      &stop);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  // Stop set during step 40: no step 41 (its weights were fetched at the
  // end of step 40, but nothing was computed on them).
  EXPECT_EQ(params.pushes, 40 * 4);
  EXPECT_EQ(params.pulls, 41);
}

TEST_F(TrainerTest, RejectsMismatchedInput) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  *a.mutable_spec() = Spec(10);
  a.mutable_spec()->mutable_model()->mutable_mlp()->set_input_dim(100);
  a.mutable_spec()->mutable_model()->clear_tensors();
  LocalParams params(a.spec(), 0.1f);
  auto result = Train(
      a, train_, test_, backend->get(), &params,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

// Parameters whose first tensor is cut into parts (as a shard's chunks):
// gradients arrive block by block, and the next step's weights are awaited
// block by block before forward reads them. Records the dense parts step
// 1 sends (Push or EndStep, in order), whether a push asked the next
// weights back, and the parts of the weights awaited on step 1's end.
class PartParams : public LocalParams {
 public:
  PartParams(const JobSpec& spec, float lr, std::vector<int64_t> boundaries)
      : LocalParams(spec, lr), boundaries_(std::move(boundaries)) {}
  std::vector<int64_t> PartBoundaries(int index) const override {
    return index == 0 ? boundaries_ : std::vector<int64_t>();
  }
  absl::Status Push(client::StepArgs request) override {
    if (!request.next_weights.empty()) pull_with_pushes = true;
    return LocalParams::Push(std::move(request));
  }
  // A step end whose per-part waits are recorded.
  class Recorded : public client::Handle::Call {
   public:
    Recorded(client::Handle end, std::vector<std::vector<int64_t>>* awaited)
        : end_(std::move(end)), awaited_(awaited) {}
    absl::Status AwaitPart(int index, int64_t begin, int64_t end) override {
      awaited_->push_back({index, begin, end});
      return end_.AwaitPart(index, begin, end);
    }
    absl::StatusOr<client::CallResult> Wait() override { return end_.Wait(); }

   private:
    client::Handle end_;
    std::vector<std::vector<int64_t>>* awaited_;
  };
  client::Handle EndStep(client::StepArgs request) override {
    const int64_t clock = request.clock;
    client::Handle end = LocalParams::EndStep(std::move(request));
    if (clock != 1) return end;
    awaited.clear();
    return client::Handle(std::make_unique<Recorded>(std::move(end), &awaited));
  }
  std::vector<std::vector<int64_t>> parts, awaited;
  bool pull_with_pushes = false;

 protected:
  absl::Status Apply(const client::StepArgs& request) override {
    if (request.clock == 1) {
      for (const client::TensorGrad& g : request.dense) {
        parts.push_back({g.tensor_index, g.offset, int64_t(g.grad.size())});
      }
    }
    return LocalParams::Apply(request);
  }

 private:
  std::vector<int64_t> boundaries_;
};

TEST(Trainer, FirstLayerRowSplitsFollowChunksInBlocksOfAFewHundredKb) {
  // 784 x 256 fp32 (784 KB) in 4 chunks of 196 rows: 2 blocks.
  EXPECT_EQ(FirstLayerRowSplits({50176, 100352, 150528}, {784, 256}),
            (std::vector<int64_t>{392}));
  // 16 MB in 64 chunks of 64 rows: 8 blocks of 512 rows.
  std::vector<int64_t> parts;
  for (int64_t r = 64; r < 4096; r += 64) parts.push_back(r * 1024);
  EXPECT_EQ(FirstLayerRowSplits(parts, {4096, 1024}),
            (std::vector<int64_t>{512, 1024, 1536, 2048, 2560, 3072, 3584}));
  // Boundaries inside a row are no row split; small layers stay whole.
  EXPECT_EQ(FirstLayerRowSplits({100 * 1000 + 1, 200 * 1000}, {300, 1000}),
            (std::vector<int64_t>{200}));
  EXPECT_TRUE(FirstLayerRowSplits({4, 6}, {10, 3}).empty());
  EXPECT_TRUE(FirstLayerRowSplits({}, {784, 256}).empty());
}

TEST_F(TrainerTest, FirstLayerInBlocksPushesPartsAndAwaitsThemInOrder) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  auto spec = ParseJobSpec(
      R"pb(
        model { mlp { input_dim: 784 hidden: 256 num_classes: 10 } }
        optimizer { learning_rate: 0.1 }
        data {
          batch_size: 64
          shuffle_seed: 3
          eval_every_steps: 1000
          eval_examples: 2000
          max_steps: 150
        }
        seed: 5)pb",
      "job");
  ASSERT_TRUE(spec.ok()) << spec.status();
  *a.mutable_spec() = *spec;
  a.add_data_shards(0);
  a.set_num_data_shards(1);
  a.set_evaluator(true);
  // fc0/weight is [784, 256]: chunks of 196 rows; blocks of 392 rows.
  PartParams params(a.spec(), 0.1f, {50176, 100352, 150528});
  std::vector<double> losses;
  auto result = Train(a, train_, test_, backend->get(), &params,
                      LossesInto(&losses), nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(params.pull_with_pushes);
  // Step 1's pushes: the output layer, then fc0/weight in two blocks of
  // 392 rows x 256, then fc0/bias.
  EXPECT_EQ(params.parts,
            (std::vector<std::vector<int64_t>>{{2, 0, 2560},
                                               {3, 0, 10},
                                               {0, 0, 100352},
                                               {0, 100352, 100352},
                                               {1, 0, 256}}));
  // Step 2 awaited its weights in the order forward reads them.
  EXPECT_EQ(params.awaited,
            (std::vector<std::vector<int64_t>>{{0, 0, 100352},
                                               {0, 100352, 200704},
                                               {1, 0, 256},
                                               {2, 0, 2560},
                                               {3, 0, 10}}));
  ASSERT_GE(losses.size(), 5u);
  EXPECT_LT(losses.back(), 0.7 * losses.front());
  EXPECT_GT(result->test_accuracy, 0.7);
}

TEST(Trainer, StepBudget) {
  EXPECT_EQ(StepsPerEpoch(60000, 4, 128), 117);
  EXPECT_EQ(StepsPerEpoch(60000, 0, 128), 0);
  JobSpec spec;
  spec.mutable_data()->set_epochs(10);
  spec.mutable_data()->set_batch_size(128);
  EXPECT_EQ(TotalSteps(spec, 60000, 4), 1170);
  spec.mutable_data()->set_max_steps(50);
  EXPECT_EQ(TotalSteps(spec, 60000, 4), 50);
}

}  // namespace
}  // namespace ps::worker

namespace ps::worker {
namespace {

// A worker given batches 465-470 of data shard 1 (across the end of epoch
// 0: 468 batches of 64 per shard of two) at clocks 7-12 trains exactly
// what a worker owning the shard trains at clocks 465-470: the same
// gradients from the same weights.
TEST_F(TrainerTest, FollowsItsPlanBatchByBatch) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment own;
  *own.mutable_spec() = Spec(471);
  own.add_data_shards(1);
  own.set_num_data_shards(2);
  own.set_start_step(465);
  WorkerAssignment planned = own;
  planned.set_start_step(7);
  planned.set_plan_start(7);
  DataSegment* d = planned.add_plan();
  d->set_data_shard(1);
  d->set_first_batch(465);
  d->set_end_batch(471);
  LocalParams p_own(own.spec(), 0.1f), p_planned(own.spec(), 0.1f);
  p_own.set_version(465);  // BSP: the shards are at the start step
  p_planned.set_version(7);
  auto r_own = Train(
      own, train_, test_, backend->get(), &p_own,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  auto r_planned = Train(
      planned, train_, test_, backend->get(), &p_planned,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  ASSERT_TRUE(r_own.ok()) << r_own.status();
  ASSERT_TRUE(r_planned.ok()) << r_planned.status();
  EXPECT_EQ(r_own->steps, 6);
  EXPECT_EQ(r_planned->steps, 6);
  EXPECT_EQ(r_planned->final_clock, 13);
  for (int64_t k = 0; k < 6; ++k) {
    for (int t = 0; t < 4; ++t) {
      const double want = p_own.grad_sums.at({465 + k, t});
      EXPECT_NEAR(p_planned.grad_sums.at({7 + k, t}), want, 1e-6 * want)
          << "step " << k << " tensor " << t;
    }
  }
}

// A BSP worker rejoins while the shards' open step (7) is one behind the
// start step the coordinator gave it (8): the shards count it among step
// 7's workers, so it trains step 7, on its plan's first batch, and then
// its plan from 8 to its end, which stays where the others' plans end.
TEST_F(TrainerTest, ABspWorkerRejoiningAheadOfTheShardsStartsAtTheirStep) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  *a.mutable_spec() = Spec(100);
  a.set_num_data_shards(2);
  a.set_start_step(8);
  a.set_plan_start(8);
  DataSegment* d = a.add_plan();
  d->set_data_shard(0);
  d->set_first_batch(20);
  d->set_end_batch(24);
  LocalParams params(a.spec(), 0.1f);
  params.set_version(7);
  auto result = Train(
      a, train_, test_, backend->get(), &params,
      [](std::vector<MetricPoint>, bool) {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 5);
  EXPECT_EQ(result->final_clock, 12);
  EXPECT_EQ(result->skipped_steps, 0);
  std::vector<int64_t> clocks;
  for (const auto& [clock, base] : params.base_versions) {
    clocks.push_back(clock);
    EXPECT_EQ(base, clock);  // each step on its own version's weights
  }
  EXPECT_EQ(clocks, (std::vector<int64_t>{7, 8, 9, 10, 11}));
  EXPECT_EQ(params.pushes, 5 * 4);
}

// The plan read once per step: batches appended while it trains (a
// survivor taking on a leaver's data) are trained before it is done.
TEST_F(TrainerTest, TrainsWhatItsPlanGainsWhileItRuns) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  *a.mutable_spec() = Spec(100);
  a.set_num_data_shards(2);
  DataSegment* d = a.add_plan();
  d->set_data_shard(0);
  d->set_end_batch(5);
  LocalParams params(a.spec(), 0.1f);
  std::atomic<int64_t> at{0};
  TrainerOptions o;
  o.on_step = [&](int64_t clock) { at = clock; };
  int dones = 0;
  auto result = Train(
      a, train_, test_, backend->get(), &params,
      [&](std::vector<MetricPoint>, bool done) { dones += done; }, nullptr, o,
      [&] {
        WorkerPlan p = PlanOf(a);
        if (at >= 2) {
          DataSegment* more = p.segments.Add();
          more->set_data_shard(1);
          more->set_first_batch(40);
          more->set_end_batch(43);
        }
        return p;
      });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 8);
  EXPECT_EQ(result->final_clock, 8);
  EXPECT_EQ(params.pushes, 8 * 4);
  EXPECT_EQ(dones, 1);
}

// The data's shape goes to on_data_shape before the first step: the
// daemon's heartbeats carry it to the coordinator, which cuts plans by it.
TEST_F(TrainerTest, ReportsItsDataShapeBeforeTheFirstStep) {
  auto backend = kernels::CreateCpuBackend({});
  ASSERT_TRUE(backend.ok());
  WorkerAssignment a;
  *a.mutable_spec() = Spec(0);
  a.mutable_spec()->mutable_data()->set_epochs(1);
  a.set_num_data_shards(2);
  DataSegment* d = a.add_plan();
  d->set_data_shard(0);
  d->set_end_batch(3);
  LocalParams params(a.spec(), 0.1f);
  int64_t steps = 0;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  TrainerOptions o;
  o.on_step = [&](int64_t) { ++steps; };
  o.on_data_shape = [&](int64_t shard_steps, int64_t per_epoch) {
    EXPECT_EQ(steps, 0) << "before the first step";
    shapes.emplace_back(shard_steps, per_epoch);
  };
  auto result = Train(
      a, train_, test_, backend->get(), &params,
      [](std::vector<MetricPoint>, bool) {}, nullptr, o);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(shapes.size(), 1u);
  // 60000 examples over 2 data shards in batches of 64, one epoch.
  EXPECT_EQ(shapes[0], std::make_pair(int64_t{468}, int64_t{468}));
  EXPECT_EQ(result->final_clock, 3);
}

}  // namespace
}  // namespace ps::worker
