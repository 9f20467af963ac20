#include "worker/data/text_count.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/data_test_util.h"
#include "worker/data/movielens_format.h"

namespace ps::worker::data {
namespace {

using testing::Gzip;
using testing::TempPath;
using testing::WriteFile;

std::unique_ptr<LineParser> MovieLens() { return *NewMovieLensParser({}); }

// `count` rating lines; those whose 1-based number is in `bad` have an
// out-of-range rating.
std::string Ratings(int count, const std::vector<int>& bad = {}) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const bool broken = std::count(bad.begin(), bad.end(), i + 1) > 0;
    absl::StrAppend(&out, i, "\t", 100 + i % 7, "\t", broken ? 9 : 1 + i % 5,
                    "\t", 880000000 + i, "\n");
  }
  return out;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteFile(path, bytes).ok());
  return path;
}

// What a reader per shard streams: the reference the one pass must match.
std::vector<int64_t> CountWithReaders(const TextReaderOptions& o, int n) {
  std::vector<int64_t> counts;
  for (int shard = 0; shard < n; ++shard) {
    auto reader =
        OpenTextReader(o, MovieLens(), {.shard = shard, .num_shards = n});
    EXPECT_TRUE(reader.ok()) << reader.status();
    while (true) {
      absl::StatusOr<Batch> b = (*reader)->Next(64);
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || b->size == 0) break;
    }
    counts.push_back((*reader)->position());
  }
  return counts;
}

TEST(TextCount, MatchesAReaderPerShardForPlainAndGzipFiles) {
  const std::string text = Ratings(1000, {5, 17, 600});
  TextReaderOptions o;
  o.files = {Write("count_plain.data", text),
             Write("count_gz.data.gz", Gzip(text)),
             Write("count_small.data", Ratings(7))};
  o.bad_lines.min_bad_lines = 10;
  for (int n : {1, 2, 3, 8}) {
    ReaderStats stats;
    absl::StatusOr<std::vector<int64_t>> counts =
        CountTextShardExamples(o, MovieLens(), n, &stats);
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(*counts, CountWithReaders(o, n)) << n << " shards";
    EXPECT_EQ(stats.lines, 2007) << n;
    EXPECT_EQ(stats.bad_lines, 6) << n;
    EXPECT_EQ(stats.examples, 2001) << n;
  }
}

TEST(TextCount, DecompressesAGzipFileOnce) {
  const std::string text = Ratings(3000);
  TextReaderOptions o;
  o.files = {Write("count_once.data.gz", Gzip(text))};
  for (int n : {1, 4}) {
    ReaderStats stats;
    absl::StatusOr<std::vector<int64_t>> counts =
        CountTextShardExamples(o, MovieLens(), n, &stats);
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(stats.bytes, static_cast<int64_t>(text.size()))
        << n << " shards: the uncompressed bytes once";
    int64_t sum = 0;
    for (int64_t c : *counts) sum += c;
    EXPECT_EQ(sum, 3000);
  }
}

TEST(TextCount, BadLinesPastThePolicyFailNamingFileAndLine) {
  TextReaderOptions o;
  o.files = {Write("count_bad_plain.data", Ratings(100)),
             Write("count_bad.data.gz", Gzip(Ratings(100, {42})))};
  o.bad_lines.max_fraction = 0;
  for (int n : {1, 3}) {
    ReaderStats stats;
    absl::StatusOr<std::vector<int64_t>> counts =
        CountTextShardExamples(o, MovieLens(), n, &stats);
    ASSERT_FALSE(counts.ok()) << n;
    EXPECT_EQ(counts.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(counts.status().message().find(absl::StrCat(o.files[1], ":42:")),
              std::string::npos)
        << counts.status();
  }
  // A plain file's line numbers count the lines before its shard's range.
  o.files = {Write("count_bad_range.data", Ratings(100, {90}))};
  absl::StatusOr<std::vector<int64_t>> counts =
      CountTextShardExamples(o, MovieLens(), 4, nullptr);
  ASSERT_FALSE(counts.ok());
  EXPECT_NE(counts.status().message().find(absl::StrCat(o.files[0], ":90:")),
            std::string::npos)
      << counts.status();
}

TEST(TextCount, RefusesBadArguments) {
  TextReaderOptions o;
  EXPECT_EQ(CountTextShardExamples(o, MovieLens(), 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "no files";
  o.files = {Write("count_args.data", Ratings(10))};
  EXPECT_EQ(CountTextShardExamples(o, MovieLens(), 0, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CountTextShardExamples(o, nullptr, 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.shard_rule = ShardRule::kWholeFiles;
  EXPECT_EQ(CountTextShardExamples(o, MovieLens(), 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.shard_rule = ShardRule::kWithinFiles;
  o.files = {TempPath("count_missing.data")};
  EXPECT_EQ(CountTextShardExamples(o, MovieLens(), 2, nullptr).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps::worker::data
