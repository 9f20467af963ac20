#include "worker/data/spec_readers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/data_test_util.h"
#include "worker/data/shard_batches.h"

namespace ps::worker::data {
namespace {

using testing::ExampleString;
using testing::ReadAll;
using testing::TempPath;
using testing::WriteFile;

// `n` MovieLens lines "u i r t" with user = i, rating = 1 + i % 5.
std::string Ratings(int n, int first = 0) {
  std::string s;
  for (int i = first; i < first + n; ++i)
    absl::StrAppend(&s, i, "\t", i % 7, "\t", 1 + i % 5, "\t", 1000 + i, "\n");
  return s;
}

DataSpec MovieLensSpec(const std::string& file) {
  DataSpec d;
  d.set_format(DataSpec::MOVIELENS);
  d.add_train_files(file);
  return d;
}

TEST(SpecReaders, ParserFollowsTheFormat) {
  DataSpec d;
  EXPECT_EQ(ParserForSpec(d).status().code(),
            absl::StatusCode::kInvalidArgument);
  d.set_format(DataSpec::CRITEO);
  ASSERT_TRUE(ParserForSpec(d).ok());
  EXPECT_STREQ((*ParserForSpec(d))->name(), "criteo");
  EXPECT_EQ((*ParserForSpec(d))->schema().sparse.size(), 26u);
  d.set_format(DataSpec::LIBSVM);
  d.mutable_libsvm()->set_dense_dim(5);
  ASSERT_TRUE(ParserForSpec(d).ok());
  EXPECT_EQ((*ParserForSpec(d))->schema().dense_dim, 5);
  d.set_format(DataSpec::MOVIELENS);
  d.mutable_movielens()->set_min_rating(3);
  d.mutable_movielens()->set_max_rating(1);
  EXPECT_FALSE(ParserForSpec(d).ok());
}

TEST(SpecReaders, BadLinePolicyDefaults) {
  DataSpec d;
  EXPECT_DOUBLE_EQ(BadLinePolicyForSpec(d).max_fraction, 0.001);
  EXPECT_EQ(BadLinePolicyForSpec(d).min_lines, 1000);
  EXPECT_EQ(BadLinePolicyForSpec(d).min_bad_lines, 10);
  d.set_max_bad_line_fraction(0);
  d.set_min_bad_lines(0);
  EXPECT_DOUBLE_EQ(BadLinePolicyForSpec(d).max_fraction, 0);
  EXPECT_EQ(BadLinePolicyForSpec(d).min_bad_lines, 0);
}

TEST(SpecReaders, CountsEachShardsExamples) {
  const std::string path = TempPath("count.data");
  ASSERT_TRUE(WriteFile(path, Ratings(1000)).ok());
  ReaderStats stats;
  absl::StatusOr<std::vector<int64_t>> counts =
      CountShardExamples(MovieLensSpec(path), 3, &stats);
  ASSERT_TRUE(counts.ok()) << counts.status();
  ASSERT_EQ(counts->size(), 3u);
  EXPECT_EQ((*counts)[0] + (*counts)[1] + (*counts)[2], 1000);
  for (int64_t c : *counts) EXPECT_NEAR(c, 333, 20);
  EXPECT_EQ(stats.lines, 1000);
  EXPECT_EQ(stats.bad_lines, 0);
}

TEST(SpecReaders, CountFailsPastTheBadLineLimitNamingFileAndLine) {
  const std::string path = TempPath("bad.data");
  std::string text = Ratings(50);
  absl::StrAppend(&text, "1\t2\tnot-a-rating\t4\n", Ratings(50, 50));
  ASSERT_TRUE(WriteFile(path, text).ok());
  DataSpec d = MovieLensSpec(path);
  d.set_max_bad_line_fraction(0);
  d.set_min_bad_lines(0);
  absl::StatusOr<std::vector<int64_t>> counts =
      CountShardExamples(d, 1, nullptr);
  ASSERT_FALSE(counts.ok());
  EXPECT_EQ(counts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(counts.status().message().find(absl::StrCat(path, ":51")),
            std::string::npos)
      << counts.status();
  // Under the default limit (0.1%, but up to 10 bad lines always pass) one
  // bad line in 101 passes and is counted.
  ReaderStats stats;
  counts = CountShardExamples(MovieLensSpec(path), 1, &stats);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ((*counts)[0], 100);
  EXPECT_EQ(stats.bad_lines, 1);
  ASSERT_EQ(stats.bad_line_samples.size(), 1u);
  EXPECT_NE(stats.bad_line_samples[0].find(absl::StrCat(path, ":51")),
            std::string::npos);
}

ShardBatches BatchesOf(const DataSpec& d, int num_shards, int batch) {
  const std::vector<std::string> files(d.train_files().begin(),
                                       d.train_files().end());
  return ShardBatches(
      [d, files](const ShardSpec& s) {
        return OpenSpecReader(d, files, /*seed=*/7, s);
      },
      num_shards, batch);
}

std::vector<std::string> Examples(const Batch& b) {
  std::vector<std::string> out;
  for (int i = 0; i < b.size; ++i) out.push_back(ExampleString(b, i));
  return out;
}

TEST(ShardBatches, BatchesAreTheShardsStreamInOrderOrNot) {
  const std::string path = TempPath("batches.data");
  ASSERT_TRUE(WriteFile(path, Ratings(240)).ok());
  DataSpec d = MovieLensSpec(path);
  d.set_shuffle_buffer(16);
  // The shard's whole stream, as one reader gives it.
  absl::StatusOr<std::unique_ptr<BatchReader>> whole =
      OpenSpecReader(d, {path}, 7, {.shard = 1, .num_shards = 2, .epoch = 3});
  ASSERT_TRUE(whole.ok());
  absl::StatusOr<std::vector<std::string>> all = ReadAll(**whole, 10);
  ASSERT_TRUE(all.ok());
  ASSERT_GE(all->size(), 96u);  // byte ranges: about half of 240

  ShardBatches in_order = BatchesOf(d, 2, 8);
  ShardBatches jumping = BatchesOf(d, 2, 8);
  for (int64_t i : {0, 1, 2, 7, 3, 11}) {
    absl::StatusOr<Batch> a = in_order.BatchAt(1, 3, i);
    absl::StatusOr<Batch> b = jumping.BatchAt(1, 3, 11 - i);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    const std::vector<std::string> want(all->begin() + i * 8,
                                        all->begin() + (i + 1) * 8);
    EXPECT_EQ(Examples(*a), want) << "batch " << i;
    EXPECT_EQ(a->first_example, i * 8);
  }
}

TEST(ShardBatches, AShortShardWrapsIntoTheNextEpoch) {
  const std::string path = TempPath("wrap.data");
  ASSERT_TRUE(WriteFile(path, Ratings(100)).ok());  // 50 per shard
  const DataSpec d = MovieLensSpec(path);
  ShardBatches batches = BatchesOf(d, 2, 8);  // 6 full batches per pass
  absl::StatusOr<Batch> late = batches.BatchAt(0, 0, 7);
  ASSERT_TRUE(late.ok()) << late.status();
  absl::StatusOr<Batch> same = batches.BatchAt(0, 1, 1);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(Examples(*late), Examples(*same));
  EXPECT_EQ(late->size, 8);

  ShardBatches tiny = BatchesOf(d, 2, 64);
  EXPECT_EQ(tiny.BatchAt(0, 0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tiny.BatchAt(2, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardBatches, CountsBadLinesOncePerShard) {
  const std::string path = TempPath("badshard.data");
  std::string text = Ratings(30);
  absl::StrAppend(&text, "x\n", Ratings(30, 30));
  ASSERT_TRUE(WriteFile(path, text).ok());
  DataSpec d = MovieLensSpec(path);
  d.set_max_bad_line_fraction(0.5);
  ShardBatches batches = BatchesOf(d, 1, 10);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(batches.BatchAt(0, epoch, i).ok());
  }
  EXPECT_EQ(batches.bad_lines(), 1);
  ASSERT_EQ(batches.bad_line_samples().size(), 1u);
  EXPECT_NE(batches.bad_line_samples()[0].find(absl::StrCat(path, ":31")),
            std::string::npos)
      << batches.bad_line_samples()[0];
}

}  // namespace
}  // namespace ps::worker::data
