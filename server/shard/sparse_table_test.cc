// The sparse table through the shard store: rows created on first touch from
// the initializer, the optimizers' updates under ASP and BSP, exactly-once
// pushes, rows identical over any number of shards, and bad input.
#include "server/shard/sparse_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/platform/fake_clock.h"
#include "common/platform/metrics.h"
#include "common/spec/initializer.h"
#include "common/wire/key_placement.h"
#include "common/wire/payload_codec.h"
#include "server/shard/shard_store.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

constexpr int kDim = 4;

// MakeSpec's job (SGD, lr 1) with table "emb" (dim 4, UNIFORM) and table
// "wide" (dim 1, FTRL).
JobSpec SparseSpec(ConsistencySpec::Model model) {
  JobSpec spec = MakeSpec(model);
  SparseTableSpec* emb = spec.mutable_model()->add_sparse_tables();
  emb->set_name("emb");
  emb->set_dim(kDim);
  SparseTableSpec* wide = spec.mutable_model()->add_sparse_tables();
  wide->set_name("wide");
  wide->set_dim(1);
  wide->mutable_init()->set_kind(InitializerSpec::ZEROS);
  wide->mutable_optimizer()->set_kind(OptimizerSpec::FTRL);
  wide->mutable_optimizer()->set_learning_rate(0.1f);
  return spec;
}

// Keys and fp32 rows that a push or pull points into.
struct Rows {
  std::vector<uint64_t> keys;
  std::string bytes;
  SparseRowsView View(int table, int dim, DType dtype = FLOAT32) const {
    SparseRowsView v;
    v.table = table;
    v.dtype = dtype;
    v.num_rows = static_cast<int64_t>(keys.size());
    v.dim = dim;
    v.keys = keys;
    v.rows = bytes;
    return v;
  }
};

Rows Grads(std::vector<uint64_t> keys, int dim, float value) {
  Rows r;
  r.keys = std::move(keys);
  std::vector<float> g(r.keys.size() * dim, value);
  r.bytes.assign(reinterpret_cast<const char*>(g.data()),
                 g.size() * sizeof(float));
  return r;
}

absl::StatusOr<PushResult> PushRows(ShardStore& store, int64_t worker,
                                    uint64_t seq, int64_t clock,
                                    const Rows& rows, bool end_of_step,
                                    int table = 0, int dim = kDim) {
  PushArgs args = PushHeader(worker, seq, clock, clock, end_of_step);
  args.sparse.push_back(rows.View(table, dim));
  return store.Push(args, Far());
}

// The rows of `keys` in fp32 (pulled in `dtype`, widened here).
absl::StatusOr<std::vector<float>> PullRows(ShardStore& store,
                                            std::vector<uint64_t> keys,
                                            int table = 0, int dim = kDim,
                                            DType dtype = FLOAT32,
                                            int64_t min_version = 0) {
  Rows request;
  request.keys = std::move(keys);
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = 1;
  args.min_version = min_version;
  args.sparse_only = true;
  SparseRowsView v = request.View(table, 0, dtype);
  v.rows = {};
  args.sparse.push_back(v);
  std::string out;
  DType got_dtype = DTYPE_UNSPECIFIED;
  auto chunks = [](const Chunk&, absl::Span<const float>, const WeightsRef&) {
    ADD_FAILURE() << "a sparse_only pull got chunks";
  };
  auto rows = [&](size_t index, DType d, int32_t row_dim, int64_t n) {
    EXPECT_EQ(index, 0u);
    EXPECT_EQ(row_dim, dim);
    got_dtype = d;
    out.resize(n * row_dim * DTypeSize(d));
    return out.data();
  };
  const SparseSink sink = rows;
  absl::StatusOr<PullResult> r = store.PullWithRows(args, Far(), chunks, &sink);
  if (!r.ok()) return r.status();
  std::vector<float> values(request.keys.size() * dim);
  EXPECT_TRUE(WidenToFloat(got_dtype, out, absl::MakeSpan(values)).ok());
  return values;
}

std::vector<float> InitialRow(const JobSpec& spec, uint64_t key) {
  SparseTableSpec t = spec.model().sparse_tables(0);
  t.mutable_init()->set_kind(InitializerSpec::UNIFORM);
  std::vector<float> row(kDim);
  EXPECT_TRUE(
      InitializeSparseRow(t, spec.seed(), key, absl::MakeSpan(row)).ok());
  return row;
}

TEST(SparseTable, AspRowsStartFromTheInitializerAndApplyAtOnce) {
  FakeClock clock;
  auto store = NewStore(&clock);
  const JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  auto before = PullRows(*store, {11, 12});
  ASSERT_TRUE(before.ok()) << before.status();
  const std::vector<float> init11 = InitialRow(spec, 11);
  for (int k = 0; k < kDim; ++k) EXPECT_EQ((*before)[k], init11[k]);
  ASSERT_TRUE(
      PushRows(*store, 1, 1, 0, Grads({11, 13}, kDim, 0.5f), true).ok());
  auto after = PullRows(*store, {13, 11, 12, 11});
  ASSERT_TRUE(after.ok());
  const std::vector<float> init13 = InitialRow(spec, 13);
  for (int k = 0; k < kDim; ++k) {
    EXPECT_FLOAT_EQ((*after)[k], init13[k] - 0.5f);                // SGD, lr 1
    EXPECT_FLOAT_EQ((*after)[kDim + k], init11[k] - 0.5f);         // repeated
    EXPECT_FLOAT_EQ((*after)[2 * kDim + k], (*before)[kDim + k]);  // untouched
    EXPECT_FLOAT_EQ((*after)[3 * kDim + k], init11[k] - 0.5f);
  }
  absl::StatusOr<ShardStatus> status = store->GetShardStatus("job1");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->sparse_tables_size(), 2);
  EXPECT_EQ(status->sparse_tables(0).name(), "emb");
  EXPECT_EQ(status->sparse_tables(0).rows(), 3);
  EXPECT_EQ(status->sparse_tables(0).rows_pushed(), 2);
  EXPECT_EQ(status->sparse_tables(0).rows_pulled(), 6);
  EXPECT_GT(status->sparse_tables(0).bytes(), 0);
  EXPECT_EQ(status->sparse_tables(1).rows(), 0);
}

// A shard store whose figures go to `metrics`.
absl::StatusOr<std::unique_ptr<ShardStore>> StoreWithMetrics(
    FakeClock& clock, MetricsRegistry& metrics) {
  ShardStoreOptions options;
  options.clock = &clock;
  options.metrics = &metrics;
  return ShardStore::Create(options);
}

TEST(SparseTable, FiguresGoToThePrometheusMetrics) {
  FakeClock clock;
  MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      StoreWithMetrics(clock, metrics);
  ASSERT_TRUE(store.ok());
  JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  spec.mutable_model()->mutable_sparse_tables(0)->set_capacity(2);
  spec.mutable_model()->mutable_sparse_tables(0)->set_eviction(
      SparseTableSpec::LRU);
  ASSERT_TRUE((*store)->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(
      PushRows(**store, 1, 1, 0, Grads({11, 12, 13}, kDim, 0.5f), true).ok());
  // A NaN push is refused whole: its rows count as rejected.
  EXPECT_FALSE(
      PushRows(**store, 1, 2, 1,
               Grads({14}, kDim, std::numeric_limits<float>::quiet_NaN()), true)
          .ok());
  const std::string text = metrics.TextSnapshot();
  const std::string emb = "job=\"job1\",shard=\"0\",table=\"emb\"";
  for (const std::string& line :
       {"ps_sparse_table_rows{" + emb + "} 2",
        "ps_sparse_table_evictions{" + emb + "} 1",
        "ps_sparse_table_admissions{" + emb + "} 0",
        "ps_sparse_table_dropped_gradients{" + emb + "} 0",
        "ps_sparse_table_rejected_gradients{" + emb + "} 1"}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\n"
                                                         << text;
  }
  EXPECT_NE(text.find("ps_sparse_table_bytes{" + emb + "} "),
            std::string::npos);
  EXPECT_NE(
      text.find(
          "ps_sparse_table_rows{job=\"job1\",shard=\"0\",table=\"wide\"} 0\n"),
      std::string::npos)
      << text;
}

// The gauges are set when the metrics are collected (a collect hook), not
// on each push: Status() takes every stripe's lock.
TEST(SparseTable, GaugesAreSetAtCollectionNotOnEachPush) {
  FakeClock clock;
  MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      StoreWithMetrics(clock, metrics);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(
      (*store)->SetupJob(JobSetup(SparseSpec(ConsistencySpec::ASP), {1})).ok());
  prometheus::Gauge& rows =
      metrics.Gauge("sparse_table_rows", "Rows held",
                    {{"job", "job1"}, {"shard", "0"}, {"table", "emb"}});
  ASSERT_TRUE(
      PushRows(**store, 1, 1, 0, Grads({11, 12, 13}, kDim, 0.5f), true).ok());
  EXPECT_EQ(rows.Value(), 0);  // not published by the push
  EXPECT_NE(metrics.TextSnapshot().find(
                "ps_sparse_table_rows{job=\"job1\",shard=\"0\",table=\"emb\"} "
                "3\n"),
            std::string::npos);
  EXPECT_EQ(rows.Value(), 3);
  ASSERT_TRUE(
      PushRows(**store, 1, 2, 1, Grads({14, 15}, kDim, 0.5f), true).ok());
  EXPECT_EQ(rows.Value(), 3);
  metrics.TextSnapshot();
  EXPECT_EQ(rows.Value(), 5);
  // After a teardown the job's tables are gone: a collection must not read
  // them (ASan / TSan would say), and the gauges keep their last figures.
  TeardownJobRequest teardown;
  teardown.set_job_id("job1");
  ASSERT_TRUE((*store)->TeardownJob(teardown).ok());
  metrics.TextSnapshot();
  EXPECT_EQ(rows.Value(), 5);
}

TEST(SparseTable, PullsInHalfPrecision) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(SparseSpec(ConsistencySpec::ASP), {1})).ok());
  auto fp32 = PullRows(*store, {1, 2, 3});
  ASSERT_TRUE(fp32.ok());
  for (DType dtype : {FLOAT16, BFLOAT16}) {
    auto half = PullRows(*store, {1, 2, 3}, 0, kDim, dtype);
    ASSERT_TRUE(half.ok()) << half.status();
    // Each value narrowed as the codec narrows it.
    std::string narrowed(fp32->size() * 2, '\0');
    NarrowFromFloat(dtype, *fp32, narrowed.data());
    std::vector<float> expect(fp32->size());
    ASSERT_TRUE(WidenToFloat(dtype, narrowed, absl::MakeSpan(expect)).ok());
    EXPECT_EQ(*half, expect) << DType_Name(dtype);
  }
}

TEST(SparseTable, FtrlTableOfItsOwnNextToTheJobsSgd) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(SparseSpec(ConsistencySpec::ASP), {1})).ok());
  ASSERT_TRUE(
      PushRows(*store, 1, 1, 0, Grads({5}, 1, 2.0f), true, /*table=*/1, 1)
          .ok());
  auto w = PullRows(*store, {5}, 1, 1);
  ASSERT_TRUE(w.ok());
  // From w = 0: z = 2, w = -2 / (sqrt(4.1) / 0.1).
  EXPECT_NEAR((*w)[0], -2.0 / (std::sqrt(4.1) / 0.1), 1e-6);
}

TEST(SparseTable, RetriedPushAppliesOnce) {
  FakeClock clock;
  auto store = NewStore(&clock);
  const JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  const Rows g = Grads({21}, kDim, 1.0f);
  ASSERT_TRUE(PushRows(*store, 1, 1, 0, g, false).ok());
  auto retry = PushRows(*store, 1, 1, 0, g, false);
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->duplicate);
  auto w = PullRows(*store, {21});
  ASSERT_TRUE(w.ok());
  EXPECT_FLOAT_EQ((*w)[0], InitialRow(spec, 21)[0] - 1.0f);
}

TEST(SparseTable, NonFiniteGradientsAreRefusedWithNothingChanged) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(SparseSpec(ConsistencySpec::ASP), {1})).ok());
  auto before = PullRows(*store, {1, 2});
  ASSERT_TRUE(before.ok());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    Rows g = Grads({1, 2}, kDim, 0.5f);
    std::memcpy(g.bytes.data() + (kDim + 2) * sizeof(float), &bad,
                sizeof(float));
    auto r = PushRows(*store, 1, bad != bad ? 1 : 2, 0, g, false);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("key 2"), std::string::npos)
        << r.status();
  }
  EXPECT_EQ(*PullRows(*store, {1, 2}), *before);
  // The sequence numbers were used up: the next push applies.
  ASSERT_TRUE(PushRows(*store, 1, 3, 0, Grads({1}, kDim, 1.0f), false).ok());
  EXPECT_FLOAT_EQ((*PullRows(*store, {1}))[0], (*before)[0] - 1.0f);
  absl::StatusOr<ShardStatus> status = store->GetShardStatus("job1");
  EXPECT_EQ(status->sparse_tables(0).rejected_gradients(), 4);
}

TEST(SparseTable, BadInputGetsPreciseStatusesAndChangesNothing) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  spec.mutable_model()->mutable_sparse_tables(0)->set_capacity(3);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushRows(*store, 1, 1, 0, Grads({1, 2}, kDim, 1.0f), false).ok());
  const std::vector<float> before = *PullRows(*store, {1, 2});
  const std::vector<float> dense_before = Weights(*store);
  struct Case {
    std::string name;
    PushArgs args;
    absl::StatusCode code;
    std::string says;
  };
  const Rows good = Grads({1}, kDim, 1.0f);
  const Rows dup = Grads({1, 1}, kDim, 1.0f);
  const Rows full = Grads({1, 3, 4}, kDim, 1.0f);
  uint64_t seq = 2;
  auto push = [&](SparseRowsView v) {
    PushArgs a = PushHeader(1, seq++, 0, 0, false);
    a.sparse.push_back(v);
    return a;
  };
  std::vector<Case> cases;
  SparseRowsView unknown = good.View(7, kDim);
  cases.push_back({"unknown table", push(unknown),
                   absl::StatusCode::kInvalidArgument, "table"});
  Rows narrow = Grads({1}, 2, 1.0f);
  cases.push_back({"wrong dim", push(narrow.View(0, 2)),
                   absl::StatusCode::kInvalidArgument, "dim 2"});
  Rows half = good;
  half.bytes.resize(kDim * 2);
  cases.push_back({"wrong dtype", push(half.View(0, kDim, FLOAT16)),
                   absl::StatusCode::kInvalidArgument, "FLOAT16"});
  SparseRowsView mismatch = good.View(0, kDim);
  mismatch.num_rows = 2;
  cases.push_back({"keys and rows disagree", push(mismatch),
                   absl::StatusCode::kInvalidArgument, ""});
  cases.push_back({"duplicate key", push(dup.View(0, kDim)),
                   absl::StatusCode::kInvalidArgument, "1"});
  cases.push_back({"at capacity", push(full.View(0, kDim)),
                   absl::StatusCode::kResourceExhausted, "'emb'"});
  {
    // Dense chunks with it: the dense part must not apply either.
    PushArgs a = push(full.View(0, kDim));
    static const std::vector<float> ones(14, 1.0f);  // chunk 0
    a.chunks.push_back(Contiguous(
        0, FLOAT32, 14,
        absl::string_view(reinterpret_cast<const char*>(ones.data()), 56)));
    cases.push_back({"at capacity with chunks", a,
                     absl::StatusCode::kResourceExhausted, "shard 0"});
  }
  for (const Case& c : cases) {
    absl::StatusOr<PushResult> r = store->Push(c.args, Far());
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.name << ": " << r.status();
  }
  EXPECT_EQ(*PullRows(*store, {1, 2}), before);
  EXPECT_EQ(Weights(*store), dense_before);
  // Pulls: a new row beyond the capacity, a wrong dim.
  EXPECT_EQ(PullRows(*store, {3, 4}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(PullRows(*store, {1}, 0, kDim, FLOAT32).status().code(),
            absl::StatusCode::kOk);
  EXPECT_EQ(PullRows(*store, {1}, 5).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SparseTable, KeysOfAnotherShardAreRefused) {
  FakeClock clock;
  auto store = NewStore(&clock);
  ASSERT_TRUE(
      store->SetupJob(JobSetup(SparseSpec(ConsistencySpec::ASP), {1}, 0, 2))
          .ok());
  uint64_t foreign = 0;
  while (KeyShard("emb", foreign, 2) == 0) ++foreign;
  auto r = PushRows(*store, 1, 1, 0, Grads({foreign}, kDim, 1.0f), false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("belongs to shard 1"), std::string::npos)
      << r.status();
  EXPECT_EQ(PullRows(*store, {foreign}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The same pushes spread over 1, 2 and 3 shards by key_placement leave the
// same rows, bit for bit, under each optimizer.
TEST(SparseTable, RowsIdenticalOverOneTwoAndThreeShards) {
  for (OptimizerSpec::Kind kind :
       {OptimizerSpec::SGD, OptimizerSpec::ADAGRAD, OptimizerSpec::ADAM}) {
    std::map<int, std::vector<float>> by_shards;
    for (int n : {1, 2, 3}) {
      FakeClock clock;
      JobSpec spec = SparseSpec(ConsistencySpec::ASP);
      spec.mutable_model()
          ->mutable_sparse_tables(0)
          ->mutable_optimizer()
          ->set_kind(kind);
      spec.mutable_model()
          ->mutable_sparse_tables(0)
          ->mutable_optimizer()
          ->set_learning_rate(0.05f);
      std::vector<std::unique_ptr<ShardStore>> stores;
      for (int s = 0; s < n; ++s) {
        stores.push_back(NewStore(&clock));
        ASSERT_TRUE(stores[s]->SetupJob(JobSetup(spec, {1}, s, n)).ok());
      }
      std::vector<uint64_t> seq(n, 1);
      for (int round = 0; round < 3; ++round) {
        std::vector<Rows> parts(n);
        for (uint64_t key = 0; key < 300; key += 1 + round) {
          Rows& p = parts[KeyShard("emb", key * 977, n)];
          p.keys.push_back(key * 977);
          for (int k = 0; k < kDim; ++k) {
            const float g = 0.01f * static_cast<float>((key + k) % 17) - 0.08f;
            p.bytes.append(reinterpret_cast<const char*>(&g), sizeof(float));
          }
        }
        for (int s = 0; s < n; ++s) {
          ASSERT_TRUE(
              PushRows(*stores[s], 1, seq[s]++, round, parts[s], true).ok());
        }
      }
      std::vector<float> all;
      for (uint64_t key = 0; key < 300; ++key) {
        auto row =
            PullRows(*stores[KeyShard("emb", key * 977, n)], {key * 977});
        ASSERT_TRUE(row.ok()) << row.status();
        all.insert(all.end(), row->begin(), row->end());
      }
      by_shards[n] = all;
    }
    EXPECT_EQ(by_shards[1], by_shards[2]) << OptimizerSpec::Kind_Name(kind);
    EXPECT_EQ(by_shards[1], by_shards[3]) << OptimizerSpec::Kind_Name(kind);
  }
}

// BSP: a step's gradients summed per key over the workers, divided by their
// number, applied once at the close; a backup worker's are dropped.
TEST(SparseTable, BspSumsPerKeyAveragesOverWorkersAndDropsBackups) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = SparseSpec(ConsistencySpec::BSP);
  spec.mutable_consistency()->set_backup_workers(1);
  spec.set_num_workers(3);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2, 3})).ok());
  const std::vector<float> init = *PullRows(*store, {1, 2, 3});
  // Worker 3 stages a gradient but is the backup: the step closes without
  // it. Worker 1 pushes key 1 in two pushes (summed).
  ASSERT_TRUE(
      PushRows(*store, 3, 1, 0, Grads({1, 2, 3}, kDim, 100.0f), false).ok());
  ASSERT_TRUE(PushRows(*store, 1, 1, 0, Grads({1, 2}, kDim, 1.0f), false).ok());
  // Nothing applies before the step closes.
  EXPECT_EQ(*PullRows(*store, {1, 2, 3}), init);
  ASSERT_TRUE(PushRows(*store, 1, 2, 0, Grads({1}, kDim, 2.0f), true).ok());
  ASSERT_TRUE(PushRows(*store, 2, 1, 0, Grads({1}, kDim, 3.0f), true).ok());
  EXPECT_EQ(Version(*store), 1);
  auto late = PushRows(*store, 3, 2, 0, Grads({1}, kDim, 100.0f), true);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->dropped);
  const std::vector<float> w =
      *PullRows(*store, {1, 2, 3}, 0, kDim, FLOAT32, 1);
  for (int k = 0; k < kDim; ++k) {
    EXPECT_FLOAT_EQ(w[k], init[k] - (1.0f + 2.0f + 3.0f) / 2);
    EXPECT_FLOAT_EQ(w[kDim + k], init[kDim + k] - 1.0f / 2);
    EXPECT_FLOAT_EQ(w[2 * kDim + k], init[2 * kDim + k]);
  }
  absl::StatusOr<ShardStatus> status = store->GetShardStatus("job1");
  EXPECT_EQ(status->sparse_tables(0).dropped_gradients(), 3);
}

// The same with the close spread over 4 apply threads, over enough keys to
// fill every part of the staging (SparseTable::kStageParts), for 1 to 3
// steps: each key's row moves by the sum of its workers' gradients over the
// number of workers, at each step.
TEST(SparseTable, BspCloseOnTheApplyPoolSumsAndAveragesEveryKey) {
  for (int threads : {1, 4}) {
    FakeClock clock;
    auto store = NewStore(&clock, "", threads);
    JobSpec spec = SparseSpec(ConsistencySpec::BSP);
    spec.set_num_workers(4);
    ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1, 2, 3, 4})).ok());
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 600; ++k)
      keys.push_back(k * 0x9E3779B97F4A7C15ull);
    const std::vector<float> init = *PullRows(*store, keys);
    // Worker w pushes w to keys whose index is a multiple of w (worker 1:
    // every key, worker 4: a quarter of them).
    std::vector<float> expected = init;
    for (int64_t step = 0; step < 3; ++step) {
      for (int64_t w = 1; w <= 4; ++w) {
        std::vector<uint64_t> mine;
        for (size_t i = 0; i < keys.size(); i += w) {
          mine.push_back(keys[i]);
          for (int k = 0; k < kDim; ++k) {
            expected[i * kDim + k] -= static_cast<float>(w) / 4;
          }
        }
        ASSERT_TRUE(PushRows(*store, w, step + 1, step,
                             Grads(mine, kDim, static_cast<float>(w)), true)
                        .ok());
      }
      EXPECT_EQ(Version(*store), step + 1);
    }
    const std::vector<float> w = *PullRows(*store, keys, 0, kDim, FLOAT32, 3);
    ASSERT_EQ(w.size(), expected.size());
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(w[i], expected[i], 1e-4f * (1 + std::abs(expected[i])))
          << "threads " << threads << ", key " << keys[i / kDim] << " element "
          << i % kDim;
    }
  }
}

// Rows and their optimizer slots go into the checkpoints by key: taken on 2
// shards, restored onto 3, they are the same rows and continue the same way.
TEST(SparseTable, CheckpointOnTwoShardsRestoresOntoThree) {
  FakeClock clock;
  const std::string dir = TempDir("sparse_two_to_three");
  JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  spec.mutable_model()->mutable_sparse_tables(0)->mutable_optimizer()->set_kind(
      OptimizerSpec::ADAM);
  spec.mutable_model()
      ->mutable_sparse_tables(0)
      ->mutable_optimizer()
      ->set_learning_rate(0.01f);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 200; ++k) keys.push_back(k * 31337);
  // Pushes `value` to every key, each to its shard of `stores`.
  auto push_all = [&](std::vector<std::unique_ptr<ShardStore>>& stores,
                      uint64_t seq, float value) {
    const int n = static_cast<int>(stores.size());
    std::vector<std::vector<uint64_t>> parts(n);
    for (uint64_t k : keys) parts[KeyShard("emb", k, n)].push_back(k);
    for (int s = 0; s < n; ++s) {
      ASSERT_TRUE(
          PushRows(*stores[s], 1, seq, 0, Grads(parts[s], kDim, value), false)
              .ok());
    }
  };
  auto rows_of = [&](std::vector<std::unique_ptr<ShardStore>>& stores) {
    const int n = static_cast<int>(stores.size());
    std::vector<float> all;
    for (uint64_t k : keys) {
      auto row = PullRows(*stores[KeyShard("emb", k, n)], {k});
      EXPECT_TRUE(row.ok()) << row.status();
      if (row.ok()) all.insert(all.end(), row->begin(), row->end());
    }
    return all;
  };
  std::vector<std::unique_ptr<ShardStore>> two;
  for (int shard = 0; shard < 2; ++shard) {
    two.push_back(NewStore(&clock, dir));
    ASSERT_TRUE(two.back()->SetupJob(JobSetup(spec, {1}, shard, 2)).ok());
  }
  push_all(two, 1, 0.5f);
  for (auto& s : two) ASSERT_TRUE(s->Checkpoint("job1").ok());
  const std::vector<float> want = rows_of(two);
  std::vector<std::unique_ptr<ShardStore>> three;
  for (int shard = 0; shard < 3; ++shard) {
    three.push_back(NewStore(&clock, dir));
    SetupJobRequest r = JobSetup(spec, {1}, shard, 3);
    r.set_restore(true);
    auto resp = three.back()->SetupJob(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->restored());
  }
  int64_t rows = 0;
  for (auto& s : three) {
    rows += s->GetShardStatus("job1")->sparse_tables(0).rows();
  }
  EXPECT_EQ(rows, static_cast<int64_t>(keys.size()));
  EXPECT_EQ(rows_of(three), want);
  // Adam's moments and step counts came along: the next update is the same.
  push_all(two, 2, -0.25f);
  push_all(three, 2, -0.25f);
  EXPECT_EQ(rows_of(three), rows_of(two));
}

// With an admission filter of 2, a key gets its row on its second push:
// until then pulls read the initializer's row without creating one and
// gradients are dropped and counted.
TEST(SparseTable, AdmissionFilterAdmitsOnTheKthPush) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  spec.mutable_model()
      ->mutable_sparse_tables(0)
      ->mutable_admission()
      ->set_min_count(2);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  const std::vector<float> init = InitialRow(spec, 9);
  EXPECT_EQ(*PullRows(*store, {9}), init);
  auto table_status = [&] {
    return store->GetShardStatus("job1")->sparse_tables(0);
  };
  EXPECT_EQ(table_status().rows(), 0);
  ASSERT_TRUE(PushRows(*store, 1, 1, 0, Grads({9}, kDim, 1.0f), false).ok());
  EXPECT_EQ(*PullRows(*store, {9}), init);
  EXPECT_EQ(table_status().rows(), 0);
  EXPECT_EQ(table_status().dropped_gradients(), 1);
  ASSERT_TRUE(PushRows(*store, 1, 2, 0, Grads({9}, kDim, 1.0f), false).ok());
  const std::vector<float> w = *PullRows(*store, {9});
  for (int k = 0; k < kDim; ++k) EXPECT_FLOAT_EQ(w[k], init[k] - 1.0f);
  EXPECT_EQ(table_status().rows(), 1);
  EXPECT_EQ(table_status().admissions(), 1);
  EXPECT_EQ(table_status().dropped_gradients(), 1);
}

// LRU at capacity through the store: the least recently touched row goes,
// and its key starts again from the initializer.
TEST(SparseTable, LruEvictionThroughTheStore) {
  FakeClock clock;
  auto store = NewStore(&clock);
  JobSpec spec = SparseSpec(ConsistencySpec::ASP);
  spec.mutable_model()->mutable_sparse_tables(0)->set_capacity(2);
  spec.mutable_model()->mutable_sparse_tables(0)->set_eviction(
      SparseTableSpec::LRU);
  ASSERT_TRUE(store->SetupJob(JobSetup(spec, {1})).ok());
  ASSERT_TRUE(PushRows(*store, 1, 1, 0, Grads({1, 2}, kDim, 1.0f), false).ok());
  ASSERT_TRUE(PushRows(*store, 1, 2, 0, Grads({1}, kDim, 1.0f), false).ok());
  ASSERT_TRUE(PushRows(*store, 1, 3, 0, Grads({3}, kDim, 1.0f), false).ok());
  auto status = store->GetShardStatus("job1")->sparse_tables(0);
  EXPECT_EQ(status.rows(), 2);
  EXPECT_EQ(status.evictions(), 1);
  EXPECT_EQ(status.capacity(), 2);
  EXPECT_FLOAT_EQ((*PullRows(*store, {1}))[0], InitialRow(spec, 1)[0] - 2.0f);
  EXPECT_EQ(*PullRows(*store, {2}), InitialRow(spec, 2));  // evicted
}

}  // namespace
}  // namespace ps::server
