// ps_bench's sparse mode without servers: the key batches, the job it sets
// up, the bytes counted and the report. (Against shards it runs in
// `ps_bench --mode=sparse`.)
#include "tools/ps_bench_sparse.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/spec/config.h"

namespace ps::bench {
namespace {

TEST(ZipfKeyBatches, DistinctKeysInRangeWithARecurringHead) {
  auto batches = ZipfKeyBatches::Create(10'000'000, 1.05, 4096, 7);
  ASSERT_TRUE(batches.ok()) << batches.status();
  std::vector<uint64_t> keys;
  int with_key_1 = 0;
  std::set<uint64_t> all;
  for (int b = 0; b < 20; ++b) {
    batches->Next(&keys);
    ASSERT_EQ(keys.size(), 4096u);
    const std::set<uint64_t> distinct(keys.begin(), keys.end());
    EXPECT_EQ(distinct.size(), keys.size());
    EXPECT_GE(*distinct.begin(), 1u);
    EXPECT_LE(*distinct.rbegin(), 10'000'000u);
    with_key_1 += distinct.count(1);
    all.insert(keys.begin(), keys.end());
  }
  // The head recurs in every batch; the tail does not.
  EXPECT_EQ(with_key_1, 20);
  EXPECT_GT(all.size(), 4096u * 5);
  EXPECT_LT(all.size(), 4096u * 20);
}

TEST(ZipfKeyBatches, SeededAndChecked) {
  auto a = ZipfKeyBatches::Create(1000, 1.05, 100, 1);
  auto b = ZipfKeyBatches::Create(1000, 1.05, 100, 1);
  auto c = ZipfKeyBatches::Create(1000, 1.05, 100, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<uint64_t> ka, kb, kc;
  a->Next(&ka);
  b->Next(&kb);
  c->Next(&kc);
  EXPECT_EQ(ka, kb);
  EXPECT_NE(ka, kc);
  EXPECT_FALSE(ZipfKeyBatches::Create(1000, 1.05, 501, 1).ok());
  EXPECT_FALSE(ZipfKeyBatches::Create(1000, 1.05, 0, 1).ok());
  EXPECT_FALSE(ZipfKeyBatches::Create(1000, 0, 10, 1).ok());
}

TEST(ZipfKeyBatches, PredrawnBatchesAreTheSameStream) {
  auto drawn = ZipfKeyBatches::Create(1000, 1.05, 100, 3);
  auto live = ZipfKeyBatches::Create(1000, 1.05, 100, 3);
  ASSERT_TRUE(drawn.ok() && live.ok());
  drawn->Predraw(3);
  std::vector<uint64_t> kd, kl;
  // Three predrawn batches, then two drawn as they are asked for, then
  // three more predrawn.
  for (int b = 0; b < 8; ++b) {
    if (b == 5) drawn->Predraw(3);
    drawn->Next(&kd);
    live->Next(&kl);
    ASSERT_EQ(kd.size(), 100u);
    EXPECT_EQ(kd, kl) << "batch " << b;
  }
}

TEST(SparseBench, SpecIsAValidJob) {
  for (int dim : {16, 64}) {
    for (DType dtype : {FLOAT32, FLOAT16, BFLOAT16}) {
      const JobSpec spec = SparseBenchSpec(dim, dtype, 4);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
      ASSERT_EQ(spec.model().sparse_tables_size(), 1);
      EXPECT_EQ(spec.model().sparse_tables(0).dim(), dim);
      EXPECT_EQ(spec.model().tensors_size(), 0);
    }
  }
}

TEST(SparseBench, BytesCountKeysAndRowsBothWays) {
  EXPECT_EQ(SparseStepBytes(4096, 16, FLOAT32), 2 * 4096 * (8 + 64));
  EXPECT_EQ(SparseStepBytes(4096, 64, FLOAT16), 2 * 4096 * (8 + 128));
}

TEST(SparseBench, SummaryAndReport) {
  SparseFigures a, b;
  a.steps = 100;
  a.rows = 2 * 100 * 4096;
  a.bytes = 100 * SparseStepBytes(4096, 16, FLOAT32);
  a.seconds = 1.0;
  a.median_step_ms = 10;
  b = a;
  b.steps = 50;
  b.rows = 2 * 50 * 4096;
  b.bytes = 50 * SparseStepBytes(4096, 16, FLOAT32);
  b.seconds = 2.0;
  b.median_step_ms = 40;
  const SparseCase c = SummarizeSparse(16, 2, {a, b});
  EXPECT_EQ(c.workers, 2);
  EXPECT_DOUBLE_EQ(c.rows_per_s, 150 * 4096 / 2.0);
  EXPECT_DOUBLE_EQ(c.rows_per_s_worker, 25 * 4096);
  EXPECT_DOUBLE_EQ(c.gbps,
                   150.0 * SparseStepBytes(4096, 16, FLOAT32) / 2 / 1e9);
  EXPECT_EQ(SparseReportRow(c),
            "| 16 | 2 | 2 | 0.31M | 0.10M | 0.044 | 40.00 | - | - |");
  SparseCase with_dense = c;
  with_dense.dense_gbps = 0.088;
  EXPECT_EQ(SparseReportRow(with_dense),
            "| 16 | 2 | 2 | 0.31M | 0.10M | 0.044 | 40.00 | 0.088 | 0.50x |");
  EXPECT_TRUE(absl::StrContains(SparseReportHeader(), "rows/s"));
  b.error = "UNAVAILABLE: shard 1";
  EXPECT_TRUE(absl::StrContains(SparseReportRow(SummarizeSparse(16, 2, {a, b})),
                                "error: UNAVAILABLE: shard 1"));
}

TEST(SparseBench, FiguresTravelAsOneLine) {
  SparseFigures f;
  f.steps = 12;
  f.rows = 2 * 12 * 4096;
  f.bytes = 12 * SparseStepBytes(4096, 64, FLOAT32);
  f.seconds = 1.5;
  f.median_step_ms = 3.25;
  const std::string line = FormatSparseFigures(f);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  absl::StatusOr<SparseFigures> back = ParseSparseFigures(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->steps, f.steps);
  EXPECT_EQ(back->rows, f.rows);
  EXPECT_EQ(back->bytes, f.bytes);
  EXPECT_DOUBLE_EQ(back->seconds, f.seconds);
  EXPECT_DOUBLE_EQ(back->median_step_ms, f.median_step_ms);
  EXPECT_TRUE(back->error.empty());

  SparseFigures failed;
  failed.error = "UNAVAILABLE: shard 0 (127.0.0.1:1)";
  back = ParseSparseFigures(FormatSparseFigures(failed));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->error, failed.error);

  for (const char* bad : {"", "ready",
                          "sparse steps x rows 1 bytes 1 seconds "
                          "1 median_step_ms 1",
                          "worker steps 1"}) {
    EXPECT_EQ(ParseSparseFigures(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace ps::bench
