#include "worker/data/idx_reader.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/idx_test_util.h"

namespace ps::worker {
namespace {

using testing::Gzip;
using ::testing::HasSubstr;
using testing::IdxBytes;
using testing::TempPath;
using testing::WriteFile;

// 2 images of 3x4 pixels, each pixel its own index.
std::string Pixels24() {
  std::string pixels;
  for (int i = 0; i < 24; ++i) pixels.push_back(static_cast<char>(i));
  return pixels;
}

std::string GoodImages() {
  return IdxBytes(kIdxImagesMagic, {2, 3, 4}, Pixels24());
}

TEST(IdxReader, ReadsImagesAndLabels) {
  const std::string images = TempPath("images.gz");
  ASSERT_TRUE(WriteFile(images, Gzip(GoodImages())).ok());
  absl::StatusOr<IdxArray> array = ReadIdxFile(images, kIdxImagesMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dims, (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(array->data.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(array->data[i], i);

  const std::string labels = TempPath("labels.gz");
  ASSERT_TRUE(WriteFile(labels, Gzip(IdxBytes(kIdxLabelsMagic, {3},
                                              std::string("\x07\x00\x09", 3))))
                  .ok());
  array = ReadIdxFile(labels, kIdxLabelsMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dims, (std::vector<int64_t>{3}));
  EXPECT_EQ(array->data, (std::vector<uint8_t>{7, 0, 9}));
}

TEST(IdxReader, ReadsUncompressedFiles) {
  const std::string path = TempPath("images-idx3-ubyte");
  ASSERT_TRUE(WriteFile(path, GoodImages()).ok());
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->data.size(), 24u);
}

TEST(IdxReader, MissingFileIsNotFound) {
  const std::string path = TempPath("no-such-file.gz");
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr(path));
}

// The gzip trailer's CRC-32 sits in the last 8 bytes; corrupting it leaves
// the data intact but must still fail.
std::string WithBadCrc(std::string gz) {
  gz[gz.size() - 8] ^= 0x5a;
  return gz;
}

TEST(IdxReader, RejectsBrokenFilesNamingThem) {
  const std::string good = GoodImages();
  const std::string good_gz = Gzip(good);
  struct Case {
    std::string name;
    std::string file_bytes;  // exactly as written to disk
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"empty", "", absl::StatusCode::kDataLoss, "too short"},
      {"empty_gzip", Gzip(""), absl::StatusCode::kDataLoss, "too short"},
      {"labels_magic", Gzip(IdxBytes(kIdxLabelsMagic, {24}, Pixels24())),
       absl::StatusCode::kInvalidArgument, "wrong magic number 0x00000801"},
      {"garbage_magic", Gzip(IdxBytes(0x12345678, {2, 3, 4}, Pixels24())),
       absl::StatusCode::kInvalidArgument, "wrong magic number 0x12345678"},
      {"cut_in_header", Gzip(good.substr(0, 9)), absl::StatusCode::kDataLoss,
       "truncated inside the header"},
      {"one_byte_short", Gzip(good.substr(0, good.size() - 1)),
       absl::StatusCode::kDataLoss, "truncated: header says 2x3x4"},
      {"count_too_large",
       Gzip(IdxBytes(kIdxImagesMagic, {1000000, 28, 28}, Pixels24())),
       absl::StatusCode::kDataLoss, "file has 24"},
      {"one_byte_long", Gzip(good + "x"), absl::StatusCode::kInvalidArgument,
       "wrong size"},
      {"zero_dimension", Gzip(IdxBytes(kIdxImagesMagic, {2, 0, 4}, "")),
       absl::StatusCode::kInvalidArgument, "dimension 1 is zero"},
      {"absurd_header",
       Gzip(IdxBytes(kIdxImagesMagic, {0xffffffff, 0xffffffff, 1}, "")),
       absl::StatusCode::kInvalidArgument, "more than"},
      {"gzip_cut_short", good_gz.substr(0, good_gz.size() / 2),
       absl::StatusCode::kDataLoss, "corrupt or truncated"},
      {"gzip_trailer_missing", good_gz.substr(0, good_gz.size() - 8),
       absl::StatusCode::kDataLoss, "corrupt or truncated"},
      {"gzip_bad_crc", WithBadCrc(good_gz), absl::StatusCode::kDataLoss,
       "corrupt or truncated"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = TempPath(c.name + "-idx3-ubyte.gz");
    ASSERT_TRUE(WriteFile(path, c.file_bytes).ok());
    absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
    ASSERT_FALSE(array.ok());
    EXPECT_EQ(array.status().code(), c.code) << array.status();
    EXPECT_THAT(std::string(array.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(array.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace ps::worker
