#include "worker/data/dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/data/idx_reader.h"

namespace ps::worker {
namespace {

constexpr int kFashionMnistSide = 28;

// Pixels are bytes, so a 256-bin histogram gives the exact statistics in one
// cheap pass, and a 256-entry table makes the conversion a lookup.
PixelStats MeasurePixels(const std::vector<uint8_t>& pixels) {
  std::array<int64_t, 256> histogram{};
  for (uint8_t p : pixels) ++histogram[p];
  double sum = 0.0;
  double sum_sq = 0.0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    sum += histogram[v] * x;
    sum_sq += histogram[v] * x * x;
  }
  const double n = static_cast<double>(pixels.size());
  PixelStats stats;
  stats.mean = sum / n;
  stats.stddev = std::sqrt(std::max(0.0, sum_sq / n - stats.mean * stats.mean));
  return stats;
}

}  // namespace

const char* SplitName(Split split) {
  return split == Split::kTrain ? "train" : "test";
}

absl::StatusOr<std::unique_ptr<Dataset>> LoadIdxDataset(
    const std::string& images_path, const std::string& labels_path,
    const DatasetOptions& options) {
  if (options.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_classes must be positive, got ", options.num_classes));
  }
  if (options.stats.has_value() && !(options.stats->stddev > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "normalisation stddev must be positive, got ", options.stats->stddev));
  }
  absl::StatusOr<IdxArray> images = ReadIdxFile(images_path, kIdxImagesMagic);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = ReadIdxFile(labels_path, kIdxLabelsMagic);
  if (!labels.ok()) return labels.status();

  const int64_t count = images->dims[0];
  if (labels->dims[0] != count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s holds %d images but %s holds %d labels",
                        images_path, count, labels_path, labels->dims[0]));
  }

  auto dataset = std::make_unique<Dataset>();
  dataset->num_examples = count;
  dataset->rows = static_cast<int>(images->dims[1]);
  dataset->cols = static_cast<int>(images->dims[2]);
  dataset->num_classes = options.num_classes;

  dataset->labels.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const int label = labels->data[i];
    if (label >= options.num_classes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: label %d of example %d is outside [0, %d)",
                          labels_path, label, i, options.num_classes));
    }
    dataset->labels[i] = label;
  }

  // Used for centring when normalising; otherwise reported for information.
  dataset->stats =
      options.stats.has_value() ? *options.stats : MeasurePixels(images->data);
  dataset->normalized = options.normalize;
  // A blank dataset has stddev 0: centre it without scaling.
  const double scale =
      dataset->stats.stddev > 0.0 ? 1.0 / dataset->stats.stddev : 1.0;
  std::array<float, 256> table;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    table[v] = static_cast<float>(
        options.normalize ? (x - dataset->stats.mean) * scale : x);
  }
  dataset->images.resize(images->data.size());
  for (size_t i = 0; i < images->data.size(); ++i) {
    dataset->images[i] = table[images->data[i]];
  }
  return dataset;
}

absl::StatusOr<std::unique_ptr<Dataset>> LoadFashionMnist(
    const std::string& dir, Split split, const DatasetOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat(
        "dataset directory not found: ", dir,
        error ? absl::StrCat(" (", error.message(), ")") : "",
        "; Fashion-MNIST comes with the Debian package dataset-fashion-mnist"));
  }
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path =
      (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz"))
          .string();
  const std::string labels_path =
      (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz"))
          .string();
  for (const std::string& path : {images_path, labels_path}) {
    if (!std::filesystem::exists(path, error)) {
      return absl::NotFoundError(
          absl::StrCat("dataset file not found: ", path));
    }
  }
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      LoadIdxDataset(images_path, labels_path, options);
  if (!dataset.ok()) return dataset.status();
  if ((*dataset)->rows != kFashionMnistSide ||
      (*dataset)->cols != kFashionMnistSide) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: images are %dx%d, expected %dx%d", images_path, (*dataset)->rows,
        (*dataset)->cols, kFashionMnistSide, kFashionMnistSide));
  }
  return dataset;
}

}  // namespace ps::worker
