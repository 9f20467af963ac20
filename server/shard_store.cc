#include "server/shard_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <set>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/config.h"
#include "common/float_runs.h"
#include "common/initializer.h"
#include "common/model.h"
#include "common/payload_codec.h"
#include "common/rpc.h"
#include "common/status.h"
#include "server/apply_pool.h"
#include "server/checkpoint.h"
#include "server/optimizer.h"

namespace ps::server {
namespace {

void LogLine(const std::string& line) {
  std::fprintf(stderr, "[ps_server] %s\n", line.c_str());
}

// Exactly-once bookkeeping of one worker's sequence numbers: everything up to
// `contiguous` is done, plus the sparse set above it; bounded because gaps
// close as the pushes complete (rejected ones consume their number too).
// BSP states taken at multiples of every_versions and not yet written, per
// job: enough for the checkpoint thread to write every one of them unless
// the disk is much slower than the steps.
constexpr size_t kMaxPendingSnapshots = 4;

struct SeqTracker {
  SeqTracker() = default;
  // Numbers of incarnation i start at SeqBase(i) + 1.
  explicit SeqTracker(uint64_t base) : contiguous(base) {}
  uint64_t contiguous = 0;
  absl::flat_hash_set<uint64_t> done_above;
  absl::flat_hash_set<uint64_t> in_flight;

  bool Seen(uint64_t s) const {
    return s <= contiguous || done_above.contains(s) || in_flight.contains(s);
  }
  void Finish(uint64_t s) {
    in_flight.erase(s);
    if (s <= contiguous) return;
    done_above.insert(s);
    while (done_above.erase(contiguous + 1) > 0) ++contiguous;
    // A lost seq must not make the set grow forever.
    constexpr size_t kMaxSparse = 1 << 16;
    if (done_above.size() > kMaxSparse) {
      uint64_t lowest = *std::min_element(done_above.begin(), done_above.end());
      contiguous = lowest - 1;
      while (done_above.erase(contiguous + 1) > 0) ++contiguous;
    }
  }
};

struct WorkerState {
  bool active = false;
  int64_t clock = 0;
  int64_t last_push_ms = 0;
  SeqTracker seq;
};

struct StagedGrad {
  int64_t step = -1;
  std::vector<float> grad;
  bool final = false;  // pushed with chunks_final
};

struct ChunkState {
  explicit ChunkState(const Chunk& c) : chunk(c) {}
  const Chunk chunk;
  absl::Mutex mu;
  // The published weights, never written once a pull may hold them.
  std::shared_ptr<std::vector<float>> weights ABSL_GUARDED_BY(mu);
  // The previous buffer, reused for the next update when no pull holds it.
  std::shared_ptr<std::vector<float>> spare ABSL_GUARDED_BY(mu);
  OptimizerSlots slots ABSL_GUARDED_BY(mu);
  // BSP: each worker's gradient of the open step, merged when it closes.
  absl::flat_hash_map<int64_t, StagedGrad> staged ABSL_GUARDED_BY(mu);
  // BSP: the step whose update was applied before the step closed (every
  // worker's gradient complete); -1: none. Until it closes, `spare` holds
  // the weights before the update and `pre_slots` the optimizer state, for
  // checkpoints of the open step.
  int64_t early_step ABSL_GUARDED_BY(mu) = -1;
  OptimizerSlots pre_slots ABSL_GUARDED_BY(mu);
  // BSP: the last step whose update this chunk has (early or at the close).
  int64_t applied_step ABSL_GUARDED_BY(mu) = -1;
};

// The buffer the chunk's next weights are written into: the previous one
// when no pull holds it any more, else a fresh one.
absl::Span<float> Spare(ChunkState& chunk)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
  // Only this chunk's lock hands out references, so a count of 1 cannot
  // grow behind our back.
  if (chunk.spare == nullptr || chunk.spare.use_count() != 1) {
    chunk.spare = std::make_shared<std::vector<float>>(chunk.weights->size());
  }
  return absl::MakeSpan(*chunk.spare);
}

// One optimizer step on a chunk, written into the spare buffer, then
// published.
void UpdateChunk(const Optimizer& optimizer, float lr, float scale,
                 absl::Span<const float> grad, ChunkState& chunk)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
  optimizer.ApplyTo(lr, scale, grad, *chunk.weights, Spare(chunk),
                    &chunk.slots);
  std::swap(chunk.weights, chunk.spare);
}

struct JobMetrics {
  prometheus::Counter* pushes = nullptr;
  prometheus::Counter* pulls = nullptr;
  prometheus::Counter* bytes_in = nullptr;
  prometheus::Counter* bytes_out = nullptr;
  prometheus::Counter* dropped = nullptr;
  prometheus::Counter* rejected = nullptr;
  prometheus::Counter* duplicate = nullptr;
  prometheus::Gauge* version = nullptr;
  prometheus::Histogram* apply_seconds = nullptr;
  prometheus::Histogram* staleness = nullptr;
};

struct Job {
  std::string id;
  JobSpec spec;
  int shard_index = 0;
  int num_shards = 1;
  std::shared_ptr<const Placement> placement;
  std::vector<TensorSpec> tensors;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<int> local_index;  // by chunk id; -1: another shard's
  std::vector<std::unique_ptr<ChunkState>> chunks;

  // Readers: pushes applying to chunks, pulls, BSP staging. Writer: a BSP
  // step being applied and checkpoint snapshots, so that both see (and a
  // pull that waited for a version reads) whole steps only.
  absl::Mutex apply_mu;
  // Serialises checkpoint writers of this job; never taken on the data path.
  absl::Mutex checkpoint_mu;
  // BSP with every_versions: the state at the last version that is a
  // multiple of it, taken when that step was applied and written by the
  // next CheckpointDue. Every shard of the job checkpoints the same
  // versions, so a job-wide rollback finds one version on all of them.
  // Oldest first; at most kMaxPendingSnapshots (the oldest is dropped when
  // the disk falls behind).
  absl::Mutex snapshot_mu;
  std::deque<std::shared_ptr<CheckpointData>> aligned_snapshots
      ABSL_GUARDED_BY(snapshot_mu);

  absl::Mutex mu;
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  bool closing ABSL_GUARDED_BY(mu) = false;
  // BSP, by local chunk index: the step each chunk was last applied for
  // before its step closed (ChunkState::early_step, here for waiting
  // pulls); early_step: the last step with such a chunk.
  std::vector<int64_t> early_applied ABSL_GUARDED_BY(mu);
  int64_t early_step ABSL_GUARDED_BY(mu) = -1;
  std::set<int64_t> completed ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<int64_t, WorkerState> workers ABSL_GUARDED_BY(mu);
  int64_t membership_epoch ABSL_GUARDED_BY(mu) = 0;
  int64_t last_checkpoint_version ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_checkpoint_time ABSL_GUARDED_BY(mu);
  bool torn_down ABSL_GUARDED_BY(mu) = false;
  // Torn down by a SetupJob with replace (a job-wide rollback): waiting
  // calls get UNAVAILABLE, the workers are about to restart.
  bool replaced ABSL_GUARDED_BY(mu) = false;
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
  // SetupJobRequest.incarnation; only pushes of this incarnation apply.
  int64_t incarnation = 0;

  std::atomic<int64_t> pushes{0}, pulls{0}, dropped{0}, rejected{0},
      duplicate{0}, blocked_pulls{0}, bytes_in{0}, bytes_out{0};
  JobMetrics metrics;

  ConsistencySpec::Model model() const { return spec.consistency().model(); }

  int64_t MinActiveClock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int64_t m = -1;
    for (const auto& [id, w] : workers) {
      if (w.active && (m < 0 || w.clock < m)) m = w.clock;
    }
    return m < 0 ? 0 : m;
  }
  // Whether the worker's pushes numbered up to `seq` have all been applied
  // (or no longer can be: the worker left, the job is going away).
  bool PushesLanded(int64_t worker_id, uint64_t seq) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (torn_down || shutting_down) return true;
    auto it = workers.find(worker_id);
    return it == workers.end() || !it->second.active ||
           it->second.seq.contiguous >= seq;
  }
  // BSP: the version a pull gets, the lowest of its chunks' (a chunk
  // applied before the open step closed is one ahead of the job); the
  // job's own with whole_step.
  int64_t PullVersion(const PullArgs& args) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (args.whole_step || early_step != version) return version;
    auto ahead = [&](int local) { return early_applied[local] == version; };
    bool all = true;
    if (args.chunk_ids.empty()) {
      for (size_t local = 0; local < chunks.size() && all; ++local) {
        all = ahead(static_cast<int>(local));
      }
    } else {
      for (size_t k = 0; k < args.chunk_ids.size() && all; ++k) {
        all = ahead(local_index[args.chunk_ids[k]]);
      }
    }
    return all ? version + 1 : version;
  }
  int NumActive() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int n = 0;
    for (const auto& [id, w] : workers) n += w.active ? 1 : 0;
    return n;
  }
  // BSP: how many gradients close a step.
  int Needed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return std::max(1, NumActive() - spec.consistency().backup_workers());
  }
};

// Loops over gradients, vectorised (-O3) and cloned for AVX2.
// (Not under sanitizers: their runtimes are not up yet when the loader runs
// the ifunc resolvers of the clones, and TSan crashes there.)
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define PS_VECTOR_CLONES
#else
#define PS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif

// NaN and +-Inf are exactly the floats whose exponent bits are all ones; an
// integer OR-reduction vectorises where a float one would not.
// `p` holds n little-endian floats, at any alignment.
PS_VECTOR_CLONES bool AllFiniteLoop(size_t n, const char* __restrict p) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + 4 * i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

bool AllFinite(absl::Span<const float> g) {
  return AllFiniteLoop(g.size(), reinterpret_cast<const char*>(g.data()));
}

// The same over fp32 payload bytes split into segments (a float may
// straddle two of them).
bool AllFinite(const std::vector<absl::string_view>& segments) {
  return ForEachFloatRun(
      segments, [](const char* p, size_t n) { return AllFiniteLoop(n, p); });
}

size_t PayloadBytes(const PushChunk& c) {
  if (c.segments.empty()) return c.data.size();
  size_t n = 0;
  for (absl::string_view s : c.segments) n += s.size();
  return n;
}

// Gathers a segmented payload into `out` (sized to the payload).
void Gather(const std::vector<absl::string_view>& segments, char* out) {
  for (absl::string_view s : segments) {
    std::memcpy(out, s.data(), s.size());
    out += s.size();
  }
}

PS_VECTOR_CLONES void AddLoop(size_t n, const float* __restrict g,
                              float* __restrict d) {
  for (size_t i = 0; i < n; ++i) d[i] += g[i];
}

class ShardStoreImpl final : public ShardStore {
 public:
  explicit ShardStoreImpl(const ShardStoreOptions& options)
      : options_(options),
        clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        fs_(options.file_system != nullptr ? options.file_system
                                           : FileSystem::Posix()),
        apply_pool_(std::max(1, options.apply_threads)) {}

  absl::StatusOr<SetupJobResponse> SetupJob(
      const SetupJobRequest& request) override;
  absl::Status TeardownJob(const TeardownJobRequest& request) override;
  absl::StatusOr<UpdateMembershipResponse> UpdateMembership(
      const UpdateMembershipRequest& request) override;
  absl::StatusOr<PushResult> Push(const PushArgs& args,
                                  absl::Time deadline) override;
  absl::StatusOr<PullResult> Pull(const PullArgs& args, absl::Time deadline,
                                  ChunkSink sink) override;
  bool PushMayWait(const PushArgs& args) override {
    if (!args.end_of_step) return false;
    absl::StatusOr<std::shared_ptr<Job>> job = FindJob(args.job_id);
    if (!job.ok() || (*job)->model() != ConsistencySpec::BSP) return false;
    absl::MutexLock jl(&(*job)->mu);
    auto it = (*job)->workers.find(args.worker_id);
    return it != (*job)->workers.end() && it->second.active && args.seq > 0 &&
           it->second.seq.contiguous + 1 < args.seq;
  }
  absl::StatusOr<CheckpointResponse> Checkpoint(
      absl::string_view job_id) override;
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
  void Shutdown() override {
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
  absl::StatusOr<ShardStatus> GetShardStatus(absl::string_view job_id) override;
  absl::StatusOr<std::shared_ptr<const Placement>> GetPlacement(
      absl::string_view job_id) override {
    PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
    return job->placement;
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
    if (job.ok() || options_.data_dir.empty() || job_id.empty() ||
        job_id[0] == '.' ||
        job_id.find_first_of("/\\") != absl::string_view::npos) {
      return job;
    }
    if (fs_->IsDirectory(JobDir(std::string(job_id)))) {
      return absl::UnavailableError(absl::StrCat(
          "job '", job_id,
          "' is not set up on this parameter server yet (it restarted; its "
          "checkpoints are here and the coordinator restores them)"));
    }
    return job;
  }
  // Checks the push's chunks and readies their gradients: (*grads)[i] is
  // the fp32 gradient of args.chunks[i], or empty where it is still in the
  // receive buffers (split over several, or with `checked_apply`, any fp32
  // payload: the optimizer reads and checks it while it applies it).
  absl::Status ValidateChunks(const Job& job, const PushArgs& args,
                              bool checked_apply,
                              std::vector<std::vector<float>>* widened,
                              std::vector<absl::Span<const float>>* grads);
  // ASP/SSP with an optimizer that CanApplyChecked: applies the push with
  // the NaN/Inf check fused in (the chunks' new weights go to their spare
  // buffers and are published together once all are finite, under all of
  // their locks). INVALID_ARGUMENT, with nothing changed, if one is not.
  absl::Status ApplyChecked(Job& job, const PushArgs& args, float lr,
                            const std::vector<absl::Span<const float>>& grads)
      ABSL_SHARED_LOCKS_REQUIRED(job.apply_mu);
  // BSP: if the open step has enough gradients, takes its completed set and
  // marks it closing; the caller then runs ApplyStep without `job.mu`.
  static bool TakeStepIfReady(Job& job, std::vector<int64_t>* workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);
  // BSP: counts the end of step of push `args` once the worker's pushes
  // numbered below it have landed (waiting up to `deadline`), and takes
  // the step into `take` if that completes it. For a `retry` (a duplicate
  // of a push whose first attempt may have timed out in that wait, its
  // data applied but its end of step not counted) it counts the end of
  // step if that is still missing, and never counts a drop.
  // DEADLINE_EXCEEDED if the earlier pushes did not land in time.
  static absl::Status EndBspStep(Job& job, const PushArgs& args,
                                 absl::Time deadline, bool retry,
                                 PushResult* result, std::vector<int64_t>* take)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);
  void ApplyStep(Job& job, int64_t step, const std::vector<int64_t>& workers);
  // BSP: applies `chunk`'s update of `step` now if every worker of
  // `active` has staged its complete (final) gradient of it; true if so.
  // With `incoming` (a final gradient being pushed by worker
  // `incoming_worker`, not staged): that worker's part is `incoming`.
  static bool ApplyIfComplete(const Job& job, ChunkState& chunk, int64_t step,
                              const std::vector<int64_t>& active, float lr,
                              int64_t incoming_worker = -1,
                              absl::Span<const float> incoming = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  void SetMembers(Job& job, const std::vector<int64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);
  absl::StatusOr<CheckpointResponse> WriteJobCheckpoint(Job& job);
  // Writes `data` (a snapshot of `job`) to disk; takes job.checkpoint_mu.
  absl::StatusOr<CheckpointResponse> WriteSnapshot(Job& job,
                                                   const CheckpointData& data);
  // The job's weights and optimizer state at `version`; the caller holds
  // job.apply_mu as a writer.
  static CheckpointData Snapshot(Job& job, int64_t version);
  // Writes the job's aligned_snapshots, oldest first.
  absl::Status WritePendingSnapshots(Job& job);
  // Loads the newest valid checkpoint at or below max_version (0: any).
  absl::StatusOr<bool> Restore(Job& job, int64_t max_version);
  void Reject(Job& job) {
    job.rejected.fetch_add(1, std::memory_order_relaxed);
    if (job.metrics.rejected != nullptr) job.metrics.rejected->Increment();
  }
  std::string JobDir(const std::string& job_id) const {
    return absl::StrCat(options_.data_dir, "/", job_id);
  }

  const ShardStoreOptions options_;
  const Clock* const clock_;
  FileSystem* const fs_;
  ApplyPool apply_pool_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_
      ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Wakes WaitForCheckpointWork.
  absl::Mutex work_mu_;
  bool snapshots_waiting_ ABSL_GUARDED_BY(work_mu_) = false;
  bool work_shutdown_ ABSL_GUARDED_BY(work_mu_) = false;
};

absl::StatusOr<SetupJobResponse> ShardStoreImpl::SetupJob(
    const SetupJobRequest& request) {
  if (request.job_id().empty()) {
    return absl::InvalidArgumentError("SetupJob: job_id is empty");
  }
  for (char ch : request.job_id()) {
    if (!absl::ascii_isalnum(ch) && ch != '-' && ch != '_' && ch != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("SetupJob: job_id '", request.job_id(),
                       "' may only hold letters, digits, '-', '_' and '.'"));
    }
  }
  if (request.job_id()[0] == '.') {
    return absl::InvalidArgumentError(
        "SetupJob: job_id may not start with '.'");
  }
  if (request.num_shards() < 1 || request.shard_index() < 0 ||
      request.shard_index() >= request.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetupJob: shard_index ", request.shard_index(),
        " is not in [0, num_shards = ", request.num_shards(), ")"));
  }
  ValidationOptions vopts;
  vopts.check_dataset_files = false;
  PS_RETURN_IF_ERROR(
      Annotate(ValidateJobSpec(request.spec(), vopts), "SetupJob: job spec"));
  const JobSpec spec = NormalizeJobSpec(request.spec());

  std::shared_ptr<Job> replaced;
  {
    absl::MutexLock l(&mu_);
    if (shutting_down_) {
      return absl::UnavailableError("the parameter server is shutting down");
    }
    auto it = jobs_.find(request.job_id());
    if (it != jobs_.end() && request.replace()) {
      // A job-wide rollback: the job starts again from a checkpoint; calls
      // still waiting on the old state are released with UNAVAILABLE.
      replaced = it->second;
      jobs_.erase(it);
      absl::MutexLock jl(&replaced->mu);
      replaced->torn_down = true;
      replaced->replaced = true;
      it = jobs_.end();
    }
    if (it != jobs_.end()) {
      Job& job = *it->second;
      if (job.spec.SerializeAsString() != spec.SerializeAsString() ||
          job.shard_index != request.shard_index() ||
          job.num_shards != request.num_shards()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "job '", request.job_id(),
            "' is already set up on this shard with a different spec or "
            "shard layout; tear it down first"));
      }
      SetupJobResponse response;
      absl::MutexLock jl(&job.mu);
      response.set_version(job.version);
      response.set_num_chunks(job.chunks.size());
      return response;
    }
  }

  if (replaced != nullptr) {
    // Its states taken at multiples of every_versions but not yet written
    // are restore candidates too (the other shards may hold those versions).
    absl::Status s = WritePendingSnapshots(*replaced);
    if (!s.ok()) {
      LogLine(absl::StrCat("job ", request.job_id(),
                           ": writing its pending checkpoints before the "
                           "rollback failed: ",
                           s.message()));
    }
  }
  auto job = std::make_shared<Job>();
  job->id = request.job_id();
  job->spec = spec;
  job->shard_index = request.shard_index();
  job->num_shards = request.num_shards();
  if (request.incarnation() < 0 ||
      request.incarnation() >= (int64_t{1} << (64 - kSeqIncarnationShift))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetupJob: incarnation ", request.incarnation(), " is out of range"));
  }
  job->incarnation = request.incarnation();
  PS_ASSIGN_OR_RETURN(job->tensors, ExpandModel(spec.model()));
  PS_ASSIGN_OR_RETURN(
      Placement placement,
      ComputePlacement(job->tensors, job->num_shards, spec.chunk_bytes()));
  job->placement = std::make_shared<const Placement>(std::move(placement));
  PS_ASSIGN_OR_RETURN(job->optimizer, Optimizer::Create(spec.optimizer()));
  const Placement& p = *job->placement;
  job->local_index.assign(p.chunks.size(), -1);
  for (int64_t id : p.shard_chunks[job->shard_index]) {
    const Chunk& c = p.chunks[id];
    job->local_index[id] = static_cast<int>(job->chunks.size());
    auto state = std::make_unique<ChunkState>(c);
    absl::MutexLock cl(&state->mu);
    state->weights = std::make_shared<std::vector<float>>(c.num_elements);
    PS_RETURN_IF_ERROR(InitializeRange(job->tensors[c.tensor_index],
                                       spec.seed(), c.offset,
                                       absl::MakeSpan(*state->weights)));
    job->optimizer->InitSlots(c.num_elements, &state->slots);
    job->chunks.push_back(std::move(state));
  }
  {
    absl::MutexLock jl(&job->mu);
    job->early_applied.assign(job->chunks.size(), -1);
  }
  bool restored = false;
  if (request.restore()) {
    PS_ASSIGN_OR_RETURN(restored, Restore(*job, request.restore_max_version()));
  }
  if (request.start_version() > 0) {
    absl::MutexLock jl(&job->mu);
    if (job->version != request.start_version()) {
      LogLine(absl::StrCat("job ", job->id,
                           ": continuing the weights of "
                           "version ",
                           job->version, " as version ",
                           request.start_version()));
    }
    job->version = request.start_version();
  }
  {
    absl::MutexLock jl(&job->mu);
    std::vector<int64_t> ids(request.worker_ids().begin(),
                             request.worker_ids().end());
    SetMembers(*job, ids);
    job->last_checkpoint_version = job->version;
    job->last_checkpoint_time = clock_->Now();
  }
  if (options_.metrics != nullptr) {
    MetricsRegistry& m = *options_.metrics;
    const MetricsRegistry::Labels labels = {
        {"job", job->id}, {"shard", absl::StrCat(job->shard_index)}};
    job->metrics.pushes =
        &m.Counter("shard_pushes_total", "Pushes applied or staged", labels);
    job->metrics.pulls =
        &m.Counter("shard_pulls_total", "Pulls served", labels);
    job->metrics.bytes_in = &m.Counter(
        "shard_bytes_in_total", "Gradient payload bytes received", labels);
    job->metrics.bytes_out = &m.Counter("shard_bytes_out_total",
                                        "Weight payload bytes sent", labels);
    job->metrics.dropped =
        &m.Counter("shard_dropped_pushes_total",
                   "BSP pushes that arrived after their step closed", labels);
    job->metrics.rejected = &m.Counter(
        "shard_rejected_pushes_total",
        "Pushes rejected (bad input, too stale, not a member)", labels);
    job->metrics.duplicate =
        &m.Counter("shard_duplicate_pushes_total",
                   "Retried pushes acknowledged without applying", labels);
    job->metrics.version = &m.Gauge(
        "shard_version", "Version of the job's weights on this shard", labels);
    job->metrics.apply_seconds = &m.Histogram(
        "shard_apply_seconds", "Time to apply one push or BSP step",
        MetricsRegistry::LatencyBuckets(), labels);
    job->metrics.staleness =
        &m.Histogram("shard_push_staleness",
                     "Versions between a push's base and the shard's version",
                     {0, 1, 2, 4, 8, 16, 32, 64, 128}, labels);
  }
  SetupJobResponse response;
  {
    absl::MutexLock jl(&job->mu);
    response.set_version(job->version);
    if (job->metrics.version != nullptr)
      job->metrics.version->Set(job->version);
  }
  response.set_num_chunks(job->chunks.size());
  response.set_restored(restored);
  absl::MutexLock l(&mu_);
  auto [it, inserted] = jobs_.emplace(job->id, job);
  if (!inserted) {
    return absl::AbortedError(absl::StrCat(
        "job '", job->id, "' was set up concurrently; retry SetupJob"));
  }
  LogLine(absl::StrCat("job ", job->id, ": shard ", job->shard_index, " of ",
                       job->num_shards, ", ", job->chunks.size(),
                       " chunks, version ", response.version(),
                       restored ? " (restored)" : ""));
  return response;
}

absl::Status ShardStoreImpl::TeardownJob(const TeardownJobRequest& request) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(request.job_id()));
  if (request.final_checkpoint()) {
    PS_RETURN_IF_ERROR(WriteJobCheckpoint(*job).status());
  }
  {
    absl::MutexLock jl(&job->mu);
    job->torn_down = true;  // releases waiting pulls and barriers
  }
  absl::MutexLock l(&mu_);
  jobs_.erase(request.job_id());
  return absl::OkStatus();
}

void ShardStoreImpl::SetMembers(Job& job, const std::vector<int64_t>& ids) {
  absl::flat_hash_set<int64_t> next(ids.begin(), ids.end());
  const bool bsp = job.model() == ConsistencySpec::BSP;
  int64_t others_min = -1;
  for (const auto& [id, w] : job.workers) {
    if (w.active && next.contains(id) &&
        (others_min < 0 || w.clock < others_min)) {
      others_min = w.clock;
    }
  }
  for (auto& [id, w] : job.workers) {
    if (w.active && !next.contains(id)) {
      w.active = false;
      job.completed.erase(id);
    }
  }
  // ASP/SSP jobs set up from a checkpoint: the version counts the workers'
  // steps, so each worker restarts at version / workers (what the
  // coordinator tells them too).
  const int64_t fresh_clock =
      others_min >= 0 ? others_min
                      : job.version / std::max<int64_t>(1, ids.size());
  for (int64_t id : ids) {
    WorkerState& w = job.workers[id];
    if (w.active) continue;
    // A (re)joining worker starts at the current version; its process may
    // be new, so its sequence numbers start over (in this incarnation).
    w.active = true;
    w.seq = SeqTracker(SeqBase(job.incarnation));
    w.clock = bsp ? job.version : fresh_clock;
  }
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
    std::vector<int64_t> ids(request.worker_ids().begin(),
                             request.worker_ids().end());
    SetMembers(*job, ids);
    step = job->version;
    if (job->model() == ConsistencySpec::BSP && !job->closing &&
        !job->completed.empty()) {
      TakeStepIfReady(*job, &take);
    }
  }
  if (!take.empty()) ApplyStep(*job, step, take);
  absl::MutexLock jl(&job->mu);
  response.set_version(job->version);
  return response;
}

absl::Status ShardStoreImpl::ValidateChunks(
    const Job& job, const PushArgs& args, bool checked_apply,
    std::vector<std::vector<float>>* widened,
    std::vector<absl::Span<const float>>* grads) {
  const Placement& p = *job.placement;
  absl::flat_hash_set<int64_t> seen;
  widened->resize(args.chunks.size());
  grads->resize(args.chunks.size());
  for (size_t i = 0; i < args.chunks.size(); ++i) {
    const PushChunk& c = args.chunks[i];
    if (c.chunk_id < 0 || c.chunk_id >= static_cast<int64_t>(p.chunks.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c.chunk_id, " does not exist in job '", job.id,
                       "' (", p.chunks.size(), " chunks)"));
    }
    if (job.local_index[c.chunk_id] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", c.chunk_id, " of job '", job.id, "' lives on shard ",
          p.chunks[c.chunk_id].shard, ", not on shard ", job.shard_index));
    }
    if (!seen.insert(c.chunk_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c.chunk_id, " appears twice in one push"));
    }
    const int64_t n = p.chunks[c.chunk_id].num_elements;
    if (c.num_elements != n) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id,
                                                     " has ", n,
                                                     " elements, the push "
                                                     "says ",
                                                     c.num_elements));
    }
    const int size = DTypeSize(c.dtype);
    if (size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c.chunk_id, ": unsupported dtype ",
                       static_cast<int>(c.dtype)));
    }
    const size_t bytes = PayloadBytes(c);
    if (bytes != static_cast<size_t>(n) * size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", c.chunk_id, ": payload of ", bytes, " bytes, expected ", n,
          " x ", DType_Name(c.dtype), " = ", n * size, " bytes"));
    }
    const bool split = c.segments.size() > 1;
    absl::string_view data = c.segments.size() == 1 ? c.segments[0] : c.data;
    const bool aligned = reinterpret_cast<uintptr_t>(data.data()) % 4 == 0;
    bool finite = true;
    if (size == 4 && checked_apply) {
      // Checked while it is applied.
      (*grads)[i] = absl::Span<const float>();
    } else if (size == 4 && split) {
      // Applied straight from the receive buffers (gathered per chunk into
      // a cache-hot scratch buffer at apply time), never copied whole.
      (*grads)[i] = absl::Span<const float>();
      finite = job.spec.allow_nonfinite_gradients() || AllFinite(c.segments);
    } else {
      std::string joined;
      if (split) {
        joined.resize(bytes);
        Gather(c.segments, joined.data());
        data = joined;
      }
      if (size == 4 && aligned) {
        (*grads)[i] =
            absl::MakeConstSpan(reinterpret_cast<const float*>(data.data()), n);
      } else {
        (*widened)[i].resize(n);
        PS_RETURN_IF_ERROR(
            WidenToFloat(c.dtype, data, absl::MakeSpan((*widened)[i])));
        (*grads)[i] = (*widened)[i];
      }
      finite = job.spec.allow_nonfinite_gradients() || AllFinite((*grads)[i]);
    }
    if (!finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", c.chunk_id,
          " of the gradient holds NaN or Inf (the job "
          "rejects non-finite gradients; set allow_nonfinite_gradients to let "
          "them through)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardStoreImpl::ApplyChecked(
    Job& job, const PushArgs& args, float lr,
    const std::vector<absl::Span<const float>>& grads)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // chunk locks taken in a loop
  // The chunks' locks in ascending local index, the one order every holder
  // of several takes them in, held until all are published or none is.
  std::vector<int> order(args.chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return job.local_index[args.chunks[a].chunk_id] <
           job.local_index[args.chunks[b].chunk_id];
  });
  std::vector<ChunkState*> chunks(args.chunks.size());
  for (int i : order) {
    chunks[i] = job.chunks[job.local_index[args.chunks[i].chunk_id]].get();
    chunks[i]->mu.Lock();
  }
  const bool allow = job.spec.allow_nonfinite_gradients();
  int64_t bad_chunk = -1;
  std::vector<OptimizerSlots> before;  // the slots, should a chunk be bad
  for (size_t i = 0; i < args.chunks.size() && bad_chunk < 0; ++i) {
    const PushChunk& c = args.chunks[i];
    ChunkState& chunk = *chunks[i];
    const absl::Span<float> out = Spare(chunk);
    before.push_back(chunk.slots);
    if (grads[i].data() != nullptr || c.num_elements == 0) {
      // Widened from fp16/bf16 and checked already.
      job.optimizer->ApplyTo(lr, 1.0f, grads[i], *chunk.weights, out,
                             &chunk.slots);
      continue;
    }
    const absl::string_view one[] = {c.data};
    const absl::Span<const absl::string_view> segments =
        c.segments.empty() ? absl::MakeConstSpan(one)
                           : absl::MakeConstSpan(c.segments);
    if (!job.optimizer->ApplyCheckedTo(lr, 1.0f, segments, *chunk.weights, out,
                                       &chunk.slots) &&
        !allow) {
      bad_chunk = c.chunk_id;
    }
  }
  if (bad_chunk >= 0) {
    // Nothing was published; the slots go back to how they were.
    for (size_t i = 0; i < before.size(); ++i) {
      chunks[i]->slots = std::move(before[i]);
    }
  } else {
    for (ChunkState* chunk : chunks) std::swap(chunk->weights, chunk->spare);
  }
  for (ChunkState* chunk : chunks) chunk->mu.Unlock();
  if (bad_chunk >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", bad_chunk,
        " of the gradient holds NaN or Inf (the job "
        "rejects non-finite gradients; set allow_nonfinite_gradients to let "
        "them through)"));
  }
  return absl::OkStatus();
}

absl::Status ShardStoreImpl::EndBspStep(Job& job, const PushArgs& args,
                                        absl::Time deadline, bool retry,
                                        PushResult* result,
                                        std::vector<int64_t>* take) {
  // The step is this worker's only once its earlier pushes of the step
  // (lower seq numbers, possibly still in flight) have landed.
  auto all_landed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu) {
    return job.PushesLanded(args.worker_id, args.seq);
  };
  if (!job.mu.AwaitWithDeadline(absl::Condition(&all_landed), deadline) ||
      job.shutting_down) {
    return absl::DeadlineExceededError(
        absl::StrCat("end of step ", args.clock, " of worker ", args.worker_id,
                     ": earlier pushes of the step did not arrive in time"));
  }
  auto it = job.workers.find(args.worker_id);
  const bool active = it != job.workers.end() && it->second.active;
  if (active && args.clock == job.version && !job.closing) {
    // (`completed` is a set: a retry of a counted end of step changes
    // nothing, and once the step closes its clock is behind the version.)
    job.completed.insert(args.worker_id);
    TakeStepIfReady(job, take);
  } else if (!retry && (args.clock < job.version || job.closing)) {
    job.dropped.fetch_add(1, std::memory_order_relaxed);
    if (job.metrics.dropped != nullptr) job.metrics.dropped->Increment();
    result->dropped = true;
  }
  return absl::OkStatus();
}

bool ShardStoreImpl::TakeStepIfReady(Job& job, std::vector<int64_t>* workers) {
  if (job.closing || static_cast<int>(job.completed.size()) < job.Needed()) {
    return false;
  }
  workers->assign(job.completed.begin(), job.completed.end());
  job.completed.clear();
  job.closing = true;
  return true;
}

void ShardStoreImpl::ApplyStep(Job& job, int64_t step,
                               const std::vector<int64_t>& workers) {
  const absl::Time start = absl::Now();
  const float lr = job.optimizer->LearningRate(step);
  const float scale = 1.0f / static_cast<float>(workers.size());
  {
    absl::WriterMutexLock al(&job.apply_mu);
    // Chunks are independent: spread over the apply threads.
    apply_pool_.ParallelFor(job.chunks.size(), [&](int64_t i) {
      ChunkState* chunk = job.chunks[i].get();
      absl::MutexLock cl(&chunk->mu);
      if (chunk->early_step == step) {
        // Applied when its gradients were complete; what is staged now came
        // later (a worker that joined) and is dropped with the step.
        for (auto& [w, staged] : chunk->staged) staged.step = -1;
        return;
      }
      std::vector<float>* sum = nullptr;
      for (int64_t w : workers) {
        auto it = chunk->staged.find(w);
        if (it == chunk->staged.end() || it->second.step != step) continue;
        if (sum == nullptr) {
          sum = &it->second.grad;
          continue;
        }
        AddLoop(sum->size(), it->second.grad.data(), sum->data());
      }
      if (sum != nullptr) {
        UpdateChunk(*job.optimizer, lr, scale, *sum, *chunk);
      }
      chunk->applied_step = step;
      // Late workers' partial gradients of this step are dropped with it.
      for (auto& [w, staged] : chunk->staged) staged.step = -1;
    });
    const int64_t every = job.spec.checkpoint().every_versions();
    if (every > 0 && (step + 1) % every == 0 && !options_.data_dir.empty()) {
      auto snapshot = std::make_shared<CheckpointData>(Snapshot(job, step + 1));
      {
        absl::MutexLock sl(&job.snapshot_mu);
        job.aligned_snapshots.push_back(std::move(snapshot));
        if (job.aligned_snapshots.size() > kMaxPendingSnapshots) {
          job.aligned_snapshots.pop_front();
        }
      }
      absl::MutexLock wl(&work_mu_);
      snapshots_waiting_ = true;
    }
    // Still under apply_mu, so that a checkpoint never sees the new weights
    // with the old version.
    absl::MutexLock jl(&job.mu);
    job.version = step + 1;
    job.closing = false;
    for (int64_t w : workers) {
      auto it = job.workers.find(w);
      if (it != job.workers.end()) {
        it->second.clock = std::max(it->second.clock, step + 1);
      }
    }
    if (job.metrics.version != nullptr) job.metrics.version->Set(job.version);
  }
  if (job.metrics.apply_seconds != nullptr) {
    job.metrics.apply_seconds->Observe(
        absl::ToDoubleSeconds(absl::Now() - start));
  }
}

bool ShardStoreImpl::ApplyIfComplete(const Job& job, ChunkState& chunk,
                                     int64_t step,
                                     const std::vector<int64_t>& active,
                                     float lr, int64_t incoming_worker,
                                     absl::Span<const float> incoming) {
  if (active.empty() || chunk.applied_step >= step) return false;
  std::vector<std::vector<float>*> staged;
  for (int64_t w : active) {
    if (w == incoming_worker) continue;
    auto it = chunk.staged.find(w);
    if (it == chunk.staged.end() || it->second.step != step ||
        !it->second.final) {
      return false;
    }
    staged.push_back(&it->second.grad);
  }
  if (incoming_worker >= 0 && staged.size() == active.size()) {
    return false;  // the incoming worker is not among `active`
  }
  absl::Span<const float> sum = incoming;
  if (!staged.empty()) {
    // Summed into the first staged gradient (dropped with the step).
    std::vector<float>& first = *staged[0];
    for (size_t k = 1; k < staged.size(); ++k) {
      AddLoop(first.size(), staged[k]->data(), first.data());
    }
    if (incoming_worker >= 0) {
      AddLoop(first.size(), incoming.data(), first.data());
    }
    sum = first;
  }
  // Kept for a checkpoint of the open step: the weights stay in `spare`.
  chunk.pre_slots = chunk.slots;
  UpdateChunk(*job.optimizer, lr, 1.0f / static_cast<float>(active.size()), sum,
              chunk);
  for (auto& [w, grad] : chunk.staged) grad.step = -1;
  chunk.early_step = step;
  chunk.applied_step = step;
  return true;
}

absl::StatusOr<PushResult> ShardStoreImpl::Push(const PushArgs& args,
                                                absl::Time deadline) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJobForData(args.job_id));
  if (args.seq == SeqBase(SeqIncarnation(args.seq))) {
    Reject(*job);
    return absl::InvalidArgumentError(
        "push seq must be >= 1 (per job, worker and shard, starting at 1)");
  }
  if (SeqIncarnation(args.seq) != job->incarnation) {
    // Not counted as rejected: a worker that has not yet heard of the
    // rollback retries until the coordinator restarts it.
    return absl::UnavailableError(absl::StrCat(
        "push of incarnation ", SeqIncarnation(args.seq), " of job '", job->id,
        "': the job is at incarnation ", job->incarnation,
        SeqIncarnation(args.seq) < job->incarnation
            ? " (it rolled back to a checkpoint; the coordinator restarts "
              "the workers)"
            : " here (this shard has not been rolled back yet)"));
  }
  if (args.clock < 0 || args.base_version < 0) {
    Reject(*job);
    return absl::InvalidArgumentError(
        "push clock and base_version must be >= 0");
  }
  std::vector<std::vector<float>> widened;
  std::vector<absl::Span<const float>> grads;
  const bool bsp = job->model() == ConsistencySpec::BSP;
  // The NaN/Inf check in the apply's pass, not a pass of its own.
  const bool checked_apply = !bsp && job->optimizer->CanApplyChecked();
  if (absl::Status s =
          ValidateChunks(*job, args, checked_apply, &widened, &grads);
      !s.ok()) {
    // The number is used up, so that a BSP end_of_step does not wait for it.
    absl::MutexLock jl(&job->mu);
    auto it = job->workers.find(args.worker_id);
    if (it != job->workers.end() && it->second.active &&
        !it->second.seq.Seen(args.seq)) {
      it->second.seq.Finish(args.seq);
    }
    Reject(*job);
    return s;
  }
  PushResult result;
  float lr = 0;
  int64_t staleness = 0;
  // BSP: apply each chunk as soon as every active worker's gradient of it
  // is complete (the header comment), over these workers.
  bool early = false;
  std::vector<int64_t> active;
  {
    absl::ReleasableMutexLock jl(&job->mu);
    auto it = job->workers.find(args.worker_id);
    if (it == job->workers.end() || !it->second.active) {
      Reject(*job);
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", args.worker_id, " is not an active member of job '",
          job->id, "' (evicted or never joined)"));
    }
    WorkerState& w = it->second;
    result.version = job->version;
    if (w.seq.Seen(args.seq)) {
      job->duplicate.fetch_add(1, std::memory_order_relaxed);
      if (job->metrics.duplicate != nullptr)
        job->metrics.duplicate->Increment();
      result.duplicate = true;
      // A retried end of step whose first attempt timed out waiting for
      // the worker's earlier pushes: its data is in, its end of step is
      // counted now. (A first attempt still in flight counts it itself.)
      std::vector<int64_t> take;
      if (bsp && args.end_of_step && !w.seq.in_flight.contains(args.seq)) {
        PS_RETURN_IF_ERROR(
            EndBspStep(*job, args, deadline, /*retry=*/true, &result, &take));
        result.version = job->version;
      }
      jl.Release();
      if (!take.empty()) {
        ApplyStep(*job, args.clock, take);
        absl::MutexLock l(&job->mu);
        result.version = job->version;
      }
      return result;
    }
    if (bsp && job->early_step == job->version &&
        (args.clock == job->version + 1 ||
         args.base_version == job->version + 1)) {
      // The worker has all of the step's weights (applied as they
      // completed) before the step closed here: a moment's wait. Not
      // counted, and the sequence number stays unused for the retry.
      return absl::UnavailableError(
          absl::StrCat("push for step ", args.clock, ": step ", job->version,
                       " is still closing on this shard; retry"));
    }
    if (args.base_version > job->version) {
      w.seq.Finish(args.seq);
      Reject(*job);
      return absl::OutOfRangeError(absl::StrCat("push base_version ",
                                                args.base_version,
                                                " is ahead of the shard's "
                                                "version ",
                                                job->version));
    }
    staleness = job->version - args.base_version;
    if (bsp) {
      if (args.clock > job->version) {
        w.seq.Finish(args.seq);
        Reject(*job);
        return absl::OutOfRangeError(
            absl::StrCat("push for step ", args.clock,
                         " is from the future: the shard is "
                         "aggregating step ",
                         job->version));
      }
      if (args.chunks_final && !job->closing && args.clock == job->version &&
          job->spec.consistency().backup_workers() == 0) {
        early = true;
        lr = job->optimizer->LearningRate(job->version);
        for (const auto& [id, worker] : job->workers) {
          if (worker.active) active.push_back(id);
        }
      }
      if (args.clock < job->version ||
          (job->closing && args.clock == job->version)) {
        // A backup worker's late gradient: acknowledged, counted, dropped.
        w.seq.Finish(args.seq);
        job->dropped.fetch_add(1, std::memory_order_relaxed);
        if (job->metrics.dropped != nullptr) job->metrics.dropped->Increment();
        result.dropped = true;
        return result;
      }
    } else {
      const int max_staleness = job->spec.consistency().max_staleness();
      if (job->model() == ConsistencySpec::ASP && max_staleness > 0 &&
          staleness > max_staleness) {
        w.seq.Finish(args.seq);
        Reject(*job);
        return absl::AbortedError(
            absl::StrCat("push computed on version ", args.base_version,
                         " is too stale: the shard is at version ",
                         job->version, " and the job's max_staleness is ",
                         max_staleness, "; pull fresh weights"));
      }
      lr = job->optimizer->LearningRate(job->version);
      if (job->model() == ConsistencySpec::ASP &&
          job->spec.consistency().staleness_aware_lr()) {
        lr /= static_cast<float>(std::max<int64_t>(1, staleness));
      }
    }
    w.seq.in_flight.insert(args.seq);
    w.last_push_ms = absl::ToUnixMillis(clock_->Now());
  }

  const absl::Time start = absl::Now();
  int64_t bytes = 0;
  std::vector<int> applied_early;  // local chunk indices
  int64_t early_dropped = 0;
  {
    absl::ReaderMutexLock al(&job->apply_mu);
    if (checked_apply) {
      for (const PushChunk& c : args.chunks) bytes += PayloadBytes(c);
      if (absl::Status s = ApplyChecked(*job, args, lr, grads); !s.ok()) {
        // As a push that failed validation: the number is used up.
        absl::MutexLock jl(&job->mu);
        job->workers[args.worker_id].seq.Finish(args.seq);
        Reject(*job);
        return s;
      }
    }
    // Scratch for split payloads: one chunk at a time, so it stays in cache
    // and is reused across calls on this thread.
    thread_local std::vector<float> scratch;
    for (size_t i = 0; i < args.chunks.size() && !checked_apply; ++i) {
      const PushChunk& c = args.chunks[i];
      bytes += PayloadBytes(c);
      if (grads[i].data() == nullptr && c.num_elements > 0) {
        scratch.resize(c.num_elements);
        Gather(c.segments, reinterpret_cast<char*>(scratch.data()));
        grads[i] = scratch;
      }
      const int local = job->local_index[c.chunk_id];
      ChunkState& chunk = *job->chunks[local];
      absl::MutexLock cl(&chunk.mu);
      if (bsp) {
        if (chunk.early_step == args.clock) {
          // Applied already for this step: a gradient too late for it.
          ++early_dropped;
          continue;
        }
        // This push completes the chunk: applied from the received
        // gradient, without staging a copy of it.
        auto own = chunk.staged.find(args.worker_id);
        if (early &&
            (own == chunk.staged.end() || own->second.step != args.clock) &&
            ApplyIfComplete(*job, chunk, args.clock, active, lr, args.worker_id,
                            grads[i])) {
          applied_early.push_back(local);
          continue;
        }
        StagedGrad& st = chunk.staged[args.worker_id];
        if (st.step != args.clock) {
          st.step = args.clock;
          st.grad.assign(grads[i].begin(), grads[i].end());
        } else {
          AddLoop(grads[i].size(), grads[i].data(), st.grad.data());
        }
        st.final = args.chunks_final;
        if (early && ApplyIfComplete(*job, chunk, args.clock, active, lr)) {
          applied_early.push_back(local);
        }
      } else {
        UpdateChunk(*job->optimizer, lr, 1.0f, grads[i], chunk);
      }
    }
  }
  job->pushes.fetch_add(1, std::memory_order_relaxed);
  job->bytes_in.fetch_add(bytes, std::memory_order_relaxed);
  if (job->metrics.pushes != nullptr) {
    job->metrics.pushes->Increment();
    job->metrics.bytes_in->Increment(bytes);
    job->metrics.staleness->Observe(staleness);
    if (!bsp) {
      job->metrics.apply_seconds->Observe(
          absl::ToDoubleSeconds(absl::Now() - start));
    }
  }

  if (early_dropped > 0) {
    job->dropped.fetch_add(early_dropped, std::memory_order_relaxed);
    if (job->metrics.dropped != nullptr) {
      job->metrics.dropped->Increment(static_cast<double>(early_dropped));
    }
  }

  std::vector<int64_t> take;
  {
    absl::MutexLock jl(&job->mu);
    // Wakes the pulls waiting for these chunks.
    for (int local : applied_early) {
      job->early_applied[local] = args.clock;
      job->early_step = args.clock;
    }
    WorkerState& w = job->workers[args.worker_id];
    w.seq.Finish(args.seq);
    if (args.end_of_step) {
      if (!bsp) {
        ++job->version;
        w.clock = std::max(w.clock, args.clock + 1);
        if (job->metrics.version != nullptr)
          job->metrics.version->Set(job->version);
      } else {
        PS_RETURN_IF_ERROR(
            EndBspStep(*job, args, deadline, /*retry=*/false, &result, &take));
      }
    }
    result.version = job->version;
  }
  if (!take.empty()) {
    ApplyStep(*job, args.clock, take);
    absl::MutexLock jl(&job->mu);
    result.version = job->version;
  }
  return result;
}

absl::StatusOr<PullResult> ShardStoreImpl::Pull(const PullArgs& args,
                                                absl::Time deadline,
                                                ChunkSink sink) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJobForData(args.job_id));
  const Placement& p = *job->placement;
  for (int64_t id : args.chunk_ids) {
    if (id < 0 || id >= static_cast<int64_t>(p.chunks.size()) ||
        job->local_index[id] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull of chunk ", id, ", which is not on shard ",
                       job->shard_index, " of job '", job->id, "'"));
    }
  }
  PullResult result;
  {
    absl::MutexLock jl(&job->mu);
    auto it = job->workers.find(args.worker_id);
    if (it == job->workers.end() || !it->second.active) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", args.worker_id, " is not an active member of job '",
          job->id, "' (evicted or never joined)"));
    }
    const ConsistencySpec::Model model = job->model();
    if (model == ConsistencySpec::SSP) {
      it->second.clock = std::max(it->second.clock, args.clock);
    }
    std::function<bool()> ready;
    if (model == ConsistencySpec::BSP) {
      // Each chunk at min_version: chunks applied as they completed are
      // one version ahead of the open step.
      ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mu) {
        return job->torn_down || job->shutting_down ||
               job->PullVersion(args) >= args.min_version;
      };
    } else if (model == ConsistencySpec::SSP) {
      const int64_t bound = args.clock - job->spec.consistency().staleness();
      ready = [&, bound]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mu) {
        return job->torn_down || job->shutting_down ||
               job->MinActiveClock() >= bound;
      };
    } else {
      ready = [] { return true; };
    }
    if (args.after_seq > 0) {
      ready = [&, model_ready = std::move(ready)]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(job->mu) {
                    return job->PushesLanded(args.worker_id, args.after_seq) &&
                           model_ready();
                  };
    }
    if (!ready()) {
      job->blocked_pulls.fetch_add(1, std::memory_order_relaxed);
      const bool ok =
          job->mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
      job->blocked_pulls.fetch_sub(1, std::memory_order_relaxed);
      if (!ok) {
        return absl::DeadlineExceededError(
            model == ConsistencySpec::BSP
                ? absl::StrCat("pull waited for version ", args.min_version,
                               "; the shard is still at ", job->version,
                               " (waiting for workers to finish step ",
                               job->version, ")")
            : model == ConsistencySpec::SSP
                ? absl::StrCat("pull at clock ", args.clock,
                               " waited for the slowest worker (clock ",
                               job->MinActiveClock(), ", staleness bound ",
                               job->spec.consistency().staleness(), ")")
                : absl::StrCat("pull waited for the worker's pushes up to "
                               "seq ",
                               args.after_seq, " to land"));
      }
    }
    if (job->replaced) {
      return absl::UnavailableError(absl::StrCat(
          "job '", job->id, "' is rolling back to a checkpoint on this shard"));
    }
    if (job->torn_down) {
      return absl::NotFoundError(
          absl::StrCat("job '", job->id, "' was torn down"));
    }
    if (job->shutting_down) {
      return absl::UnavailableError("the parameter server is shutting down");
    }
    result.min_clock = job->MinActiveClock();
  }
  int64_t bytes = 0;
  {
    absl::ReaderMutexLock al(&job->apply_mu);
    {
      absl::MutexLock jl(&job->mu);
      result.version = job->PullVersion(args);
    }
    auto emit = [&](ChunkState& chunk) {
      absl::MutexLock cl(&chunk.mu);
      sink(chunk.chunk, *chunk.weights, chunk.weights);
      bytes += chunk.weights->size() * sizeof(float);
    };
    if (args.version_only) {
      // The version only.
    } else if (args.chunk_ids.empty()) {
      for (auto& chunk : job->chunks) emit(*chunk);
    } else {
      for (int64_t id : args.chunk_ids)
        emit(*job->chunks[job->local_index[id]]);
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

absl::StatusOr<CheckpointResponse> ShardStoreImpl::WriteJobCheckpoint(
    Job& job) {
  if (options_.data_dir.empty()) {
    return absl::FailedPreconditionError(
        "checkpoints need a data directory (--data_dir)");
  }
  CheckpointData data;
  {
    absl::WriterMutexLock al(&job.apply_mu);
    int64_t version;
    {
      absl::MutexLock jl(&job.mu);
      version = job.version;
    }
    data = Snapshot(job, version);
  }
  return WriteSnapshot(job, data);
}

absl::Status ShardStoreImpl::WritePendingSnapshots(Job& job) {
  if (options_.data_dir.empty()) return absl::OkStatus();
  for (;;) {
    std::shared_ptr<CheckpointData> data;
    {
      absl::MutexLock sl(&job.snapshot_mu);
      if (job.aligned_snapshots.empty()) return absl::OkStatus();
      data = std::move(job.aligned_snapshots.front());
      job.aligned_snapshots.pop_front();
    }
    PS_RETURN_IF_ERROR(WriteSnapshot(job, *data).status());
  }
}

CheckpointData ShardStoreImpl::Snapshot(Job& job, int64_t version) {
  CheckpointData data;
  data.job_id = job.id;
  data.spec = job.spec;
  data.shard_index = job.shard_index;
  data.num_shards = job.num_shards;
  data.version = version;
  data.ranges.reserve(job.chunks.size());
  for (auto& chunk : job.chunks) {
    absl::MutexLock cl(&chunk->mu);
    CheckpointRange r;
    r.tensor_name = job.tensors[chunk->chunk.tensor_index].name();
    r.offset = chunk->chunk.offset;
    // A chunk applied ahead of its step's close is recorded as it was
    // before, so that the checkpoint holds `version` throughout.
    const bool ahead = chunk->early_step == version;
    const OptimizerSlots& slots = ahead ? chunk->pre_slots : chunk->slots;
    r.weights = ahead ? *chunk->spare : *chunk->weights;
    r.slot1 = slots.slot1;
    r.slot2 = slots.slot2;
    r.steps = slots.steps;
    data.ranges.push_back(std::move(r));
  }
  return data;
}

absl::StatusOr<CheckpointResponse> ShardStoreImpl::WriteSnapshot(
    Job& job, const CheckpointData& data) {
  absl::MutexLock ckl(&job.checkpoint_mu);
  // Disk I/O with no data-path lock held.
  PS_ASSIGN_OR_RETURN(
      std::string path,
      WriteCheckpoint(fs_, JobDir(job.id), data, job.spec.checkpoint().keep()));
  {
    absl::MutexLock jl(&job.mu);
    job.last_checkpoint_version =
        std::max(job.last_checkpoint_version, data.version);
    job.last_checkpoint_time = clock_->Now();
  }
  CheckpointResponse response;
  response.set_path(path);
  response.set_version(data.version);
  return response;
}

// A checkpoint restores only onto the same model: every tensor of the job
// with the same name and shape, and the same optimizer kind (its slots).
absl::Status CompatibleModel(const Job& job,
                             const std::vector<CheckpointData>& files) {
  for (const CheckpointData& f : files) {
    absl::StatusOr<std::vector<TensorSpec>> tensors =
        ExpandModel(f.spec.model());
    if (!tensors.ok()) return tensors.status();
    if (tensors->size() != job.tensors.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("it holds ", tensors->size(), " tensors, the job ",
                       job.tensors.size()));
    }
    for (size_t i = 0; i < tensors->size(); ++i) {
      if ((*tensors)[i].name() != job.tensors[i].name() ||
          NumElements((*tensors)[i]) != NumElements(job.tensors[i])) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensor ", i, " is '", (*tensors)[i].name(), "' ",
            ShapeString((*tensors)[i]), " there and '", job.tensors[i].name(),
            "' ", ShapeString(job.tensors[i]), " in the job"));
      }
    }
    if (f.spec.optimizer().kind() != job.spec.optimizer().kind()) {
      return absl::FailedPreconditionError(
          "it was written with a different optimizer");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ShardStoreImpl::Restore(Job& job, int64_t max_version) {
  if (options_.data_dir.empty()) return false;
  std::vector<CheckpointSet> sets = ListCheckpointSets(fs_, JobDir(job.id));
  // With a data directory per server, only this shard's own files are here:
  // in the same layout they cover its chunks on their own.
  for (const CheckpointSet& own : ListOwnCheckpoints(
           fs_, JobDir(job.id), job.num_shards, job.shard_index)) {
    bool known = false;
    for (const CheckpointSet& set : sets) {
      known |= set.version == own.version && !set.mixed;
    }
    if (!known) sets.push_back(own);
  }
  std::stable_sort(sets.begin(), sets.end(),
                   [](const CheckpointSet& a, const CheckpointSet& b) {
                     return a.version > b.version;
                   });
  for (const CheckpointSet& set : sets) {
    if (max_version > 0 && set.version > max_version) continue;
    std::vector<CheckpointData> files;
    absl::Status bad;
    for (const std::string& path : set.paths) {
      absl::StatusOr<CheckpointData> d = ReadCheckpoint(fs_, path);
      if (!d.ok()) {
        bad = d.status();
        break;
      }
      files.push_back(*std::move(d));
    }
    if (bad.ok()) bad = CompatibleModel(job, files);
    if (!bad.ok()) {
      LogLine(absl::StrCat("job ", job.id, ": refusing checkpoint version ",
                           set.version, ": ", bad.message(),
                           "; falling back to the previous one"));
      continue;
    }
    // Index ranges by tensor name, then copy every overlap into the chunks.
    absl::flat_hash_map<std::string, std::vector<const CheckpointRange*>>
        by_name;
    for (const CheckpointData& f : files) {
      for (const CheckpointRange& r : f.ranges)
        by_name[r.tensor_name].push_back(&r);
    }
    std::vector<int64_t> covered(job.chunks.size(), 0);
    struct Copy {
      size_t chunk;
      const CheckpointRange* range;
      int64_t from, to;  // tensor element range
    };
    std::vector<Copy> copies;
    for (size_t i = 0; i < job.chunks.size(); ++i) {
      const Chunk& c = job.chunks[i]->chunk;
      auto it = by_name.find(job.tensors[c.tensor_index].name());
      if (it == by_name.end()) continue;
      for (const CheckpointRange* r : it->second) {
        const int64_t from = std::max(c.offset, r->offset);
        const int64_t to = std::min<int64_t>(c.offset + c.num_elements,
                                             r->offset + r->weights.size());
        if (from < to) {
          copies.push_back({i, r, from, to});
          covered[i] += to - from;
        }
      }
    }
    bool complete = true;
    for (size_t i = 0; i < job.chunks.size(); ++i) {
      complete = complete && covered[i] == job.chunks[i]->chunk.num_elements;
    }
    if (!complete) {
      LogLine(absl::StrCat("job ", job.id, ": checkpoint version ", set.version,
                           " does not cover this shard's tensors (a different "
                           "model?); falling back to the previous one"));
      continue;
    }
    {
      absl::WriterMutexLock al(&job.apply_mu);
      for (const Copy& cp : copies) {
        ChunkState& chunk = *job.chunks[cp.chunk];
        absl::MutexLock cl(&chunk.mu);
        const int64_t dst = cp.from - chunk.chunk.offset;
        const int64_t src = cp.from - cp.range->offset;
        const int64_t n = cp.to - cp.from;
        // Not yet published: written in place.
        std::copy_n(cp.range->weights.begin() + src, n,
                    chunk.weights->begin() + dst);
        if (cp.range->slot1.size() == cp.range->weights.size() &&
            chunk.slots.slot1.size() == chunk.weights->size()) {
          std::copy_n(cp.range->slot1.begin() + src, n,
                      chunk.slots.slot1.begin() + dst);
        }
        if (cp.range->slot2.size() == cp.range->weights.size() &&
            chunk.slots.slot2.size() == chunk.weights->size()) {
          std::copy_n(cp.range->slot2.begin() + src, n,
                      chunk.slots.slot2.begin() + dst);
        }
        chunk.slots.steps = std::max(chunk.slots.steps, cp.range->steps);
      }
    }
    absl::MutexLock jl(&job.mu);
    job.version = set.version;
    LogLine(
        absl::StrCat("job ", job.id, ": restored checkpoint version ",
                     set.version, " written by ",
                     set.paths.size() == 1 && set.num_shards > 1
                         ? absl::StrCat("this shard (of ", set.num_shards, ")")
                         : absl::StrCat(set.num_shards, " shard(s)"),
                     set.mixed ? " (shards at different versions)" : ""));
    return true;
  }
  return false;
}

absl::StatusOr<CheckpointResponse> ShardStoreImpl::Checkpoint(
    absl::string_view job_id) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
  return WriteJobCheckpoint(*job);
}

absl::Status ShardStoreImpl::CheckpointDue() {
  std::vector<std::shared_ptr<Job>> due;
  std::vector<std::shared_ptr<Job>> aligned;
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [id, job] : jobs_) {
      const CheckpointSpec& c = job->spec.checkpoint();
      if (job->model() == ConsistencySpec::BSP && c.every_versions() > 0) {
        aligned.push_back(job);
      }
      absl::MutexLock jl(&job->mu);
      const bool by_version =
          c.every_versions() > 0 && job->model() != ConsistencySpec::BSP &&
          job->version - job->last_checkpoint_version >= c.every_versions();
      const bool by_time =
          c.every_seconds() > 0 &&
          job->version != job->last_checkpoint_version &&
          now - job->last_checkpoint_time >= absl::Seconds(c.every_seconds());
      if (by_version || by_time) due.push_back(job);
    }
  }
  absl::Status first;
  for (auto& job : aligned) {
    absl::Status s = WritePendingSnapshots(*job);
    if (!s.ok() && first.ok()) first = s;
  }
  for (auto& job : due) {
    if (options_.data_dir.empty()) break;
    absl::Status s = WriteJobCheckpoint(*job).status();
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
    absl::Status s = WriteJobCheckpoint(*job).status();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::StatusOr<ShardStatus> ShardStoreImpl::GetShardStatus(
    absl::string_view job_id) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, FindJob(job_id));
  ShardStatus s;
  s.set_job_id(job->id);
  s.set_shard_index(job->shard_index);
  s.set_model(job->model());
  {
    absl::MutexLock jl(&job->mu);
    s.set_version(job->version);
    s.set_pending_step(job->version);
    std::vector<int64_t> ids;
    for (const auto& [id, w] : job->workers) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (int64_t id : ids) {
      const WorkerState& w = job->workers.at(id);
      WorkerClock* wc = s.add_clocks();
      wc->set_worker_id(id);
      wc->set_clock(w.clock);
      wc->set_active(w.active);
      wc->set_last_push_ms(w.last_push_ms);
      if (!w.active) continue;
      const bool waiting =
          job->model() == ConsistencySpec::BSP
              ? !job->completed.contains(id)
              : w.clock <= job->MinActiveClock() && job->NumActive() > 1;
      if (waiting) s.add_waiting_for(id);
    }
    s.set_last_checkpoint_version(job->last_checkpoint_version);
  }
  s.set_pushes(job->pushes.load());
  s.set_pulls(job->pulls.load());
  s.set_dropped_pushes(job->dropped.load());
  s.set_rejected_pushes(job->rejected.load());
  s.set_duplicate_pushes(job->duplicate.load());
  s.set_blocked_pulls(job->blocked_pulls.load());
  s.set_bytes_in(job->bytes_in.load());
  s.set_bytes_out(job->bytes_out.load());
  return s;
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
