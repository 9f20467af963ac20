#include "worker/ps_access.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/model.h"
#include "common/placement.h"

namespace ps::worker {
namespace {

JobSpec MlpSpec(ConsistencySpec::Model model, bool overlap, int64_t hidden) {
  JobSpec spec;
  spec.mutable_model()->mutable_mlp()->set_input_dim(784);
  spec.mutable_model()->mutable_mlp()->add_hidden(hidden);
  spec.mutable_model()->mutable_mlp()->set_num_classes(10);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_consistency()->set_overlap_communication(overlap);
  return spec;
}

int Connections(const JobSpec& spec, int shards) {
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpandModel(spec.model());
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  absl::StatusOr<Placement> p =
      ComputePlacement(*tensors, shards, kDefaultChunkBytes);
  EXPECT_TRUE(p.ok()) << p.status();
  return ConnectionsPerShard(spec, *p, 4 << 20);
}

// One connection only where the step's messages are off the critical path
// (ASP overlapping communication) and each shard's part is one message.
TEST(ConnectionsPerShard, OneOnlyForAnOverlappedStepOfOneMessage) {
  // 784 x 256: about 0.8 MB of weights.
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, true, 256), 1), 1);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, false, 256), 1), 2);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::BSP, false, 256), 1), 2);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::SSP, false, 256), 1), 2);
  // 784 x 2048: about 6.4 MB, over one 4 MB message on one shard, under it
  // on each of two.
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, true, 2048), 1), 2);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, true, 2048), 2), 1);
}

}  // namespace
}  // namespace ps::worker
