// An image classification dataset held in memory as float, loaded from a pair
// of IDX files (images and labels). Fashion-MNIST, from the Debian package
// dataset-fashion-mnist, is the default.
#ifndef PS_WORKER_DATA_DATASET_H_
#define PS_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps::worker {

inline constexpr char kDefaultFashionMnistDir[] =
    "/usr/share/datasets/fashion-mnist";

enum class Split { kTrain, kTest };

// "train" or "test".
const char* SplitName(Split split);

// One mean and standard deviation over every pixel of every image, measured
// on pixels already scaled to [0, 1]. (Fashion-MNIST train: about 0.286 and
// 0.353.)
struct PixelStats {
  double mean = 0.0;
  double stddev = 1.0;
};

struct DatasetOptions {
  // Pixels are always scaled to [0, 1] (p / 255). With `normalize` they are
  // then centred: x = (p / 255 - mean) / stddev, one scalar mean and stddev
  // for the whole dataset (not per pixel position).
  bool normalize = true;
  // The statistics to centre with. Unset: those of this dataset's own pixels.
  // Evaluate with the training statistics: load the test split with
  // `stats = train->stats`.
  std::optional<PixelStats> stats;
  // Every label must be in [0, num_classes).
  int num_classes = 10;
};

// Plain data; immutable once loaded, so it may be shared between threads
// (its readers and the evaluator hold it by shared_ptr<const Dataset>).
// Invariants: images.size() == num_examples * example_size(),
// labels.size() == num_examples, every label in [0, num_classes).
struct Dataset {
  int64_t num_examples = 0;
  int rows = 0;
  int cols = 0;
  int num_classes = 0;
  std::vector<float> images;    // [num_examples, rows * cols], row-major
  std::vector<int32_t> labels;  // [num_examples]
  bool normalized = false;      // whether `stats` were applied
  PixelStats stats;  // applied if `normalized`, else this data's own, for info

  int64_t example_size() const { return int64_t{rows} * cols; }
  absl::Span<const float> image(int64_t i) const {
    return absl::MakeConstSpan(images).subspan(i * example_size(),
                                               example_size());
  }
};

// Loads an images file (magic 0x803, [count, rows, cols]) and a labels file
// (magic 0x801, [count]), gzip-compressed or not. Errors name the file:
// every error of ReadIdxFile, plus INVALID_ARGUMENT for image and label
// counts that differ (naming both files), a label outside [0, num_classes)
// (naming its index), or options with num_classes < 1 or stats.stddev <= 0.
absl::StatusOr<std::unique_ptr<Dataset>> LoadIdxDataset(
    const std::string& images_path, const std::string& labels_path,
    const DatasetOptions& options = {});

// Loads one split of Fashion-MNIST (or MNIST: same file names) from `dir`:
// {train,t10k}-images-idx3-ubyte.gz and {train,t10k}-labels-idx1-ubyte.gz.
// NOT_FOUND naming `dir` if it is not a directory, naming the file if one is
// missing; INVALID_ARGUMENT if the images are not 28x28; otherwise as
// LoadIdxDataset.
absl::StatusOr<std::unique_ptr<Dataset>> LoadFashionMnist(
    const std::string& dir, Split split, const DatasetOptions& options = {});

}  // namespace ps::worker

#endif  // PS_WORKER_DATA_DATASET_H_
