#include "common/wire/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/spec/model.h"

namespace ps {
namespace {

std::vector<TensorSpec> FashionMlp() {
  MlpSpec mlp;
  mlp.set_input_dim(784);
  mlp.add_hidden(256);
  mlp.add_hidden(128);
  mlp.set_num_classes(10);
  return MlpTensors(mlp);
}

std::vector<TensorSpec> RandomModel(std::mt19937& rng) {
  std::vector<TensorSpec> tensors;
  const int n = std::uniform_int_distribution<int>(1, 12)(rng);
  for (int i = 0; i < n; ++i) {
    TensorSpec t;
    t.set_name("t" + std::to_string(i));
    t.add_shape(std::uniform_int_distribution<int>(1, 3000)(rng));
    if (rng() % 2) t.add_shape(std::uniform_int_distribution<int>(1, 300)(rng));
    tensors.push_back(t);
  }
  return tensors;
}

// Every element of every tensor is in exactly one chunk, chunks are bounded,
// and the shard tables agree with the chunks.
void ExpectConsistent(const std::vector<TensorSpec>& tensors,
                      const Placement& p, int64_t chunk_bytes) {
  std::vector<int64_t> next(tensors.size(), 0);
  for (size_t i = 0; i < p.chunks.size(); ++i) {
    const Chunk& c = p.chunks[i];
    EXPECT_EQ(c.chunk_id, static_cast<int64_t>(i));
    EXPECT_EQ(c.offset, next[c.tensor_index]) << "gap or overlap";
    EXPECT_GT(c.num_elements, 0);
    EXPECT_LE(c.num_elements * 4, chunk_bytes);
    next[c.tensor_index] += c.num_elements;
    ASSERT_GE(c.shard, 0);
    ASSERT_LT(c.shard, p.num_shards);
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    EXPECT_EQ(next[t], NumElements(tensors[t])) << tensors[t].name();
  }
  int64_t listed = 0;
  for (int s = 0; s < p.num_shards; ++s) {
    int64_t bytes = 0;
    for (int64_t id : p.shard_chunks[s]) {
      EXPECT_EQ(p.chunks[id].shard, s);
      bytes += p.chunks[id].num_elements * 4;
    }
    EXPECT_EQ(bytes, p.shard_bytes[s]);
    listed += static_cast<int64_t>(p.shard_chunks[s].size());
  }
  EXPECT_EQ(listed, static_cast<int64_t>(p.chunks.size()));
}

void ExpectBalanced(const Placement& p) {
  const int64_t total =
      std::accumulate(p.shard_bytes.begin(), p.shard_bytes.end(), int64_t{0});
  const double mean = static_cast<double>(total) / p.num_shards;
  int64_t largest_chunk = 0;
  for (const Chunk& c : p.chunks) {
    largest_chunk = std::max(largest_chunk, c.num_elements * 4);
  }
  const int64_t heaviest =
      *std::max_element(p.shard_bytes.begin(), p.shard_bytes.end());
  EXPECT_LE(heaviest, mean + largest_chunk)
      << "heaviest shard more than one chunk above the mean";
}

TEST(Placement, FashionMlpOnOneToEightShards) {
  const auto tensors = FashionMlp();
  for (int shards = 1; shards <= 8; ++shards) {
    for (int64_t chunk : {int64_t{4096}, int64_t{65536}, kDefaultChunkBytes}) {
      auto p = ComputePlacement(tensors, shards, chunk);
      ASSERT_TRUE(p.ok()) << p.status();
      ExpectConsistent(tensors, *p, chunk);
      ExpectBalanced(*p);
    }
  }
}

TEST(Placement, RandomModelsAreCoveredAndBalanced) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const auto tensors = RandomModel(rng);
    const int shards = std::uniform_int_distribution<int>(1, 7)(rng);
    const int64_t chunk = 4 * std::uniform_int_distribution<int>(1, 5000)(rng);
    auto p = ComputePlacement(tensors, shards, chunk);
    ASSERT_TRUE(p.ok()) << p.status();
    ExpectConsistent(tensors, *p, chunk);
    ExpectBalanced(*p);
  }
}

TEST(Placement, IsDeterministic) {
  const auto tensors = FashionMlp();
  auto a = ComputePlacement(tensors, 3, 8192);
  auto b = ComputePlacement(tensors, 3, 8192);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->chunks.size(), b->chunks.size());
  for (size_t i = 0; i < a->chunks.size(); ++i) {
    EXPECT_EQ(a->chunks[i].shard, b->chunks[i].shard);
    EXPECT_EQ(a->chunks[i].offset, b->chunks[i].offset);
    EXPECT_EQ(a->chunks[i].num_elements, b->chunks[i].num_elements);
  }
}

TEST(Placement, RejectsBadArguments) {
  const auto tensors = FashionMlp();
  EXPECT_EQ(ComputePlacement(tensors, 0, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputePlacement(tensors, 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<TensorSpec> bad(1);
  bad[0].set_name("neg");
  bad[0].add_shape(-4);
  auto p = ComputePlacement(bad, 2, 4096);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("neg"), std::string::npos);
}

// Two tensors of 1000 and 30 floats in chunks of 100 floats: the first has
// ten chunks (ids 0..9), the second one (id 10).
Placement TwoTensors(int shards) {
  std::vector<TensorSpec> tensors(2);
  tensors[0].set_name("w");
  tensors[0].add_shape(1000);
  tensors[1].set_name("b");
  tensors[1].add_shape(30);
  absl::StatusOr<Placement> p = ComputePlacement(tensors, shards, 400);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

TEST(ChunkBoundaries, AreTheChunkStartsAfterTheFirst) {
  for (int shards : {1, 2, 3}) {
    SCOPED_TRACE(shards);
    const Placement p = TwoTensors(shards);
    EXPECT_EQ(
        ChunkBoundaries(p, 0),
        (std::vector<int64_t>{100, 200, 300, 400, 500, 600, 700, 800, 900}));
    EXPECT_TRUE(ChunkBoundaries(p, 1).empty());  // one chunk
    EXPECT_TRUE(ChunkBoundaries(p, 2).empty());  // no such tensor
    EXPECT_TRUE(ChunkBoundaries(p, -1).empty());
  }
}

TEST(ChunkBoundaries, CutEveryTensorOfARandomModelIntoItsChunks) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 50; ++trial) {
    const auto tensors = RandomModel(rng);
    const int64_t chunk = 4 * std::uniform_int_distribution<int>(1, 2000)(rng);
    auto p = ComputePlacement(tensors, 3, chunk);
    ASSERT_TRUE(p.ok()) << p.status();
    for (size_t t = 0; t < tensors.size(); ++t) {
      std::vector<int64_t> starts = {0};
      for (int64_t b : ChunkBoundaries(*p, static_cast<int>(t))) {
        starts.push_back(b);
      }
      std::vector<int64_t> want;
      for (const Chunk& c : p->chunks) {
        if (c.tensor_index == static_cast<int>(t)) want.push_back(c.offset);
      }
      if (want.empty()) want = {0};  // an empty tensor has no chunk
      EXPECT_EQ(starts, want) << "tensor " << t;
    }
  }
}

TEST(ChunksOverlapping, NamesTheChunksHoldingARange) {
  struct Case {
    int tensor;
    int64_t begin, end;
    std::vector<int64_t> want;
  };
  const std::vector<Case> cases = {
      {0, 0, 500, {0, 1, 2, 3, 4}},
      {0, 500, 1000, {5, 6, 7, 8, 9}},
      {0, 450, 501, {4, 5}},
      {0, 99, 100, {0}},
      {0, 100, 101, {1}},
      {0, 0, 1000, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {0, 0, 5000, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {0, 300, 300, {}},  // empty range
      {0, 1000, 1100, {}},
      {1, 0, 30, {10}},
      {1, 29, 30, {10}},
      {2, 0, 30, {}},  // no such tensor
  };
  for (int shards : {1, 2}) {
    const Placement p = TwoTensors(shards);
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message()
                   << shards << " shards, tensor " << c.tensor << " ["
                   << c.begin << ", " << c.end << ")");
      EXPECT_EQ(ChunksOverlapping(p, c.tensor, c.begin, c.end), c.want);
    }
  }
}

}  // namespace
}  // namespace ps
