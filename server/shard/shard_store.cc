// The shard store: the map of jobs and the order in which a call goes
// through the units over a job's state (the file comment of shard_store.h
// lists them).
#include "server/shard/shard_store.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/file_system.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "server/shard/apply_pool.h"
#include "server/shard/bsp_step.h"
#include "server/shard/job.h"
#include "server/shard/job_checkpoint.h"
#include "server/shard/job_setup.h"
#include "server/shard/pull_wait.h"
#include "server/shard/push_apply.h"
#include "server/shard/push_validation.h"
#include "server/shard/shard_image.h"
#include "server/shard/shard_log.h"
#include "server/shard/shard_status.h"

namespace ps::server {
namespace {

// A call that names its shard (PushRequest.shard) must have reached it.
absl::Status CheckShard(const Job& job, int shard) {
  if (shard < 0 || shard == job.shard_index) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a call for shard ", shard, " of job '", job.id,
                   "' reached shard ", job.shard_index, " of it"));
}

class ShardStoreImpl final : public ShardStore {
 public:
  explicit ShardStoreImpl(const ShardStoreOptions& options)
      : options_(options),
        clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        apply_pool_(std::max(1, options.apply_threads)),
        checkpoints_(options.data_dir,
                     options.file_system != nullptr ? options.file_system
                                                    : FileSystem::Posix(),
                     clock_) {}

  absl::StatusOr<SetupJobResponse> SetupJob(
      const SetupJobRequest& request) override;
  absl::Status TeardownJob(const TeardownJobRequest& request) override;
  absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const UpdateMembershipRequest& request) override;
  absl::StatusOr<PushResult> Push(const PushArgs& args,
                                  absl::Time deadline) override;
  absl::StatusOr<PullResult> PullWithRows(const PullArgs& args,
                                          absl::Time deadline, ChunkSink sink,
                                          const SparseSink* rows) override;
  bool PushMayWait(const PushArgs& args) override {
    if (!args.end_of_step) return false;
    absl::StatusOr<std::shared_ptr<Job>> job = FindJob(args.job_id);
    return job.ok() && EndOfStepMayWait(**job, args);
  }
  absl::StatusOr<CheckpointResponse> Checkpoint(
      absl::string_view job_id) override {
    PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
    return checkpoints_.WriteNow(*job);
  }
  absl::Status CheckpointDue() override;
  absl::Status CheckpointAll() override;
  void WaitForCheckpointWork(absl::Duration timeout) override {
    absl::MutexLock l(&work_mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) {
      return snapshots_waiting_ || work_shutdown_;
    };
    work_mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    snapshots_waiting_ = false;
  }
  void Shutdown() override;
  absl::StatusOr<ShardStatus> GetShardStatus(absl::string_view job_id,
                                             int shard) override {
    PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
    PS_RETURN_IF_ERROR(CheckShard(*job, shard));
    return JobStatus(*job);
  }
  absl::StatusOr<ReplicateResponse> Replicate(
      const ReplicateRequest&) override {
    return absl::UnimplementedError(
        "this shard store holds no replicas (ps_server serves replicated "
        "shards through its ShardRouter)");
  }
  absl::StatusOr<std::shared_ptr<const Placement>> GetPlacement(
      absl::string_view job_id) override {
    PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
    return job->placement;
  }
  absl::StatusOr<ShardImage> Image(absl::string_view job_id) override {
    PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
    return ImageOf(*job);
  }
  absl::Status Install(absl::string_view job_id,
                       const ShardImage& image) override {
    PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
    return InstallImage(*job, image);
  }

 private:
  absl::StatusOr<std::shared_ptr<Job>> FindJob(absl::string_view job_id) {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "job '", job_id, "' is not set up on this parameter server"));
    }
    return it->second;
  }
  // FindJob for pushes and pulls. A job this server holds checkpoints of but
  // is not set up (the server restarted) answers UNAVAILABLE: the
  // coordinator is about to set it up again, and the workers keep retrying.
  absl::StatusOr<std::shared_ptr<Job>> FindJobForData(
      absl::string_view job_id) {
    absl::StatusOr<std::shared_ptr<Job>> job = FindJob(job_id);
    if (!job.ok() && options_.restarted) {
      return absl::UnavailableError(absl::StrCat(
          "job '", job_id,
          "' is not set up on this parameter server (it restarted without "
          "it: the coordinator sets the job up again here or moves its shard "
          "to a replica)"));
    }
    if (job.ok() || !checkpoints_.enabled() || job_id.empty() ||
        job_id[0] == '.' ||
        job_id.find_first_of("/\\") != absl::string_view::npos) {
      return job;
    }
    if (checkpoints_.HasJobDir(job_id)) {
      return absl::UnavailableError(absl::StrCat(
          "job '", job_id,
          "' is not set up on this parameter server yet (it restarted; its "
          "checkpoints are here and the coordinator restores them)"));
    }
    return job;
  }
  // SetupJob of a job this shard may hold already.
  struct Existing {
    // The job's current state (same spec and layout): SetupJob is done.
    std::optional<SetupJobResponse> response;
    // With replace: the old job, torn down.
    std::shared_ptr<Job> replaced;
  };
  absl::StatusOr<Existing> SetupExisting(const SetupJobRequest& request,
                                         const JobSpec& spec);
  // A new job's restore, start version, members and metrics (SetupJob).
  absl::StatusOr<bool> StartJob(Job& job, const SetupJobRequest& request);
  // BSP: closes step `step` with the gradients of `workers`.
  void CloseStep(Job& job, int64_t step, const std::vector<int64_t>& workers);

  const ShardStoreOptions options_;
  const Clock* const clock_;
  ApplyPool apply_pool_;
  JobCheckpoints checkpoints_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_
      ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Wakes WaitForCheckpointWork.
  absl::Mutex work_mu_;
  bool snapshots_waiting_ ABSL_GUARDED_BY(work_mu_) = false;
  bool work_shutdown_ ABSL_GUARDED_BY(work_mu_) = false;
};

absl::StatusOr<ShardStoreImpl::Existing> ShardStoreImpl::SetupExisting(
    const SetupJobRequest& request, const JobSpec& spec) {
  absl::MutexLock l(&mu_);
  if (shutting_down_) {
    return absl::UnavailableError("the parameter server is shutting down");
  }
  Existing existing;
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) return existing;
  if (request.replace()) {
    // A job-wide rollback: the job starts again from a checkpoint; calls
    // still waiting on the old state are released with UNAVAILABLE.
    existing.replaced = it->second;
    jobs_.erase(it);
    absl::MutexLock jl(&existing.replaced->mu);
    existing.replaced->torn_down = true;
    existing.replaced->replaced = true;
    return existing;
  }
  Job& job = *it->second;
  if (job.spec.SerializeAsString() != spec.SerializeAsString() ||
      job.shard_index != request.shard_index() ||
      job.num_shards != request.num_shards()) {
    return absl::AlreadyExistsError(
        absl::StrCat("job '", request.job_id(),
                     "' is already set up on this shard with a different spec "
                     "or shard layout; tear it down first"));
  }
  SetupJobResponse& response = existing.response.emplace();
  absl::MutexLock jl(&job.mu);
  response.set_version(job.version);
  response.set_num_chunks(job.placement->shard_chunks[job.shard_index].size());
  return existing;
}

absl::StatusOr<bool> ShardStoreImpl::StartJob(Job& job,
                                              const SetupJobRequest& request) {
  bool restored = false;
  if (request.restore()) {
    PS_ASSIGN_OR_RETURN(
        restored, checkpoints_.Restore(job, request.restore_max_version()));
  }
  absl::MutexLock jl(&job.mu);
  if (request.start_version() > 0) {
    if (job.version != request.start_version()) {
      ShardLog(absl::StrCat("job ", job.id, ": continuing the weights of ",
                            "version ", job.version, " as version ",
                            request.start_version()));
    }
    job.version = request.start_version();
  }
  SetMembers(job, {request.worker_ids().begin(), request.worker_ids().end()},
             {request.worker_joins().begin(), request.worker_joins().end()});
  job.last_checkpoint_version = job.version;
  job.last_checkpoint_time = clock_->Now();
  return restored;
}

absl::StatusOr<SetupJobResponse> ShardStoreImpl::SetupJob(
    const SetupJobRequest& request) {
  PS_ASSIGN_OR_RETURN(const JobSpec spec, CheckSetupRequest(request));
  PS_ASSIGN_OR_RETURN(Existing existing, SetupExisting(request, spec));
  if (existing.response.has_value()) return *std::move(existing.response);
  if (existing.replaced != nullptr) {
    // Its states taken at multiples of every_versions but not yet written
    // are restore candidates too (the other shards may hold those versions).
    absl::Status s = checkpoints_.WritePending(*existing.replaced);
    if (!s.ok()) {
      ShardLog(absl::StrCat("job ", request.job_id(),
                            ": writing its pending checkpoints before the "
                            "rollback failed: ",
                            s.message()));
    }
  }
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, NewJob(request, spec));
  PS_ASSIGN_OR_RETURN(const bool restored, StartJob(*job, request));
  if (options_.metrics != nullptr) RegisterJobMetrics(*options_.metrics, *job);
  SetupJobResponse response;
  {
    absl::MutexLock jl(&job->mu);
    response.set_version(job->version);
    if (job->metrics.version != nullptr) {
      job->metrics.version->Set(job->version);
    }
  }
  const size_t num_chunks =
      job->placement->shard_chunks[job->shard_index].size();
  response.set_num_chunks(num_chunks);
  response.set_restored(restored);
  absl::MutexLock l(&mu_);
  auto [it, inserted] = jobs_.emplace(job->id, job);
  if (!inserted) {
    return absl::AbortedError(absl::StrCat(
        "job '", job->id, "' was set up concurrently; retry SetupJob"));
  }
  ShardLog(absl::StrCat("job ", job->id, ": shard ", job->shard_index, " of ",
                        job->num_shards, ", ", num_chunks, " chunks, version ",
                        response.version(), restored ? " (restored)" : ""));
  return response;
}

absl::Status ShardStoreImpl::TeardownJob(const TeardownJobRequest& request) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(request.job_id()));
  if (request.final_checkpoint()) {
    PS_RETURN_IF_ERROR(checkpoints_.WriteNow(*job).status());
  }
  {
    absl::MutexLock jl(&job->mu);
    job->torn_down = true;  // releases waiting pulls and barriers
  }
  {
    absl::MutexLock l(&mu_);
    jobs_.erase(request.job_id());
  }
  // The tables go with the last reference: this one, unless a call still
  // in flight holds the job a moment longer (its memory is then reused by
  // the next job rather than released).
  job.reset();
  if (options_.after_teardown) options_.after_teardown();
  return absl::OkStatus();
}

absl::StatusOr<UpdateMembershipResponse> ShardStoreImpl::UpdateMembership(
    const UpdateMembershipRequest& request) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(request.job_id()));
  std::vector<int64_t> take;
  int64_t step = 0;
  UpdateMembershipResponse response;
  {
    absl::MutexLock jl(&job->mu);
    response.set_version(job->version);
    if (request.membership_epoch() < job->membership_epoch) {
      return response;  // a stale update that crossed a newer one
    }
    job->membership_epoch = request.membership_epoch();
    SetMembers(*job, {request.worker_ids().begin(), request.worker_ids().end()},
               {request.worker_joins().begin(), request.worker_joins().end()});
    step = job->version;
    if (job->model() == ConsistencySpec::BSP && !job->closing &&
        !job->completed.empty()) {
      TakeStepIfReady(*job, &take);
    }
  }
  if (!take.empty()) CloseStep(*job, step, take);
  absl::MutexLock jl(&job->mu);
  response.set_version(job->version);
  return response;
}

void ShardStoreImpl::CloseStep(Job& job, int64_t step,
                               const std::vector<int64_t>& workers) {
  ApplyStep(job, step, workers, apply_pool_, checkpoints_.enabled(), [this] {
    absl::MutexLock wl(&work_mu_);
    snapshots_waiting_ = true;
  });
}

absl::StatusOr<PushResult> ShardStoreImpl::Push(const PushArgs& args,
                                                absl::Time deadline) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJobForData(args.job_id));
  PS_RETURN_IF_ERROR(CheckShard(*job, args.shard));
  PS_RETURN_IF_ERROR(CheckPushHeader(*job, args));
  PS_ASSIGN_OR_RETURN(PreparedPush prepared, PrepareTables(*job, args));
  PushResult result;
  Admission admission;
  {
    absl::ReleasableMutexLock jl(&job->mu);
    PS_ASSIGN_OR_RETURN(admission, AdmitPush(*job, args, *clock_, &result));
    if (admission.outcome == Admission::Outcome::kDropped) return result;
    if (admission.outcome == Admission::Outcome::kDuplicate) {
      // A retried end of step whose first attempt timed out waiting for
      // the worker's earlier pushes: its data is in, its end of step is
      // counted now.
      std::vector<int64_t> take;
      if (admission.retry_end_of_step) {
        PS_RETURN_IF_ERROR(
            EndBspStep(*job, args, deadline, /*retry=*/true, &result, &take));
        result.version = job->version;
      }
      jl.Release();
      if (!take.empty()) {
        CloseStep(*job, args.clock, take);
        absl::MutexLock l(&job->mu);
        result.version = job->version;
      }
      return result;
    }
  }
  PS_ASSIGN_OR_RETURN(const AppliedEarly applied_early,
                      ApplyPush(*job, args, admission, prepared));
  std::vector<int64_t> take;
  PS_RETURN_IF_ERROR(
      FinishPush(*job, args, deadline, applied_early, &result, &take));
  if (!take.empty()) {
    CloseStep(*job, args.clock, take);
    absl::MutexLock jl(&job->mu);
    result.version = job->version;
  }
  return result;
}

absl::StatusOr<PullResult> ShardStoreImpl::PullWithRows(
    const PullArgs& args, absl::Time deadline, ChunkSink sink,
    const SparseSink* rows) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJobForData(args.job_id));
  PS_RETURN_IF_ERROR(CheckShard(*job, args.shard));
  PS_RETURN_IF_ERROR(CheckSparsePull(*job, args, rows != nullptr));
  for (const auto& table : job->tables) {
    PS_RETURN_IF_ERROR(table->CheckPull(args));
  }
  PullResult result;
  PS_ASSIGN_OR_RETURN(result.min_clock, AwaitPull(*job, args, deadline));
  int64_t bytes = 0;
  {
    absl::ReaderMutexLock al(&job->apply_mu);
    {
      absl::MutexLock jl(&job->mu);
      result.version = job->PullVersion(args);
    }
    if (!args.version_only) {
      PullSinks sinks;
      sinks.chunks = &sink;
      sinks.sparse = rows;
      for (const auto& table : job->tables) {
        PS_ASSIGN_OR_RETURN(const int64_t table_bytes,
                            table->Pull(args, sinks));
        bytes += table_bytes;
      }
    }
  }
  job->pulls.fetch_add(1, std::memory_order_relaxed);
  job->bytes_out.fetch_add(bytes, std::memory_order_relaxed);
  if (job->metrics.pulls != nullptr) {
    job->metrics.pulls->Increment();
    job->metrics.bytes_out->Increment(bytes);
  }
  return result;
}

absl::Status ShardStoreImpl::CheckpointDue() {
  std::vector<std::shared_ptr<Job>> due;
  std::vector<std::shared_ptr<Job>> aligned;
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [id, job] : jobs_) {
      if (job->model() == ConsistencySpec::BSP &&
          job->spec.checkpoint().every_versions() > 0) {
        aligned.push_back(job);
      }
      if (IsCheckpointDue(*job, now)) due.push_back(job);
    }
  }
  absl::Status first;
  for (auto& job : aligned) {
    absl::Status s = checkpoints_.WritePending(*job);
    if (!s.ok() && first.ok()) first = s;
  }
  for (auto& job : due) {
    if (!checkpoints_.enabled()) break;
    absl::Status s = checkpoints_.WriteNow(*job).status();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status ShardStoreImpl::CheckpointAll() {
  std::vector<std::shared_ptr<Job>> all;
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, job] : jobs_) all.push_back(job);
  }
  absl::Status first;
  for (auto& job : all) {
    absl::Status s = checkpoints_.WriteNow(*job).status();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

void ShardStoreImpl::Shutdown() {
  {
    absl::MutexLock wl(&work_mu_);
    work_shutdown_ = true;
  }
  std::vector<std::shared_ptr<Job>> all;
  {
    absl::MutexLock l(&mu_);
    shutting_down_ = true;
    for (auto& [id, job] : jobs_) all.push_back(job);
  }
  for (auto& job : all) {
    absl::MutexLock jl(&job->mu);
    job->shutting_down = true;
  }
}

}  // namespace

int DefaultApplyThreads() {
  return static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(
    const ShardStoreOptions& options) {
  if (options.apply_threads < 1 || options.apply_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "apply_threads must be in [1, 256], got ", options.apply_threads));
  }
  return std::make_unique<ShardStoreImpl>(options);
}

}  // namespace ps::server
