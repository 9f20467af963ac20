// Fakes for the coordinator units' tests (testonly): a job store that
// records what it was asked to write, and shards that answer from memory.
#ifndef PS_SERVER_COORDINATOR_TEST_FAKES_H_
#define PS_SERVER_COORDINATOR_TEST_FAKES_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/shard_client.h"

namespace ps::coordinator {

// Records every write; `error` (when set) fails each of them.
class RecordingJobStore : public JobStore {
 public:
  struct Appended {
    std::string job_id;
    std::vector<JobEvent> events;
    std::vector<MetricPoint> points;
  };

  absl::Status PutRecord(const JobRecord& record, int64_t seq) override {
    records.emplace_back(record, seq);
    return error;
  }
  absl::Status Append(absl::string_view job_id,
                      absl::Span<const JobEvent> events,
                      absl::Span<const MetricPoint> points) override {
    appends.push_back({std::string(job_id),
                       std::vector<JobEvent>(events.begin(), events.end()),
                       std::vector<MetricPoint>(points.begin(), points.end())});
    return error;
  }
  absl::StatusOr<std::vector<StoredJob>> LoadAll() override {
    return std::vector<StoredJob>{};
  }
  absl::Status PutNextMemberId(int64_t) override { return error; }
  absl::StatusOr<int64_t> GetNextMemberId() override { return 1; }
  const std::string& dir() const override { return dir_; }

  std::vector<std::pair<JobRecord, int64_t>> records;
  std::vector<Appended> appends;
  absl::Status error;

 private:
  std::string dir_ = "/nonexistent";
};

// Shards at any address: they hold the jobs set up on them, restore the
// newest of their checkpoint versions within a request's bound, and record
// every call. Thread-safe.
class FakeShardClient : public ShardClient {
 public:
  absl::StatusOr<SetupJobResponse> SetupJob(
      const std::string& address, const SetupJobRequest& request) override {
    absl::MutexLock l(&mu_);
    setups.emplace_back(address, request);
    auto err = setup_errors.find(address);
    if (err != setup_errors.end()) return err->second;
    if (!setup_error.ok()) return setup_error;
    jobs[address].insert(request.job_id());
    SetupJobResponse r;
    if (request.restore()) {
      auto it = checkpoints.find(address);
      const std::vector<int64_t>& have =
          it == checkpoints.end() ? default_checkpoints : it->second;
      for (int64_t v : have) {
        if ((request.restore_max_version() == 0 ||
             v <= request.restore_max_version()) &&
            v > r.version()) {
          r.set_version(v);
        }
      }
      r.set_restored(r.version() > 0);
    }
    if (request.start_version() > 0) r.set_version(request.start_version());
    return r;
  }
  absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const std::string& address,
      const UpdateMembershipRequest& request) override {
    absl::MutexLock l(&mu_);
    memberships.emplace_back(address, request);
    return UpdateMembershipResponse();
  }
  absl::Status TeardownJob(const std::string& address,
                           const TeardownJobRequest& request) override {
    absl::MutexLock l(&mu_);
    teardowns.emplace_back(address, request);
    if (!teardown_error.ok()) return teardown_error;
    jobs[address].erase(request.job_id());
    return absl::OkStatus();
  }
  absl::StatusOr<ShardStatus> GetShardStatus(
      const std::string& address,
      const GetShardStatusRequest& request) override {
    absl::MutexLock l(&mu_);
    if (!jobs[address].count(request.job_id())) {
      return absl::NotFoundError("no such job on this shard");
    }
    ShardStatus s = status;
    s.set_job_id(request.job_id());
    return s;
  }
  // Forgets every job at `address` (a restarted shard).
  void Restart(const std::string& address) {
    absl::MutexLock l(&mu_);
    jobs[address].clear();
  }

  // Tests set these before, and read them after, the calls.
  std::vector<std::pair<std::string, SetupJobRequest>> setups;
  std::vector<std::pair<std::string, UpdateMembershipRequest>> memberships;
  std::vector<std::pair<std::string, TeardownJobRequest>> teardowns;
  std::map<std::string, absl::Status> setup_errors;  // by address
  absl::Status setup_error;  // at every address not in setup_errors
  absl::Status teardown_error;
  ShardStatus status;
  std::map<std::string, std::vector<int64_t>> checkpoints;  // by address
  // The checkpoint versions of an address not in `checkpoints`.
  std::vector<int64_t> default_checkpoints;
  std::map<std::string, std::set<std::string>> jobs;  // held, by address

 private:
  absl::Mutex mu_;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_TEST_FAKES_H_
