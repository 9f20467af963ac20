#include "worker/data/dataset.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/idx_reader.h"
#include "worker/data/idx_test_util.h"

namespace ps::worker {
namespace {

using ::testing::AllOf;
using testing::Gzip;
using ::testing::HasSubstr;
using testing::IdxBytes;
using testing::TempPath;
using testing::WriteFile;

// `count` images of rows x cols whose pixel j of image i is (i * 7 + j) % 256.
std::string ImagesFile(uint32_t count, uint32_t rows, uint32_t cols) {
  std::string pixels;
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t j = 0; j < rows * cols; ++j) {
      pixels.push_back(static_cast<char>((i * 7 + j) % 256));
    }
  }
  return Gzip(IdxBytes(kIdxImagesMagic, {count, rows, cols}, pixels));
}

std::string LabelsFile(const std::vector<uint8_t>& labels) {
  return Gzip(IdxBytes(kIdxLabelsMagic, {static_cast<uint32_t>(labels.size())},
                       std::string(labels.begin(), labels.end())));
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteFile(path, bytes).ok());
  return path;
}

void ExpectRealSplit(Split split, int64_t count) {
  SCOPED_TRACE(SplitName(split));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      LoadFashionMnist(kDefaultFashionMnistDir, split);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::cout << "loaded Fashion-MNIST " << SplitName(split) << " ("
            << (*dataset)->num_examples << " examples) in "
            << absl::FormatDuration(took) << "\n";
  const Dataset& d = **dataset;
  EXPECT_EQ(d.num_examples, count);
  EXPECT_EQ(d.rows, 28);
  EXPECT_EQ(d.cols, 28);
  EXPECT_EQ(d.example_size(), 784);
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_EQ(d.images.size(), static_cast<size_t>(count * 784));
  ASSERT_EQ(d.labels.size(), static_cast<size_t>(count));
  // Fashion-MNIST is balanced: every class appears count / 10 times.
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : d.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], count / 10) << c;

  // Centred: mean 0 and standard deviation 1 over all pixels.
  EXPECT_TRUE(d.normalized);
  double sum = 0.0;
  double sum_sq = 0.0;
  for (float x : d.images) {
    sum += x;
    sum_sq += double{x} * x;
  }
  const double n = static_cast<double>(d.images.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sum_sq / n - (sum / n) * (sum / n)), 1.0, 1e-4);
}

TEST(Dataset, LoadsRealFashionMnist) {
  ExpectRealSplit(Split::kTrain, 60000);
  ExpectRealSplit(Split::kTest, 10000);
}

TEST(Dataset, TrainStatisticsAreThePublishedOnes) {
  absl::StatusOr<std::unique_ptr<Dataset>> train =
      LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_NEAR((*train)->stats.mean, 0.2860, 1e-3);
  EXPECT_NEAR((*train)->stats.stddev, 0.3530, 1e-3);
}

TEST(Dataset, ScalesWithoutCentringWhenNotNormalising) {
  const std::string images = Write("images.gz", ImagesFile(3, 2, 5));
  const std::string labels = Write("labels.gz", LabelsFile({1, 0, 9}));
  DatasetOptions options;
  options.normalize = false;
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      LoadIdxDataset(images, labels, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const Dataset& d = **dataset;
  EXPECT_FALSE(d.normalized);
  EXPECT_EQ(d.num_examples, 3);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 0, 9}));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 10; ++j) {
      EXPECT_FLOAT_EQ(d.image(i)[j], ((i * 7 + j) % 256) / 255.0f);
    }
  }
}

TEST(Dataset, CentresWithGivenStatistics) {
  const std::string images = Write("images.gz", ImagesFile(2, 3, 3));
  const std::string labels = Write("labels.gz", LabelsFile({4, 5}));
  DatasetOptions options;
  options.stats = PixelStats{0.5, 0.25};
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      LoadIdxDataset(images, labels, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE((*dataset)->normalized);
  EXPECT_EQ((*dataset)->stats.mean, 0.5);
  EXPECT_EQ((*dataset)->stats.stddev, 0.25);
  EXPECT_FLOAT_EQ((*dataset)->image(1)[2], ((9 / 255.0) - 0.5) / 0.25);
}

TEST(Dataset, RejectsInconsistentFilesNamingThem) {
  const std::string images = Write("images.gz", ImagesFile(3, 2, 2));
  const std::string labels3 = Write("labels3.gz", LabelsFile({0, 1, 2}));
  const std::string labels4 = Write("labels4.gz", LabelsFile({0, 1, 2, 3}));
  const std::string bad_label = Write("bad_label.gz", LabelsFile({0, 10, 2}));
  const std::string truncated =
      Write("truncated.gz", Gzip(IdxBytes(kIdxImagesMagic, {3, 2, 2}, "abc")));
  struct Case {
    std::string name;
    std::string images;
    std::string labels;
    DatasetOptions options;
    absl::StatusCode code;
    std::vector<std::string> named;  // paths the message must contain
    std::string message;
  };
  DatasetOptions three_classes;
  three_classes.num_classes = 3;
  DatasetOptions no_classes;
  no_classes.num_classes = 0;
  DatasetOptions zero_stddev;
  zero_stddev.stats = PixelStats{0.5, 0.0};
  const std::vector<Case> cases = {
      {"count_mismatch",
       images,
       labels4,
       {},
       absl::StatusCode::kInvalidArgument,
       {images, labels4},
       "holds 3 images but"},
      {"label_out_of_range",
       images,
       bad_label,
       {},
       absl::StatusCode::kInvalidArgument,
       {bad_label},
       "label 10 of example 1"},
      {"label_beyond_num_classes",
       images,
       labels3,
       three_classes,
       absl::StatusCode::kOk,
       {},
       ""},
      {"images_swapped_with_labels",
       labels3,
       images,
       {},
       absl::StatusCode::kInvalidArgument,
       {labels3},
       "wrong magic"},
      {"truncated_images",
       truncated,
       labels3,
       {},
       absl::StatusCode::kDataLoss,
       {truncated},
       "truncated"},
      {"no_classes",
       images,
       labels3,
       no_classes,
       absl::StatusCode::kInvalidArgument,
       {},
       "num_classes"},
      {"zero_stddev",
       images,
       labels3,
       zero_stddev,
       absl::StatusCode::kInvalidArgument,
       {},
       "stddev"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        LoadIdxDataset(c.images, c.labels, c.options);
    EXPECT_EQ(dataset.status().code(), c.code) << dataset.status();
    const std::string message(dataset.status().message());
    for (const std::string& path : c.named) {
      EXPECT_THAT(message, HasSubstr(path));
    }
    EXPECT_THAT(message, HasSubstr(c.message));
  }
}

TEST(Dataset, MissingDirectoryOrFileIsNotFound) {
  const std::string missing_dir = TempPath("no-such-dir");
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      LoadFashionMnist(missing_dir, Split::kTrain);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(dataset.status().message()),
              AllOf(HasSubstr("directory"), HasSubstr(missing_dir)));

  // A directory with the test split only.
  const std::string dir = TempPath("partial");
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  ASSERT_TRUE(
      WriteFile(dir + "/t10k-images-idx3-ubyte.gz", ImagesFile(2, 28, 28))
          .ok());
  ASSERT_TRUE(
      WriteFile(dir + "/t10k-labels-idx1-ubyte.gz", LabelsFile({3, 4})).ok());
  dataset = LoadFashionMnist(dir, Split::kTrain);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(dataset.status().message()),
              HasSubstr(dir + "/train-images-idx3-ubyte.gz"));

  dataset = LoadFashionMnist(dir, Split::kTest);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_examples, 2);

  // Right names, wrong image size.
  ASSERT_TRUE(
      WriteFile(dir + "/t10k-images-idx3-ubyte.gz", ImagesFile(2, 28, 27))
          .ok());
  dataset = LoadFashionMnist(dir, Split::kTest);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dataset.status().message()),
              AllOf(HasSubstr(dir + "/t10k-images-idx3-ubyte.gz"),
                    HasSubstr("28x27, expected 28x28")));
}

}  // namespace
}  // namespace ps::worker
