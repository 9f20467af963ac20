// Test helpers for the shard store's units: a small job, stores, pushes of
// constant gradients and pulls of every weight, through ShardStore.
#ifndef PS_SERVER_SHARD_SHARD_TEST_UTIL_H_
#define PS_SERVER_SHARD_SHARD_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/fake_clock.h"
#include "proto/config.pb.h"
#include "proto/parameter_service.pb.h"
#include "server/shard/shard_store.h"

namespace ps::server {

// A far deadline for waits that the test releases itself, and a past one
// for waits that must time out at once.
inline absl::Time Far() { return absl::Now() + absl::Seconds(30); }
inline absl::Time Past() { return absl::InfinitePast(); }

// Two tensors of constant 1.0 weights ("a": 40 floats, chunks 0-2; "b": 24,
// chunks 3-4), small chunks so that each spans several, SGD with lr 1:
// w = 1 - (average) gradient.
JobSpec MakeSpec(ConsistencySpec::Model model);

std::unique_ptr<ShardStore> NewStore(FakeClock* clock,
                                     const std::string& data_dir = "",
                                     int apply_threads = 1);

// SetupJob of "job1" with `spec` and `workers` on shard `shard` of
// `num_shards`.
SetupJobRequest JobSetup(const JobSpec& spec, std::vector<int64_t> workers,
                         int shard = 0, int num_shards = 1);

PushChunk Contiguous(int64_t id, DType dtype, int64_t n,
                     absl::string_view data);

PushArgs PushHeader(int64_t worker, uint64_t seq, int64_t clock,
                    int64_t base_version, bool end_of_step);

// A push of `value` to every chunk of the shard (base version `base`, 0 if
// negative).
absl::StatusOr<PushResult> PushValue(ShardStore& store, int64_t worker,
                                     uint64_t seq, int64_t clock, float value,
                                     bool end_of_step, int64_t base = -1,
                                     absl::Time deadline = Far());

// A push of `value` to the chunks `ids` only, at base version `clock`.
absl::StatusOr<PushResult> PushChunks(ShardStore& store, int64_t worker,
                                      uint64_t seq, int64_t clock, float value,
                                      const std::vector<int64_t>& ids,
                                      bool final, bool end_of_step = false);

// Every weight of the shard, in chunk order (pulled as `worker`).
std::vector<float> Weights(ShardStore& store, int64_t worker = 1,
                           int64_t* version = nullptr);

// Chunks `ids` at min_version, waiting until `deadline`; their weights in
// `out` (chunk order).
absl::StatusOr<PullResult> PullChunks(ShardStore& store,
                                      const std::vector<int64_t>& ids,
                                      int64_t min_version, absl::Time deadline,
                                      std::vector<float>* out = nullptr);

// Every weight of the job spread over `stores`, by (tensor, offset).
std::vector<float> GatherWeights(
    std::vector<std::unique_ptr<ShardStore>>& stores);

void ExpectAll(const std::vector<float>& w, float value);

// The job's version on `store` (-1 if it has no status).
int64_t Version(ShardStore& store);

// An empty directory `name` under the test's temporary directory.
std::string TempDir(const std::string& name);

}  // namespace ps::server

#endif  // PS_SERVER_SHARD_SHARD_TEST_UTIL_H_
