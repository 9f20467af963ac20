// data_check: streams data files through the worker's reader, as one shard
// of a job would, and reports what it found (lines, examples, bad lines with
// file:line), how fast (lines/s, MB/s) and the process's peak memory. For
// checking a data set before a job, and for measuring the readers.
//
//   bazel run //tools/data:data_check -- --format=criteo /tmp/ctr/train.txt
//
// Exit status: 0 if the data read cleanly within --max_bad_fraction, 1 if
// the reader failed (the message says why), 2 on bad flags.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/data/batch_reader.h"
#include "worker/data/criteo_format.h"
#include "worker/data/libsvm_format.h"
#include "worker/data/movielens_format.h"
#include "worker/data/text_reader.h"

ABSL_FLAG(std::string, format, "", "criteo, libsvm or movielens.");
ABSL_FLAG(int, shard, 0, "Data shard to read.");
ABSL_FLAG(int, num_shards, 1, "Number of data shards.");
ABSL_FLAG(int64_t, epoch, 0, "Epoch (changes the shuffled order).");
ABSL_FLAG(int64_t, start_example, 0, "Resume the shard at this example.");
ABSL_FLAG(bool, whole_files, false,
          "Shard by whole files (file i to shard i % n) instead of within "
          "files.");
ABSL_FLAG(int64_t, shuffle_buffer, 0, "Lines in the shuffle buffer.");
ABSL_FLAG(uint64_t, seed, 0, "Shuffle seed.");
ABSL_FLAG(int, batch, 1024, "Examples per batch.");
ABSL_FLAG(double, max_bad_fraction, 0.001, "Bad lines tolerated.");
ABSL_FLAG(bool, no_label, false, "criteo: files without a label column.");

namespace ps::data_tools {
namespace {

using worker::data::Batch;
using worker::data::BatchReader;
using worker::data::LineParser;
using worker::data::ReaderStats;

// A line of /proc/self/status in kB ("VmHWM:  12345 kB"), or -1.
int64_t ProcStatusKb(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, key + ":")) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    int64_t kb = -1;
    return absl::SimpleAtoi(digits, &kb) ? kb : -1;
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<LineParser>> Parser(const std::string& format) {
  if (format == "criteo") {
    worker::data::CriteoOptions options;
    options.has_label = !absl::GetFlag(FLAGS_no_label);
    return worker::data::NewCriteoParser(options);
  }
  if (format == "libsvm") return worker::data::NewLibsvmParser({});
  if (format == "movielens") return worker::data::NewMovieLensParser({});
  return absl::InvalidArgumentError(absl::StrCat(
      "--format must be criteo, libsvm or movielens, got '", format, "'"));
}

int Run(const std::vector<std::string>& files) {
  absl::StatusOr<std::unique_ptr<LineParser>> parser =
      Parser(absl::GetFlag(FLAGS_format));
  if (!parser.ok() || files.empty() || absl::GetFlag(FLAGS_batch) < 1) {
    fprintf(stderr, "data_check: %s\n",
            !parser.ok() ? parser.status().ToString().c_str()
                         : "need data files and --batch >= 1");
    return 2;
  }
  worker::data::TextReaderOptions options;
  options.files = files;
  options.shard_rule = absl::GetFlag(FLAGS_whole_files)
                           ? worker::data::ShardRule::kWholeFiles
                           : worker::data::ShardRule::kWithinFiles;
  options.shuffle_buffer = absl::GetFlag(FLAGS_shuffle_buffer);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.bad_lines.max_fraction = absl::GetFlag(FLAGS_max_bad_fraction);
  worker::data::ShardSpec spec;
  spec.shard = absl::GetFlag(FLAGS_shard);
  spec.num_shards = absl::GetFlag(FLAGS_num_shards);
  spec.epoch = absl::GetFlag(FLAGS_epoch);
  spec.start_example = absl::GetFlag(FLAGS_start_example);
  absl::StatusOr<std::unique_ptr<BatchReader>> reader =
      worker::data::OpenTextReader(options, *std::move(parser), spec);
  if (!reader.ok()) {
    fprintf(stderr, "data_check: %s\n", reader.status().ToString().c_str());
    return absl::IsInvalidArgument(reader.status()) ? 2 : 1;
  }

  const absl::Time start = absl::Now();
  int64_t batches = 0;
  int64_t ids = 0;
  absl::Status status;
  for (;;) {
    absl::StatusOr<Batch> batch = (*reader)->Next(absl::GetFlag(FLAGS_batch));
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
    if (batch->size == 0) break;
    ++batches;
    for (const auto& field : batch->sparse) ids += field.keys.size();
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const ReaderStats stats = (*reader)->stats();
  printf("files: %zu, shard %d of %d, shuffle buffer %lld\n", files.size(),
         spec.shard, spec.num_shards,
         static_cast<long long>(options.shuffle_buffer));
  printf(
      "lines: %lld, examples: %lld, bad lines: %lld, batches: %lld, "
      "sparse ids: %lld\n",
      static_cast<long long>(stats.lines),
      static_cast<long long>(stats.examples),
      static_cast<long long>(stats.bad_lines), static_cast<long long>(batches),
      static_cast<long long>(ids));
  for (const std::string& sample : stats.bad_line_samples) {
    printf("  bad: %s\n", sample.c_str());
  }
  printf("seconds: %.3f, lines/s: %.0f, MB/s (uncompressed): %.1f\n", seconds,
         seconds > 0 ? stats.lines / seconds : 0.0,
         seconds > 0 ? stats.bytes / seconds / 1e6 : 0.0);
  printf("peak RSS: %.1f MB (VmHWM), RSS now: %.1f MB\n",
         ProcStatusKb("VmHWM") / 1024.0, ProcStatusKb("VmRSS") / 1024.0);
  if (!status.ok()) {
    printf("error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ps::data_tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Streams data files through the worker's reader and reports lines, "
      "bad lines, speed and peak memory.\n"
      "  data_check --format=criteo|libsvm|movielens [--num_shards=N "
      "--shard=K] [--shuffle_buffer=L] FILE...");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  return ps::data_tools::Run(
      std::vector<std::string>(rest.begin() + 1, rest.end()));
}
