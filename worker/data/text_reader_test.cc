#include "worker/data/text_reader.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_format.h"
#include "worker/data/data_test_util.h"
#include "worker/data/libsvm_format.h"
#include "worker/data/movielens_format.h"

namespace ps::worker::data {
namespace {

using ::testing::ElementsAre;
using testing::ExampleString;
using testing::Gzip;
using ::testing::HasSubstr;
using testing::ReadAll;
using testing::TempPath;
using testing::WriteFile;

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteFile(path, bytes).ok());
  return path;
}

std::unique_ptr<LineParser> MovieLens() { return *NewMovieLensParser({}); }

// `count` rating lines whose user ids are first_user, first_user + 1, ...:
// every example is distinct. Lines whose number is in `bad` get a rating of
// 9 (out of range).
std::string Ratings(int first_user, int count, const std::vector<int>& bad = {},
                    const char* ending = "\n") {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const bool broken = std::count(bad.begin(), bad.end(), i + 1) > 0;
    absl::StrAppend(&out, first_user + i, "\t", 100 + i % 7, "\t",
                    broken ? 9 : 1 + i % 5, "\t", 880000000 + i, ending);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadShard(
    const TextReaderOptions& options, std::unique_ptr<LineParser> parser,
    const ShardSpec& spec, int batch_size = 7) {
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, std::move(parser), spec);
  if (!reader.ok()) return reader.status();
  return ReadAll(**reader, batch_size);
}

// What each line parses to on its own, in file order.
std::vector<std::string> Expected(LineParser& parser,
                                  const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const std::string& line : lines) {
    BatchBuilder builder(parser.schema());
    if (!parser.Parse(line, &builder).ok()) continue;
    out.push_back(ExampleString(builder.Take(), 0));
  }
  return out;
}

TEST(TextReader, StreamsCriteoLinesInFileOrder) {
  std::vector<std::string> lines;
  std::string bytes;
  for (int i = 0; i < 25; ++i) {
    std::vector<std::string> fields = {i % 4 == 0 ? "1" : "0"};
    for (int j = 0; j < 13; ++j) {
      fields.push_back((i + j) % 6 == 0 ? "" : std::to_string(i * j));
    }
    for (int f = 0; f < 26; ++f) {
      fields.push_back((i + f) % 9 == 0 ? ""
                                        : absl::StrFormat("%08x", i * 31 + f));
    }
    lines.push_back(absl::StrJoin(fields, "\t"));
    // CRLF on some lines, and no newline after the last.
    absl::StrAppend(&bytes, lines.back(), i == 24 ? "" : i % 2 ? "\r\n" : "\n");
  }
  TextReaderOptions options;
  options.files = {Write("criteo.txt", bytes)};
  std::unique_ptr<LineParser> parser = NewCriteoParser({});
  const std::vector<std::string> want = Expected(*parser, lines);
  ASSERT_EQ(want.size(), 25u);
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, std::move(parser), {});
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->schema().sparse.size(), 26u);
  absl::StatusOr<std::vector<std::string>> got = ReadAll(**reader, 7);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  const ReaderStats stats = (*reader)->stats();
  EXPECT_EQ(stats.lines, 25);
  EXPECT_EQ(stats.examples, 25);
  EXPECT_EQ(stats.bad_lines, 0);
  EXPECT_EQ(stats.bytes, static_cast<int64_t>(bytes.size()));
  // Exhausted: empty batches from now on.
  absl::StatusOr<Batch> more = (*reader)->Next(7);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->size, 0);
}

TEST(TextReader, ReadsMovieLensTrainAndTestFilesInBothSeparators) {
  // ml-100k's u1.base / u1.test (tab, LF) and ml-1m's ratings.dat ("::"),
  // here with CRLF endings and a missing final newline.
  const std::string base =
      Write("u1.base", "1\t1\t5\t874965758\n1\t2\t3\t876893171\n");
  const std::string test = Write("u1.test", "1\t6\t5\t887431973\n");
  const std::string dat =
      Write("ratings.dat", "1::1193::5::978300760\r\n2::661::3::978302109");
  for (const auto& [files, users] :
       std::vector<std::pair<std::vector<std::string>, std::vector<uint64_t>>>{
           {{base}, {1, 1}}, {{test}, {1}}, {{dat, base}, {1, 2, 1, 1}}}) {
    TextReaderOptions options;
    options.files = files;
    absl::StatusOr<std::unique_ptr<BatchReader>> reader =
        OpenTextReader(options, MovieLens(), {});
    ASSERT_TRUE(reader.ok());
    absl::StatusOr<Batch> batch = (*reader)->Next(100);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->sparse[0].keys, users);
    EXPECT_EQ((*reader)->stats().bad_lines, 0);
  }
}

TEST(TextReader, ReadsLibsvm) {
  const std::string path =
      Write("a.svm", "+1 1:0.5 3:1\r\n-1 qid:2 2:1.5 # c\r\n0 7:2\n");
  TextReaderOptions options;
  options.files = {path};
  absl::StatusOr<std::vector<std::string>> got =
      ReadShard(options, *NewLibsvmParser({}), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre("y=1 features=1:0.5,3:1", "y=0 features=2:1.5",
                                "y=0 features=7:2"));
}

// Every line of every file lands in exactly one shard, for both rules and a
// mix of plain and gzip files.
TEST(TextReader, ShardsCoverEveryLineOnce) {
  const std::vector<std::string> files = {
      Write("r0.txt", Ratings(0, 37)), Write("r1.gz", Gzip(Ratings(1000, 23))),
      Write("r2.txt", Ratings(2000, 1)), Write("r3.gz", Gzip(""))};
  TextReaderOptions all_options;
  all_options.files = files;
  absl::StatusOr<std::vector<std::string>> all =
      ReadShard(all_options, MovieLens(), {});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 61u);
  std::vector<std::string> sorted_all = *all;
  std::sort(sorted_all.begin(), sorted_all.end());

  for (ShardRule rule : {ShardRule::kWithinFiles, ShardRule::kWholeFiles}) {
    for (int n = 1; n <= 6; ++n) {
      std::vector<std::string> union_of_shards;
      for (int k = 0; k < n; ++k) {
        TextReaderOptions options;
        options.files = files;
        options.shard_rule = rule;
        options.line_reader.block_bytes = 16;
        ShardSpec spec;
        spec.shard = k;
        spec.num_shards = n;
        absl::StatusOr<std::vector<std::string>> got =
            ReadShard(options, MovieLens(), spec, 5);
        ASSERT_TRUE(got.ok()) << got.status();
        union_of_shards.insert(union_of_shards.end(), got->begin(), got->end());
      }
      std::sort(union_of_shards.begin(), union_of_shards.end());
      EXPECT_EQ(union_of_shards, sorted_all)
          << "rule " << static_cast<int>(rule) << ", " << n << " shards";
    }
  }
}

TEST(TextReader, ShuffleIsAPermutationFixedBySeedEpochAndShard) {
  TextReaderOptions options;
  options.files = {Write("s.txt", Ratings(0, 200))};
  absl::StatusOr<std::vector<std::string>> in_order =
      ReadShard(options, MovieLens(), {});
  ASSERT_TRUE(in_order.ok());

  options.shuffle_buffer = 16;
  options.seed = 42;
  ShardSpec epoch0;
  ShardSpec epoch1;
  epoch1.epoch = 1;
  absl::StatusOr<std::vector<std::string>> a =
      ReadShard(options, MovieLens(), epoch0);
  absl::StatusOr<std::vector<std::string>> b =
      ReadShard(options, MovieLens(), epoch0, 13);
  absl::StatusOr<std::vector<std::string>> c =
      ReadShard(options, MovieLens(), epoch1);
  options.seed = 43;
  absl::StatusOr<std::vector<std::string>> d =
      ReadShard(options, MovieLens(), epoch0);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(*a, *b) << "the batch size changed the order";
  EXPECT_NE(*a, *in_order);
  EXPECT_NE(*a, *c);
  EXPECT_NE(*a, *d);
  for (const auto* order : {&*a, &*c, &*d}) {
    std::vector<std::string> sorted = *order;
    std::vector<std::string> want = *in_order;
    std::sort(sorted.begin(), sorted.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(sorted, want);
  }
  // A line moves at most about the buffer's size earlier than in file
  // order: line i cannot come out before line i - 16 has entered.
  for (size_t out = 0; out < a->size(); ++out) {
    const size_t in = std::find(in_order->begin(), in_order->end(), (*a)[out]) -
                      in_order->begin();
    EXPECT_LE(in, out + 16) << (*a)[out];
  }
}

// The guarantee a survivor needs to finish a dead worker's shard: opening
// shard k with start_example = n gives exactly the rest of the stream,
// with shuffling, bad lines, several files and byte ranges in play.
TEST(TextReader, ResumesAShardAtAnyExample) {
  TextReaderOptions options;
  options.files = {Write("m0.txt", Ratings(0, 50, {3, 20, 21})),
                   Write("m1.gz", Gzip(Ratings(500, 40, {1})))};
  options.shuffle_buffer = 8;
  options.seed = 9;
  options.bad_lines.max_fraction = 1.0;
  for (int k = 0; k < 3; ++k) {
    ShardSpec spec;
    spec.shard = k;
    spec.num_shards = 3;
    spec.epoch = 2;
    absl::StatusOr<std::vector<std::string>> full =
        ReadShard(options, MovieLens(), spec);
    ASSERT_TRUE(full.ok()) << full.status();
    const int64_t size = full->size();
    ASSERT_GT(size, 15);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{6}, int64_t{7},
                      int64_t{8}, size / 2, size - 1, size}) {
      spec.start_example = n;
      absl::StatusOr<std::unique_ptr<BatchReader>> reader =
          OpenTextReader(options, MovieLens(), spec);
      ASSERT_TRUE(reader.ok());
      EXPECT_EQ((*reader)->position(), n);
      absl::StatusOr<std::vector<std::string>> rest = ReadAll(**reader, 4);
      ASSERT_TRUE(rest.ok()) << "n = " << n << ": " << rest.status();
      EXPECT_EQ(*rest, std::vector<std::string>(full->begin() + n, full->end()))
          << "shard " << k << " from " << n;
      EXPECT_EQ((*reader)->position(), size);
    }
    // Past the end: an empty stream, positioned at the shard's length.
    spec.start_example = size + 5;
    absl::StatusOr<std::unique_ptr<BatchReader>> reader =
        OpenTextReader(options, MovieLens(), spec);
    ASSERT_TRUE(reader.ok());
    absl::StatusOr<Batch> batch = (*reader)->Next(4);
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(batch->size, 0);
    EXPECT_EQ((*reader)->position(), size);
  }
}

TEST(TextReader, BadLinesAreCountedWithFileAndLine) {
  // Bad lines 3, 17 and 30 of a plain file and 2 of a gzip file, read as
  // shard 1 of 2 (so the plain file is read from the middle) and as shard 0.
  const std::string plain = Write("bad.txt", Ratings(0, 40, {3, 17, 30}));
  const std::string gz = Write("bad.gz", Gzip(Ratings(100, 6, {2})));
  std::vector<std::string> samples;
  int64_t bad = 0;
  int64_t lines = 0;
  for (int k = 0; k < 2; ++k) {
    TextReaderOptions options;
    options.files = {plain, gz};
    options.bad_lines.max_fraction = 1.0;
    ShardSpec spec;
    spec.shard = k;
    spec.num_shards = 2;
    absl::StatusOr<std::unique_ptr<BatchReader>> reader =
        OpenTextReader(options, MovieLens(), spec);
    ASSERT_TRUE(reader.ok());
    ASSERT_TRUE(ReadAll(**reader, 3).ok());
    const ReaderStats stats = (*reader)->stats();
    bad += stats.bad_lines;
    lines += stats.lines;
    EXPECT_EQ(stats.examples, stats.lines - stats.bad_lines);
    samples.insert(samples.end(), stats.bad_line_samples.begin(),
                   stats.bad_line_samples.end());
  }
  EXPECT_EQ(bad, 4);
  EXPECT_EQ(lines, 46);
  const std::string reason = ": rating '9' is outside [0.5, 5]";
  std::vector<std::string> want = {plain + ":3" + reason,
                                   plain + ":17" + reason,
                                   plain + ":30" + reason, gz + ":2" + reason};
  std::sort(samples.begin(), samples.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(samples, want);
}

TEST(TextReader, TooManyBadLinesIsAnErrorThatStays) {
  TextReaderOptions options;
  options.files = {Write("many.txt", Ratings(0, 100, {5, 9, 10, 11, 12}))};
  options.bad_lines.max_fraction = 0.03;
  options.bad_lines.min_lines = 100;
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, MovieLens(), {});
  ASSERT_TRUE(reader.ok());
  absl::Status status;
  int batches = 0;
  for (; batches < 100 && status.ok(); ++batches) {
    absl::StatusOr<Batch> batch = (*reader)->Next(4);
    status = batch.status();
  }
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  // The 4th bad line (line 11) is over 3% of 100.
  EXPECT_EQ((*reader)->stats().lines, 11);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("movielens: 4 bad lines out of 11 read"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("many.txt:5: rating"));
  EXPECT_EQ((*reader)->Next(4).status(), status);
}

TEST(TextReader, TheFractionOfAShortFileIsCheckedAtItsEnd) {
  TextReaderOptions options;
  options.files = {Write("short.txt", Ratings(0, 5, {2}))};
  options.bad_lines.max_fraction = 0.1;  // 1 of 1000 early; 1 of 5 at the end
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, MovieLens(), {});
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<Batch> batch = (*reader)->Next(2);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->size, 2);
  batch = (*reader)->Next(10);
  EXPECT_TRUE(absl::IsInvalidArgument(batch.status())) << batch.status();
  EXPECT_THAT(std::string(batch.status().message()),
              HasSubstr("1 bad lines out of 5 read (20%)"));
}

TEST(TextReader, OverlongLinesAreBadLines) {
  TextReaderOptions options;
  options.files = {Write(
      "long.txt",
      absl::StrCat(Ratings(0, 2), std::string(300, '7'), "\n", Ratings(2, 2)))};
  options.line_reader.max_line_bytes = 100;
  options.bad_lines.max_fraction = 1.0;
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, MovieLens(), {});
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<std::vector<std::string>> got = ReadAll(**reader, 10);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 4u);
  ASSERT_EQ((*reader)->stats().bad_line_samples.size(), 1u);
  EXPECT_THAT((*reader)->stats().bad_line_samples[0],
              HasSubstr("long.txt:3: line longer than 100 bytes"));
}

TEST(TextReader, OpenErrors) {
  TextReaderOptions options;
  EXPECT_TRUE(absl::IsInvalidArgument(
      OpenTextReader(options, MovieLens(), {}).status()));
  options.files = {Write("ok.txt", Ratings(0, 3)), TempPath("missing.txt")};
  absl::Status missing = OpenTextReader(options, MovieLens(), {}).status();
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("missing.txt"));
  options.files.pop_back();
  EXPECT_TRUE(
      absl::IsInvalidArgument(OpenTextReader(options, nullptr, {}).status()));
  ShardSpec bad_spec;
  bad_spec.shard = 3;
  bad_spec.num_shards = 3;
  EXPECT_TRUE(absl::IsInvalidArgument(
      OpenTextReader(options, MovieLens(), bad_spec).status()));
  options.shuffle_buffer = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(
      OpenTextReader(options, MovieLens(), {}).status()));
  options.shuffle_buffer = 0;
  options.bad_lines.max_fraction = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(
      OpenTextReader(options, MovieLens(), {}).status()));
  options.bad_lines.max_fraction = 0;
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, MovieLens(), {});
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*reader)->Next(0).status()));
}

TEST(TextReader, CorruptGzipIsDataLoss) {
  const std::string gz = Gzip(Ratings(0, 3000));
  TextReaderOptions options;
  options.files = {Write("cut.gz", gz.substr(0, gz.size() - 100))};
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      OpenTextReader(options, MovieLens(), {});
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<std::vector<std::string>> got = ReadAll(**reader, 64);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
}

}  // namespace
}  // namespace ps::worker::data
