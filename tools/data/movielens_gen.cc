// movielens_gen: writes ratings in the MovieLens format from planted
// low-rank factors plus noise (tools/data/ratings_planted.h): a train and a
// test file, and truth.json with the noise-floor RMSE on the test file (the
// RMSE of the best possible predictor, E[rating | user, item]).
//
//   bazel run //tools/data:movielens_gen -- --out_dir=/tmp/ml
//       [--train_lines=80000 --test_lines=20000] [--separator=colons]
//
// Output: OUT_DIR/train.txt and OUT_DIR/test.txt with tabs (as ml-100k's
// u1.base / u1.test), or train.dat and test.dat with "::" (as ml-1m's
// ratings.dat); .gz added with --gzip_level; and OUT_DIR/truth.json.
// Deterministic: the same flags give the same bytes. Exit status 0, 1 on an
// I/O error, 2 on bad flags.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/spec/eval_metrics.h"
#include "tools/data/output_file.h"
#include "tools/data/progress.h"
#include "tools/data/ratings_planted.h"

ABSL_FLAG(std::string, out_dir, "",
          "Directory for train, test and truth.json (must exist).");
ABSL_FLAG(int64_t, train_lines, 80000, "Ratings in the train file.");
ABSL_FLAG(int64_t, test_lines, 20000, "Ratings in the test file.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the model and the data.");
ABSL_FLAG(int64_t, users, 943, "Users (ids 1..N).");
ABSL_FLAG(int64_t, items, 1682, "Items (ids 1..N).");
ABSL_FLAG(int, rank, 8, "Rank of the planted user and item factors.");
ABSL_FLAG(double, noise_sd, 0.7, "Standard deviation of the rating noise.");
ABSL_FLAG(double, interaction_sd, 0.6,
          "Standard deviation of the factors' dot product.");
ABSL_FLAG(double, user_zipf, 0.5,
          "Zipf exponent of user activity (0: "
          "uniform).");
ABSL_FLAG(double, item_zipf, 0.9,
          "Zipf exponent of item popularity (0: "
          "uniform).");
ABSL_FLAG(bool, half_stars, false,
          "Ratings 0.5..5 in half stars instead of whole stars 1..5.");
ABSL_FLAG(std::string, separator, "tab",
          "tab (ml-100k u.data) or colons (ml-1m ratings.dat, '::').");
ABSL_FLAG(int, gzip_level, 0, "0: plain text; 1..9: gzip at that level.");
ABSL_FLAG(bool, progress, true, "Progress on stderr every 2 s.");

namespace ps::data_tools {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

// What the test file says about predictors.
struct TestStats {
  Rmse best;   // E[rating | user, item]: the noise floor
  Rmse score;  // the planted score before noise and rounding
  double sum = 0.0;
  double sum_squares = 0.0;
};

absl::Status WriteSplit(const RatingsPlanted& model, int stream, int64_t lines,
                        const std::string& path, TestStats* stats) {
  absl::StatusOr<std::unique_ptr<OutputFile>> file =
      OutputFile::Create(path, absl::GetFlag(FLAGS_gzip_level));
  if (!file.ok()) return file.status();
  Progress progress(absl::StrCat("movielens_gen ", path), lines,
                    absl::GetFlag(FLAGS_progress));
  std::string chunk;
  chunk.reserve(kChunkBytes + 256);
  for (int64_t i = 0; i < lines; ++i) {
    const RatingsPlanted::Rating r = model.Generate(stream, i, &chunk);
    chunk.push_back('\n');
    if (stats != nullptr) {
      stats->best.Add(r.expected, r.rating);
      stats->score.Add(r.score, r.rating);
      stats->sum += r.rating;
      stats->sum_squares += r.rating * r.rating;
    }
    if (chunk.size() >= kChunkBytes) {
      absl::Status written = (*file)->Write(chunk);
      if (!written.ok()) return written;
      chunk.clear();
    }
    progress.Update(i + 1);
  }
  absl::Status written = (*file)->Write(chunk);
  if (!written.ok()) return written;
  progress.Finish(lines);
  return (*file)->Close();
}

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_out_dir);
  const int64_t train_lines = absl::GetFlag(FLAGS_train_lines);
  const int64_t test_lines = absl::GetFlag(FLAGS_test_lines);
  const std::string separator = absl::GetFlag(FLAGS_separator);
  const int level = absl::GetFlag(FLAGS_gzip_level);
  if (dir.empty() || train_lines < 0 || test_lines < 1 ||
      (separator != "tab" && separator != "colons") || level < 0 || level > 9) {
    fprintf(stderr,
            "movielens_gen: need --out_dir, --train_lines >= 0, "
            "--test_lines >= 1, --separator=tab|colons, --gzip_level in "
            "[0, 9]\n");
    return 2;
  }
  RatingsPlantedOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.users = absl::GetFlag(FLAGS_users);
  options.items = absl::GetFlag(FLAGS_items);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.noise_sd = absl::GetFlag(FLAGS_noise_sd);
  options.interaction_sd = absl::GetFlag(FLAGS_interaction_sd);
  options.user_zipf = absl::GetFlag(FLAGS_user_zipf);
  options.item_zipf = absl::GetFlag(FLAGS_item_zipf);
  options.half_stars = absl::GetFlag(FLAGS_half_stars);
  options.double_colon = separator == "colons";
  absl::StatusOr<RatingsPlanted> model = RatingsPlanted::Create(options);
  if (!model.ok()) {
    fprintf(stderr, "movielens_gen: %s\n", model.status().ToString().c_str());
    return 2;
  }
  const std::string suffix = absl::StrCat(
      options.double_colon ? ".dat" : ".txt", level > 0 ? ".gz" : "");
  const std::string train_path = absl::StrCat(dir, "/train", suffix);
  const std::string test_path = absl::StrCat(dir, "/test", suffix);
  absl::Status status = WriteSplit(*model, 0, train_lines, train_path, nullptr);
  TestStats stats;
  if (status.ok())
    status = WriteSplit(*model, 1, test_lines, test_path, &stats);
  if (!status.ok()) {
    fprintf(stderr, "movielens_gen: %s\n", status.ToString().c_str());
    return 1;
  }
  const double mean = stats.sum / test_lines;
  const double sd =
      std::sqrt(std::max(0.0, stats.sum_squares / test_lines - mean * mean));
  const std::string truth = absl::StrFormat(
      "{\n"
      "  \"format\": \"movielens\",\n"
      "  \"train_file\": \"%s\",\n"
      "  \"test_file\": \"%s\",\n"
      "  \"train_lines\": %d,\n"
      "  \"test_lines\": %d,\n"
      "  \"seed\": %d,\n"
      "  \"noise_floor_rmse\": %.6f,\n"
      "  \"planted_score_rmse\": %.6f,\n"
      "  \"test_mean_rating\": %.6f,\n"
      "  \"constant_rmse\": %.6f,\n"
      "  \"users\": %d,\n"
      "  \"items\": %d,\n"
      "  \"rank\": %d,\n"
      "  \"noise_sd\": %.6g,\n"
      "  \"interaction_sd\": %.6g,\n"
      "  \"half_stars\": %s\n"
      "}\n",
      train_path, test_path, train_lines, test_lines, options.seed,
      stats.best.Value(), stats.score.Value(), mean, sd, options.users,
      options.items, options.rank, options.noise_sd, options.interaction_sd,
      options.half_stars ? "true" : "false");
  status = WriteTextFile(absl::StrCat(dir, "/truth.json"), truth);
  if (!status.ok()) {
    fprintf(stderr, "movielens_gen: %s\n", status.ToString().c_str());
    return 1;
  }
  fputs(truth.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace ps::data_tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes MovieLens-format ratings from planted low-rank factors plus "
      "noise: OUT_DIR/train.txt, OUT_DIR/test.txt (train.dat/test.dat with "
      "--separator=colons) and OUT_DIR/truth.json with the noise-floor "
      "RMSE.\n"
      "  movielens_gen --out_dir=DIR [--train_lines=N] [--test_lines=N] "
      "[--seed=S] [--separator=tab|colons] [--gzip_level=L]");
  absl::ParseCommandLine(argc, argv);
  return ps::data_tools::Run();
}
