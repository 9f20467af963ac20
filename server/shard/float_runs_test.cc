#include "server/shard/float_runs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ps {
namespace {

// Every way of cutting 10 floats into pieces of 1..41 bytes gives back the
// same floats in order, the ones cut in two included.
TEST(ForEachFloatRun, GivesBackTheFloatsWhereverTheyAreCut) {
  std::vector<float> want(10);
  for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5f + i;
  const char* bytes = reinterpret_cast<const char*>(want.data());
  const size_t total = want.size() * 4;
  for (size_t piece = 1; piece <= total + 1; ++piece) {
    SCOPED_TRACE(piece);
    std::vector<absl::string_view> segments;
    for (size_t off = 0; off < total; off += piece) {
      segments.emplace_back(bytes + off, std::min(piece, total - off));
    }
    std::vector<float> got;
    EXPECT_TRUE(ForEachFloatRun(segments, [&](const char* p, size_t n) {
      EXPECT_GT(n, 0u);
      for (size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        got.push_back(f);
      }
      return true;
    }));
    EXPECT_EQ(got, want);
  }
}

TEST(ForEachFloatRun, StopsWhenAsked) {
  const std::vector<float> data(8, 1.0f);
  const char* bytes = reinterpret_cast<const char*>(data.data());
  const std::vector<absl::string_view> segments = {
      absl::string_view(bytes, 6), absl::string_view(bytes + 6, 26)};
  int calls = 0;
  EXPECT_FALSE(ForEachFloatRun(segments, [&](const char*, size_t) {
    ++calls;
    return false;
  }));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ps
