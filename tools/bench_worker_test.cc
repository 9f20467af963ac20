#include "tools/bench_worker.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::bench {
namespace {

TEST(Figures, RoundTripKeepsEveryField) {
  const std::vector<WorkerFigures> cases = {
      {1234, 1.503, 0.875, 2.25, ""},
      {0, 0.0, 0.0, -1, "UNAVAILABLE: Push to shard 1 (127.0.0.1:5): a=b c"},
      {3, 60.5, 20000.125, 0.001, "x"},
  };
  for (const WorkerFigures& f : cases) {
    const std::string line = FormatFigures(f);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    absl::StatusOr<WorkerFigures> back = ParseFigures(line);
    ASSERT_TRUE(back.ok()) << back.status() << " for " << line;
    EXPECT_EQ(back->steps, f.steps);
    EXPECT_NEAR(back->seconds, f.seconds, 1e-6);
    EXPECT_NEAR(back->median_step_ms, f.median_step_ms, 1e-6);
    EXPECT_NEAR(back->cpu_seconds, f.cpu_seconds, 1e-6);
    EXPECT_EQ(back->error, f.error);
  }
}

TEST(Figures, MalformedLinesAreRejected) {
  const std::vector<std::string> lines = {
      "",
      "ready",
      "figures steps=1 seconds=1 median_ms=1 cpu=1",  // no error field
      "figures steps=x seconds=1 median_ms=1 cpu=1 error=",
      "figures steps=1 seconds=1 median_ms=1 error=",  // cpu missing
      "figures steps=1 seconds=1 median_ms=1 cpu=1 bogus=2 error=",
      "steps=1 seconds=1 median_ms=1 cpu=1 error=",
  };
  for (const std::string& line : lines) {
    EXPECT_EQ(ParseFigures(line).status().code(),
              absl::StatusCode::kInvalidArgument)
        << line;
  }
}

TEST(DenseBenchSpec, FourEqualTensorsOrOneForTinyModels) {
  struct Case {
    int64_t bytes;
    int tensors;
    int64_t elements_each;
  };
  for (const Case& c : std::vector<Case>{
           {4 << 10, 1, 1024}, {1 << 20, 4, 65536}, {64 << 20, 4, 4 << 20}}) {
    const JobSpec spec = DenseBenchSpec(c.bytes, 2);
    EXPECT_EQ(spec.num_workers(), 2);
    EXPECT_EQ(spec.consistency().model(), ConsistencySpec::ASP);
    ASSERT_EQ(spec.model().tensors_size(), c.tensors) << c.bytes;
    for (const TensorSpec& t : spec.model().tensors()) {
      ASSERT_EQ(t.shape_size(), 1);
      EXPECT_EQ(t.shape(0), c.elements_each);
    }
  }
}

TEST(DenseBenchPlacement, SpreadsTheModelOverTheShards) {
  absl::StatusOr<Placement> p = DenseBenchPlacement(16 << 20, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_shards, 2);
  int64_t total = 0;
  for (int64_t n : p->tensor_elements) total += n;
  EXPECT_EQ(total, (16 << 20) / 4);
  EXPECT_FALSE(p->shard_chunks[0].empty());
  EXPECT_FALSE(p->shard_chunks[1].empty());
}

}  // namespace
}  // namespace ps::bench
