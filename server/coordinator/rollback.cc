#include "server/coordinator/rollback.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/platform/status.h"

namespace ps::coordinator {
namespace {

std::string Note(const std::vector<int>& lost, int64_t target, int64_t lowest,
                 int64_t highest, bool relabelled, int64_t start_step,
                 int64_t incarnation) {
  std::vector<std::string> names;
  for (int i : lost) names.push_back(absl::StrCat(i));
  return absl::StrCat(
      "shard(s) ", absl::StrJoin(names, ", "), " restarted; every shard ",
      highest > 0
          ? absl::StrCat("restored its checkpoint at version ",
                         lowest == highest ? absl::StrCat(target)
                                           : absl::StrCat(lowest, "-", highest))
          : std::string("restarted from the initial weights (no "
                        "checkpoint)"),
      relabelled ? " (no version was on every shard: each restored its newest "
                   "at or below it and continues as that step)"
                 : "",
      "; the workers restart at step ", start_step, " (incarnation ",
      incarnation, ")");
}

}  // namespace

RollbackResult ChooseRollback(int num_shards, bool bsp, int num_workers,
                              int64_t incarnation, std::vector<int> lost,
                              const SetUpShard& set_up) {
  RollbackResult out;
  const int n = num_shards;
  std::vector<int64_t> version(n, -1);  // -1: not set up yet
  int64_t start_version = 0;  // > 0: every shard continues as this version
  auto setup = [&](int i, int64_t max_version) -> absl::Status {
    absl::StatusOr<int64_t> v = set_up(i, max_version, start_version);
    if (!v.ok()) return v.status();
    version[i] = *v;
    return absl::OkStatus();
  };
  if (lost.empty()) {  // a retried rollback: start from every shard
    for (int i = 0; i < n; ++i) lost.push_back(i);
  }
  int64_t target = -1;
  for (int i : lost) {
    out.status = setup(i, -1);
    if (!out.status.ok()) return out;
    target = target < 0 ? version[i] : std::min(target, version[i]);
  }
  const int64_t wanted = target;
  if (!bsp) {
    // Every shard restores its own newest checkpoint (rather than one going
    // back to the initial weights for want of an older file).
    for (int i = 0; i < n; ++i) {
      if (version[i] >= 0) continue;
      out.status = setup(i, -1);
      if (!out.status.ok()) return out;
    }
  }
  // BSP: the other shards go back to the same version (the newest
  // checkpoint at or below it); a shard without that checkpoint lowers the
  // target for all.
  for (int round = 0; round <= n; ++round) {
    bool lowered = false;
    for (int i = 0; i < n; ++i) {
      if (version[i] >= 0 && (bsp ? version[i] == target : true)) continue;
      out.status = setup(i, target);
      if (!out.status.ok()) return out;
      if (version[i] < target) {
        if (bsp) lowered = true;
        target = bsp ? version[i] : target;
      }
    }
    if (!lowered) break;
  }
  bool relabelled = false;
  if (bsp && target == 0 && wanted > 0) {
    // No version every shard holds (their checkpoints were written at
    // different steps): rather than the initial weights, every shard takes
    // its newest checkpoint at or below the restarted shard's and all
    // continue as that step. The shards' weights then differ by at most a
    // checkpoint interval of updates.
    start_version = wanted;
    for (int i = 0; i < n; ++i) {
      out.status = setup(i, wanted);
      if (!out.status.ok()) return out;
    }
    target = wanted;
    relabelled = true;
  }
  int64_t lowest = target, highest = target;
  for (int i = 0; i < n; ++i) {
    highest = std::max(highest, version[i]);
    if (bsp && version[i] != target) {
      out.status = absl::InternalError(absl::StrCat(
          "could not bring the shards to one checkpoint version (shard ", i,
          " is at ", version[i], ", the others at ", target, ")"));
      return out;
    }
    lowest = std::min(lowest, version[i]);
  }
  const int64_t workers = std::max<int64_t>(1, num_workers);
  out.version = target;
  out.start_step = bsp ? target : lowest / workers;
  out.note = Note(lost, target, lowest, highest, relabelled, out.start_step,
                  incarnation);
  return out;
}

RollbackResult RollBack(ShardClient* shards, const std::string& job_id,
                        const JobSpec& spec,
                        const std::vector<std::string>& servers,
                        const UpdateMembershipRequest& workers,
                        int64_t incarnation, std::vector<int> lost,
                        const std::vector<int64_t>& replica_epochs) {
  const int n = static_cast<int>(servers.size());
  auto set_up = [&](int i, int64_t max_version,
                    int64_t start_version) -> absl::StatusOr<int64_t> {
    SetupJobRequest req;
    req.set_job_id(job_id);
    *req.mutable_spec() = spec;
    req.set_shard_index(i);
    req.set_num_shards(n);
    *req.mutable_worker_ids() = workers.worker_ids();
    *req.mutable_worker_joins() = workers.worker_joins();
    req.set_replace(true);
    req.set_incarnation(incarnation);
    req.set_start_version(start_version);
    if (i < static_cast<int>(replica_epochs.size())) {
      req.set_replica_role(SetupJobRequest::PRIMARY);
      req.set_replica_epoch(replica_epochs[i] + 1);
    }
    if (max_version != 0) {
      req.set_restore(true);
      req.set_restore_max_version(std::max<int64_t>(max_version, 0));
    }
    absl::StatusOr<SetupJobResponse> r = shards->SetupJob(servers[i], req);
    if (!r.ok()) {
      return Annotate(r.status(),
                      absl::StrCat("shard ", i, " (", servers[i], ")"));
    }
    return r->version();
  };
  return ChooseRollback(n, spec.consistency().model() == ConsistencySpec::BSP,
                        workers.worker_ids_size(), incarnation, std::move(lost),
                        set_up);
}

}  // namespace ps::coordinator
