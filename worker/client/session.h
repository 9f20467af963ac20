// What every message of one worker in one job carries, and the per-shard
// state that every kind of message shares: the push sequence numbers (one
// sequence per shard, whatever the pushes carry: a shard applies each
// worker's pushes exactly once, in sequence order) and the version of each
// shard's weights in the last answer that carried them (the default base
// version of a push). Thread-safe.
#ifndef PS_WORKER_CLIENT_SESSION_H_
#define PS_WORKER_CLIENT_SESSION_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/platform/rpc.h"
#include "proto/parameter_service.pb.h"

namespace ps::client {

class Session {
 public:
  // A push's base version: what the last pull received from its shard
  // (shards count their versions independently under ASP/SSP).
  static constexpr int64_t kPulledVersion = -1;

  // Push sequence numbers are SeqBase(incarnation) + 1, + 2, ...
  // (common/platform/rpc.h).
  Session(std::string job_id, int64_t worker_id, int num_shards,
          int64_t incarnation)
      : job_id_(std::move(job_id)),
        worker_id_(worker_id),
        next_seq_(num_shards),
        pulled_version_(num_shards) {
    for (auto& s : next_seq_) s.store(SeqBase(incarnation) + 1);
    for (auto& v : pulled_version_) v.store(0);
  }

  const std::string& job_id() const { return job_id_; }
  int64_t worker_id() const { return worker_id_; }

  // The header of a push to `shard` (which it names: a server may hold
  // several shards of the job), taking its next sequence number.
  PushRequest PushHeader(int shard, int64_t clock, int64_t base_version,
                         bool end_of_step) {
    PushRequest header;
    header.set_job_id(job_id_);
    header.set_worker_id(worker_id_);
    header.set_seq(next_seq_[shard].fetch_add(1));
    header.set_clock(clock);
    header.set_base_version(base_version == kPulledVersion
                                ? pulled_version_[shard].load()
                                : base_version);
    header.set_end_of_step(end_of_step);
    header.set_shard(shard);
    return header;
  }

  void SetPulledVersion(int shard, int64_t version) {
    pulled_version_[shard].store(version);
  }

 private:
  const std::string job_id_;
  const int64_t worker_id_;
  std::vector<std::atomic<uint64_t>> next_seq_;       // per shard
  std::vector<std::atomic<int64_t>> pulled_version_;  // per shard
};

}  // namespace ps::client

#endif  // PS_WORKER_CLIENT_SESSION_H_
