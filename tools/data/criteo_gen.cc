// criteo_gen: writes click logs in the Criteo display-ads TSV format from a
// planted model (tools/data/criteo_planted.h), a train and a test file, and
// truth.json with the true model's AUC and log loss on the test file: the
// best any model can reach on it.
//
//   bazel run //tools/data:criteo_gen -- --out_dir=/tmp/ctr
//       --train_lines=1000000 --test_lines=100000 [--gzip_level=1]
//
// Output: OUT_DIR/train.txt, OUT_DIR/test.txt (.txt.gz with --gzip_level),
// OUT_DIR/truth.json. Deterministic: the same flags give the same bytes.
// Exit status 0, 1 on an I/O error, 2 on bad flags.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/spec/eval_metrics.h"
#include "tools/data/criteo_planted.h"
#include "tools/data/output_file.h"
#include "tools/data/progress.h"

ABSL_FLAG(std::string, out_dir, "",
          "Directory for train, test and truth.json "
          "(must exist).");
ABSL_FLAG(int64_t, train_lines, 100000, "Lines in the train file.");
ABSL_FLAG(int64_t, test_lines, 10000, "Lines in the test file.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the model and the data.");
ABSL_FLAG(double, ctr, 0.1, "Mean click probability, in [0.03, 0.25].");
ABSL_FLAG(double, zipf_exponent, 1.05, "Zipf exponent of categorical ids.");
ABSL_FLAG(double, vocab_scale, 1.0,
          "Ids per field: the Kaggle data's count times this, capped by "
          "--max_vocab.");
ABSL_FLAG(int64_t, max_vocab, 10000, "Cap on ids per field.");
ABSL_FLAG(double, signal, 1.0, "Scale of every planted effect.");
ABSL_FLAG(int, interaction_rank, 4,
          "Rank of the planted pairwise interactions among C1..C8 (0: none).");
ABSL_FLAG(double, interaction_scale, 0.5,
          "Standard deviation of the interactions' sum, in log-odds.");
ABSL_FLAG(int, gzip_level, 0, "0: plain text; 1..9: gzip at that level.");
ABSL_FLAG(bool, progress, true, "Progress on stderr every 2 s.");

namespace ps::data_tools {
namespace {

// Test files up to this size get the exact AUC (4 bytes per line), larger
// ones the binned AUC with its error bound.
constexpr int64_t kExactAucMaxLines = 20000000;
constexpr size_t kChunkBytes = size_t{1} << 20;

struct SplitResult {
  int64_t clicks = 0;
  std::string path;
};

absl::StatusOr<SplitResult> WriteSplit(const CriteoPlanted& model, int stream,
                                       int64_t lines, const std::string& path,
                                       ExactAuc* exact, BinnedAuc* binned,
                                       LogLoss* logloss) {
  absl::StatusOr<std::unique_ptr<OutputFile>> file =
      OutputFile::Create(path, absl::GetFlag(FLAGS_gzip_level));
  if (!file.ok()) return file.status();
  Progress progress(absl::StrCat("criteo_gen ", path), lines,
                    absl::GetFlag(FLAGS_progress));
  SplitResult result;
  result.path = path;
  std::string chunk;
  chunk.reserve(kChunkBytes + 4096);
  for (int64_t i = 0; i < lines; ++i) {
    const CriteoPlanted::Impression impression =
        model.Generate(stream, i, &chunk);
    chunk.push_back('\n');
    result.clicks += impression.label;
    if (logloss != nullptr) {
      logloss->AddLogit(impression.logit, impression.label);
      const float score = static_cast<float>(impression.logit);
      if (exact != nullptr) exact->Add(score, impression.label);
      if (binned != nullptr) binned->Add(score, impression.label);
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
  absl::Status closed = (*file)->Close();
  if (!closed.ok()) return closed;
  progress.Finish(lines);
  return result;
}

// The log loss of always predicting the rate `p`: the entropy of the labels.
double ConstantLogLoss(double p) {
  if (p <= 0 || p >= 1) return 0;
  return -(p * std::log(p) + (1 - p) * std::log(1 - p));
}

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_out_dir);
  const int64_t train_lines = absl::GetFlag(FLAGS_train_lines);
  const int64_t test_lines = absl::GetFlag(FLAGS_test_lines);
  if (dir.empty() || train_lines < 0 || test_lines < 1) {
    fprintf(stderr,
            "criteo_gen: need --out_dir, --train_lines >= 0 and "
            "--test_lines >= 1\n");
    return 2;
  }
  CriteoPlantedOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.ctr = absl::GetFlag(FLAGS_ctr);
  options.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  options.vocab_scale = absl::GetFlag(FLAGS_vocab_scale);
  options.max_vocab = absl::GetFlag(FLAGS_max_vocab);
  options.signal = absl::GetFlag(FLAGS_signal);
  options.interaction_rank = absl::GetFlag(FLAGS_interaction_rank);
  options.interaction_scale = absl::GetFlag(FLAGS_interaction_scale);
  absl::StatusOr<CriteoPlanted> model = CriteoPlanted::Create(options);
  if (!model.ok()) {
    fprintf(stderr, "criteo_gen: %s\n", model.status().ToString().c_str());
    return 2;
  }
  const int level = absl::GetFlag(FLAGS_gzip_level);
  if (level < 0 || level > 9) {
    fprintf(stderr, "criteo_gen: --gzip_level must be in [0, 9]\n");
    return 2;
  }
  const std::string suffix = level > 0 ? ".txt.gz" : ".txt";

  absl::StatusOr<SplitResult> train =
      WriteSplit(*model, 0, train_lines, absl::StrCat(dir, "/train", suffix),
                 nullptr, nullptr, nullptr);
  if (!train.ok()) {
    fprintf(stderr, "criteo_gen: %s\n", train.status().ToString().c_str());
    return 1;
  }
  const bool exact_auc = test_lines <= kExactAucMaxLines;
  std::optional<ExactAuc> exact;
  std::optional<BinnedAuc> binned;
  if (exact_auc) {
    exact.emplace();
  } else {
    binned.emplace(*BinnedAuc::Create(20));
  }
  LogLoss logloss;
  absl::StatusOr<SplitResult> test = WriteSplit(
      *model, 1, test_lines, absl::StrCat(dir, "/test", suffix),
      exact ? &*exact : nullptr, binned ? &*binned : nullptr, &logloss);
  if (!test.ok()) {
    fprintf(stderr, "criteo_gen: %s\n", test.status().ToString().c_str());
    return 1;
  }

  std::vector<int64_t> vocab;
  for (int f = 0; f < 26; ++f) vocab.push_back(model->vocab(f));
  const double test_ctr = static_cast<double>(test->clicks) / test_lines;
  const std::string truth = absl::StrFormat(
      "{\n"
      "  \"format\": \"criteo\",\n"
      "  \"train_file\": \"%s\",\n"
      "  \"test_file\": \"%s\",\n"
      "  \"train_lines\": %d,\n"
      "  \"test_lines\": %d,\n"
      "  \"seed\": %d,\n"
      "  \"ctr_target\": %.6g,\n"
      "  \"train_ctr\": %.6g,\n"
      "  \"test_ctr\": %.6g,\n"
      "  \"true_test_auc\": %.6f,\n"
      "  \"true_test_auc_error_bound\": %.3g,\n"
      "  \"true_test_logloss\": %.6f,\n"
      "  \"constant_test_logloss\": %.6f,\n"
      "  \"bias\": %.6f,\n"
      "  \"zipf_exponent\": %.6g,\n"
      "  \"vocab_sizes\": [%s],\n"
      "  \"signal\": %.6g,\n"
      "  \"interaction_rank\": %d,\n"
      "  \"interaction_scale\": %.6g\n"
      "}\n",
      train->path, test->path, train_lines, test_lines, options.seed,
      options.ctr,
      train_lines > 0 ? static_cast<double>(train->clicks) / train_lines : 0.0,
      test_ctr, exact_auc ? exact->Value() : binned->Value(),
      exact_auc ? 0.0 : binned->ErrorBound(), logloss.Value(),
      ConstantLogLoss(test_ctr), model->bias(), options.zipf_exponent,
      absl::StrJoin(vocab, ", "), options.signal, options.interaction_rank,
      options.interaction_scale);
  absl::Status written = WriteTextFile(absl::StrCat(dir, "/truth.json"), truth);
  if (!written.ok()) {
    fprintf(stderr, "criteo_gen: %s\n", written.ToString().c_str());
    return 1;
  }
  fputs(truth.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace ps::data_tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes Criteo-format click logs from a planted model: "
      "OUT_DIR/train.txt, OUT_DIR/test.txt and OUT_DIR/truth.json.\n"
      "  criteo_gen --out_dir=DIR [--train_lines=N] [--test_lines=N] "
      "[--seed=S] [--ctr=P] [--gzip_level=L]");
  absl::ParseCommandLine(argc, argv);
  return ps::data_tools::Run();
}
