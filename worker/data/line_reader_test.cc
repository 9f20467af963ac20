#include "worker/data/line_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/data_test_util.h"

namespace ps::worker::data {
namespace {

using ::testing::ElementsAre;
using testing::Gzip;
using ::testing::HasSubstr;
using testing::TempPath;
using testing::WriteFile;

struct ReadLine {
  std::string text;
  int64_t index;
  bool too_long;
  bool operator==(const ReadLine& o) const {
    return text == o.text && index == o.index && too_long == o.too_long;
  }
};

absl::StatusOr<std::vector<ReadLine>> ReadShard(
    const std::string& path, int shard, int num_shards,
    const LineReaderOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<LineReader>> reader =
      LineReader::Open(path, shard, num_shards, options);
  if (!reader.ok()) return reader.status();
  std::vector<ReadLine> lines;
  Line line;
  for (;;) {
    absl::StatusOr<bool> got = (*reader)->Next(&line);
    if (!got.ok()) return got.status();
    if (!*got) return lines;
    lines.push_back({std::string(line.text), line.index, line.too_long});
  }
}

std::vector<std::string> Texts(const std::vector<ReadLine>& lines) {
  std::vector<std::string> texts;
  for (const ReadLine& line : lines) texts.push_back(line.text);
  return texts;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteFile(path, bytes).ok());
  return path;
}

TEST(LineReader, LineEndingsPlainAndGzip) {
  struct Case {
    const char* name;
    std::string bytes;
    std::vector<std::string> lines;
  };
  const std::vector<Case> cases = {
      {"trailing newline", "a\nbb\n", {"a", "bb"}},
      {"no trailing newline", "a\nbb", {"a", "bb"}},
      {"crlf", "a\r\nbb\r\n", {"a", "bb"}},
      {"crlf without trailing newline", "a\r\nbb", {"a", "bb"}},
      {"mixed", "a\r\nbb\ncc\r\n", {"a", "bb", "cc"}},
      {"empty lines kept", "a\n\n\nb\n", {"a", "", "", "b"}},
      {"lone cr is text", "a\rb\n", {"a\rb"}},
      {"only a newline", "\n", {""}},
      {"empty file", "", {}},
  };
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      const std::string path =
          Write(gz ? "lines.gz" : "lines.txt", gz ? Gzip(c.bytes) : c.bytes);
      absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(path, 0, 1);
      ASSERT_TRUE(lines.ok()) << c.name << ": " << lines.status();
      EXPECT_EQ(Texts(*lines), c.lines) << c.name << (gz ? " (gzip)" : "");
      for (size_t i = 0; i < lines->size(); ++i) {
        EXPECT_EQ((*lines)[i].index, static_cast<int64_t>(i)) << c.name;
      }
    }
  }
}

TEST(LineReader, DetectsGzipByContentNotName) {
  const std::string gz_named_txt = Write("x.txt", Gzip("one\ntwo\n"));
  const std::string plain_named_gz = Write("x.gz", "one\ntwo\n");
  for (const std::string& path : {gz_named_txt, plain_named_gz}) {
    absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(path, 0, 1);
    ASSERT_TRUE(lines.ok()) << lines.status();
    EXPECT_THAT(Texts(*lines), ElementsAre("one", "two"));
  }
  absl::StatusOr<std::unique_ptr<LineReader>> gz =
      LineReader::Open(gz_named_txt, 0, 1);
  ASSERT_TRUE(gz.ok());
  EXPECT_TRUE((*gz)->interleaved());
}

TEST(LineReader, ReadsConcatenatedGzipMembers) {
  const std::string path = Write("cat.gz", Gzip("a\nb\n") + Gzip("c\n"));
  absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(path, 0, 1);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_THAT(Texts(*lines), ElementsAre("a", "b", "c"));
}

TEST(LineReader, LinesLongerThanABlockAndTooLongLines) {
  const std::string long_line(1000, 'x');
  const std::string too_long(5000, 'y');
  const std::string bytes =
      absl::StrCat("a\n", long_line, "\r\n", too_long, "\nb\n", too_long);
  LineReaderOptions options;
  options.block_bytes = 7;  // every line crosses blocks
  options.max_line_bytes = 2000;
  for (bool gz : {false, true}) {
    const std::string path = Write("long", gz ? Gzip(bytes) : bytes);
    absl::StatusOr<std::vector<ReadLine>> lines =
        ReadShard(path, 0, 1, options);
    ASSERT_TRUE(lines.ok()) << lines.status();
    EXPECT_THAT(
        *lines,
        ElementsAre(ReadLine{"a", 0, false}, ReadLine{long_line, 1, false},
                    ReadLine{"", 2, true}, ReadLine{"b", 3, false},
                    ReadLine{"", 4, true}));
  }
}

// Shards of every count cover every line exactly once, in file order within
// each shard, and a line's index is its 0-based number from range_begin.
TEST(LineReader, ShardsPartitionTheLines) {
  std::string bytes;
  std::vector<std::string> all;
  for (int i = 0; i < 101; ++i) {
    // Lines of varied length, some empty, CRLF on some.
    all.push_back(std::string(i % 13, static_cast<char>('a' + i % 26)) +
                  std::to_string(i));
    absl::StrAppend(&bytes, all.back(), i % 3 == 0 ? "\r\n" : "\n");
  }
  LineReaderOptions options;
  options.block_bytes = 64;
  for (bool gz : {false, true}) {
    const std::string path = Write("shards", gz ? Gzip(bytes) : bytes);
    for (int n = 1; n <= 9; ++n) {
      std::vector<int> owner(all.size(), -1);
      for (int k = 0; k < n; ++k) {
        absl::StatusOr<std::unique_ptr<LineReader>> reader =
            LineReader::Open(path, k, n, options);
        ASSERT_TRUE(reader.ok()) << reader.status();
        absl::StatusOr<int64_t> before =
            CountLinesBefore(path, (*reader)->range_begin());
        ASSERT_TRUE(before.ok());
        if (gz) {
          EXPECT_EQ((*reader)->range_begin(), 0);
        }
        Line line;
        int64_t last = -1;
        for (;;) {
          absl::StatusOr<bool> got = (*reader)->Next(&line);
          ASSERT_TRUE(got.ok()) << got.status();
          if (!*got) break;
          const int64_t number = *before + line.index;
          ASSERT_LT(number, static_cast<int64_t>(all.size()));
          EXPECT_GT(number, last) << "out of order";
          last = number;
          EXPECT_EQ(line.text, all[number]);
          EXPECT_EQ(owner[number], -1) << "line " << number << " twice";
          owner[number] = k;
          if (gz) {
            EXPECT_EQ(number % n, k);
          }
        }
      }
      for (size_t i = 0; i < all.size(); ++i) {
        EXPECT_NE(owner[i], -1) << "line " << i << " of " << n << " shards";
      }
    }
  }
}

TEST(LineReader, ByteRangesSplitAPlainFileEvenly) {
  std::string bytes;
  for (int i = 0; i < 1000; ++i)
    absl::StrAppend(&bytes, "line ", 1000 + i, "\n");
  const std::string path = Write("even.txt", bytes);
  for (int k = 0; k < 4; ++k) {
    absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(path, k, 4);
    ASSERT_TRUE(lines.ok());
    EXPECT_EQ(lines->size(), 250u) << "shard " << k;
  }
  // A range that holds no line start: more shards than lines.
  const std::string two = Write("two.txt", "aaaaaaaaaa\nbbbbbbbbbb\n");
  int total = 0;
  for (int k = 0; k < 11; ++k) {
    absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(two, k, 11);
    ASSERT_TRUE(lines.ok());
    total += lines->size();
  }
  EXPECT_EQ(total, 2);
}

TEST(LineReader, CountLinesBefore) {
  const std::string path = Write("count.txt", "a\nbb\n\nccc\n");
  EXPECT_EQ(*CountLinesBefore(path, 0), 0);
  EXPECT_EQ(*CountLinesBefore(path, 2), 1);
  EXPECT_EQ(*CountLinesBefore(path, 6), 3);
  EXPECT_EQ(*CountLinesBefore(path, 1000), 4);
}

TEST(LineReader, BrokenGzipIsDataLoss) {
  std::string text;
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&text, "line ", i, "\n");
  const std::string gz = Gzip(text);
  const std::string truncated = Write("cut.gz", gz.substr(0, gz.size() / 2));
  absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(truncated, 0, 1);
  EXPECT_TRUE(absl::IsDataLoss(lines.status())) << lines.status();
  EXPECT_THAT(std::string(lines.status().message()), HasSubstr(truncated));

  std::string corrupt = gz;
  for (size_t i = 20; i < corrupt.size() - 8; i += 7) corrupt[i] ^= 0x5a;
  const std::string corrupt_path = Write("corrupt.gz", corrupt);
  lines = ReadShard(corrupt_path, 0, 1);
  EXPECT_TRUE(absl::IsDataLoss(lines.status())) << lines.status();
}

TEST(LineReader, OpenErrors) {
  EXPECT_TRUE(
      absl::IsNotFound(LineReader::Open(TempPath("missing"), 0, 1).status()));
  const char* dir = getenv("TEST_TMPDIR");
  EXPECT_TRUE(absl::IsInvalidArgument(
      LineReader::Open(dir != nullptr ? dir : "/tmp", 0, 1).status()));
  const std::string path = Write("ok.txt", "a\n");
  EXPECT_TRUE(absl::IsInvalidArgument(LineReader::Open(path, 2, 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LineReader::Open(path, 0, 0).status()));
  LineReaderOptions zero_block;
  zero_block.block_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(
      LineReader::Open(path, 0, 1, zero_block).status()));
}

// A pipe cannot seek: it is dealt line by line, like gzip.
TEST(LineReader, ReadsAPipe) {
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Open the write end without blocking once the reader has opened it.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = open(fifo.c_str(), O_WRONLY);
    const char text[] = "p\nq\r\nr";
    const bool ok = fd >= 0 && write(fd, text, sizeof(text) - 1) ==
                                   static_cast<ssize_t>(sizeof(text) - 1);
    _exit(ok ? 0 : 1);
  }
  absl::StatusOr<std::vector<ReadLine>> lines = ReadShard(fifo, 1, 2);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_THAT(*lines, ElementsAre(ReadLine{"q", 1, false}));
}

}  // namespace
}  // namespace ps::worker::data
