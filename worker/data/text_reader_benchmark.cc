// Throughput of the text readers on a generated Criteo file (criteo_gen's
// planted model, 10^6 lines by default, about 245 MB): the line reader alone,
// the full Criteo parse into batches of 1024 from plain and gzip files, with
// a shuffle buffer, and one shard of four. Reports lines/s (items_per_second)
// and uncompressed MB/s (bytes_per_second), from CPU time, so that other
// load on the machine matters less; the wall time is printed too.
//
//   bazel run //worker/data:text_reader_benchmark -- [--lines=1000000]
//       [--dir=/tmp/ps_reader_bench]
//
// The files are generated once into --dir and reused while their size
// matches.
#include <benchmark/benchmark.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/data/criteo_planted.h"
#include "tools/data/output_file.h"
#include "worker/data/batch_reader.h"
#include "worker/data/criteo_format.h"
#include "worker/data/line_reader.h"
#include "worker/data/text_reader.h"

namespace ps::worker::data {
namespace {

int64_t g_lines = 1000000;
std::string g_dir = "/tmp/ps_reader_bench";
std::string g_plain;
std::string g_gzip;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

absl::Status Generate(const std::string& path, int gzip_level) {
  if (Exists(path)) return absl::OkStatus();
  fprintf(stderr, "generating %s\n", path.c_str());
  absl::StatusOr<data_tools::CriteoPlanted> model =
      data_tools::CriteoPlanted::Create({});
  if (!model.ok()) return model.status();
  const std::string partial = path + ".partial";
  absl::StatusOr<std::unique_ptr<data_tools::OutputFile>> file =
      data_tools::OutputFile::Create(partial, gzip_level);
  if (!file.ok()) return file.status();
  std::string chunk;
  for (int64_t i = 0; i < g_lines; ++i) {
    model->Generate(0, i, &chunk);
    chunk.push_back('\n');
    if (chunk.size() > (1 << 20) || i + 1 == g_lines) {
      absl::Status written = (*file)->Write(chunk);
      if (!written.ok()) return written;
      chunk.clear();
    }
  }
  absl::Status closed = (*file)->Close();
  if (!closed.ok()) return closed;
  if (rename(partial.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename to ", path));
  }
  return absl::OkStatus();
}

void BM_LineReader(benchmark::State& state, const std::string* path) {
  int64_t lines = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<LineReader>> reader =
        LineReader::Open(*path, 0, 1);
    if (!reader.ok()) {
      state.SkipWithError(reader.status().ToString().c_str());
      return;
    }
    Line line;
    int64_t n = 0;
    for (;;) {
      absl::StatusOr<bool> got = (*reader)->Next(&line);
      if (!got.ok()) {
        state.SkipWithError(got.status().ToString().c_str());
        return;
      }
      if (!*got) break;
      benchmark::DoNotOptimize(line.text.data());
      ++n;
    }
    lines += n;
    bytes += (*reader)->bytes_read();
  }
  state.SetItemsProcessed(lines);
  state.SetBytesProcessed(bytes);
}

void BM_CriteoReader(benchmark::State& state, const std::string* path,
                     int64_t shuffle_buffer, int num_shards) {
  int64_t lines = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    TextReaderOptions options;
    options.files = {*path};
    options.shuffle_buffer = shuffle_buffer;
    ShardSpec spec;
    spec.num_shards = num_shards;
    absl::StatusOr<std::unique_ptr<BatchReader>> reader =
        OpenTextReader(options, NewCriteoParser({}), spec);
    if (!reader.ok()) {
      state.SkipWithError(reader.status().ToString().c_str());
      return;
    }
    for (;;) {
      absl::StatusOr<Batch> batch = (*reader)->Next(1024);
      if (!batch.ok()) {
        state.SkipWithError(batch.status().ToString().c_str());
        return;
      }
      if (batch->size == 0) break;
      benchmark::DoNotOptimize(batch->sparse[0].keys.data());
    }
    const ReaderStats stats = (*reader)->stats();
    if (stats.bad_lines != 0) state.SkipWithError("bad lines");
    lines += stats.lines;
    bytes += stats.bytes;
  }
  state.SetItemsProcessed(lines);
  state.SetBytesProcessed(bytes);
}

void Register() {
  benchmark::RegisterBenchmark("LineReader/plain", BM_LineReader, &g_plain)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("LineReader/gzip", BM_LineReader, &g_gzip)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2);
  benchmark::RegisterBenchmark("CriteoReader/plain", BM_CriteoReader, &g_plain,
                               0, 1)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("CriteoReader/gzip", BM_CriteoReader, &g_gzip, 0,
                               1)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2);
  benchmark::RegisterBenchmark("CriteoReader/plain_shuffle100k",
                               BM_CriteoReader, &g_plain, 100000, 1)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2);
  benchmark::RegisterBenchmark("CriteoReader/plain_shard0of4", BM_CriteoReader,
                               &g_plain, 0, 4)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
}

}  // namespace
}  // namespace ps::worker::data

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--lines=", 0) == 0 &&
        absl::SimpleAtoi(arg.substr(8), &ps::worker::data::g_lines) &&
        ps::worker::data::g_lines > 0) {
      continue;
    }
    if (arg.rfind("--dir=", 0) == 0) {
      ps::worker::data::g_dir = arg.substr(6);
      continue;
    }
    fprintf(stderr, "unknown argument %s (--lines=N, --dir=PATH)\n",
            arg.c_str());
    return 2;
  }
  using ps::worker::data::g_dir;
  using ps::worker::data::g_lines;
  mkdir(g_dir.c_str(), 0755);
  ps::worker::data::g_plain = absl::StrCat(g_dir, "/criteo_", g_lines, ".txt");
  ps::worker::data::g_gzip =
      absl::StrCat(g_dir, "/criteo_", g_lines, ".txt.gz");
  for (const auto& [path, level] : {std::pair{ps::worker::data::g_plain, 0},
                                    std::pair{ps::worker::data::g_gzip, 1}}) {
    absl::Status status = ps::worker::data::Generate(path, level);
    if (!status.ok()) {
      fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
  }
  ps::worker::data::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
