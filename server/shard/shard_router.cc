#include "server/shard/shard_router.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/platform/status.h"
#include "server/shard/shard_log.h"

namespace ps::server {

absl::StatusOr<std::unique_ptr<ShardRouter>> ShardRouter::Create(
    StoreFactory new_store, ReplicaLinkFactory links,
    MetricsRegistry* metrics) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> first, new_store());
  return std::unique_ptr<ShardRouter>(new ShardRouter(
      std::move(new_store), std::move(links), metrics, std::move(first)));
}

ShardRouter::ShardRouter(StoreFactory new_store, ReplicaLinkFactory links,
                         MetricsRegistry* metrics,
                         std::unique_ptr<ShardStore> first)
    : new_store_(std::move(new_store)),
      links_(std::move(links)),
      metrics_(metrics) {
  {
    absl::MutexLock l(&mu_);
    stores_.push_back(std::move(first));
  }
  if (metrics_ != nullptr) {
    replica_hook_ = metrics_->AddCollectHook([this] { PublishReplicas(); });
  }
}

ShardRouter::~ShardRouter() {
  replica_hook_.reset();
  StopPrimaries();
}

void ShardRouter::PublishReplicas() {
  struct Line {
    std::pair<std::string, int> key;
    SetupJobRequest::ReplicaRole role = SetupJobRequest::UNREPLICATED;
    int64_t epoch = 0;
    std::shared_ptr<ReplicatedShard> primary;
  };
  std::vector<Line> lines;
  {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [job, shards] : held_) {
      for (const auto& [shard, held] : shards) {
        if (held->role == SetupJobRequest::UNREPLICATED) continue;
        Line& line = lines.emplace_back();
        line.key = {job, shard};
        line.role = held->role;
        line.primary = held->primary;
        line.epoch = held->primary != nullptr  ? held->primary->epoch()
                     : held->backup != nullptr ? held->backup->epoch()
                                               : 0;
      }
    }
  }
  auto gauge = [&](const std::string& name, const std::string& help,
                   const std::pair<std::string, int>& key,
                   const std::string& state = "") -> prometheus::Gauge& {
    MetricsRegistry::Labels labels = {{"job", key.first},
                                      {"shard", absl::StrCat(key.second)}};
    if (!state.empty()) labels.emplace("state", state);
    return metrics_->Gauge(name, help, labels);
  };
  auto publish = [&](const std::pair<std::string, int>& key, int role,
                     int64_t epoch, int in_sync, int building, int64_t lag) {
    gauge("shard_replica_role",
          "This server's replica of the shard: 1 primary, 2 backup, 0 none",
          key)
        .Set(role);
    if (epoch > 0) {
      gauge("shard_replica_epoch",
            "The shard's replica epoch (one more at every failover)", key)
          .Set(static_cast<double>(epoch));
    }
    const std::string backups_help =
        "A primary's backups, in sync or being built by a state transfer";
    gauge("shard_replica_backups", backups_help, key, "in_sync").Set(in_sync);
    gauge("shard_replica_backups", backups_help, key, "building").Set(building);
    gauge("shard_replica_lag_entries",
          "Changes a primary made that its farthest backup does not hold yet",
          key)
        .Set(static_cast<double>(lag));
  };
  std::set<std::pair<std::string, int>> now;
  for (const Line& line : lines) {
    int in_sync = 0, building = 0;
    int64_t lag = 0;
    if (line.primary != nullptr) {
      const int64_t applied = line.primary->applied_index();
      for (const BackupStatus& b : line.primary->Backups()) {
        (b.building ? building : in_sync) += 1;
        lag = std::max(lag, applied - b.acked_index);
      }
    }
    publish(line.key, line.role, line.epoch, in_sync, building, lag);
    now.insert(line.key);
  }
  absl::MutexLock l(&publish_mu_);
  for (const auto& key : published_) {
    if (!now.count(key)) publish(key, 0, 0, 0, 0, 0);
  }
  published_ = std::move(now);
}

void ShardRouter::StopPrimaries() {
  std::vector<std::shared_ptr<ReplicatedShard>> primaries;
  {
    absl::MutexLock l(&mu_);
    for (auto& [job, shards] : held_) {
      for (auto& [shard, held] : shards) {
        if (held->primary != nullptr) primaries.push_back(held->primary);
      }
    }
  }
  for (auto& p : primaries) p->Stop();
}

std::vector<ShardRouter::Held*> ShardRouter::HeldOf(absl::string_view job_id) {
  std::vector<Held*> out;
  auto it = held_.find(job_id);
  if (it == held_.end()) return out;
  for (auto& [shard, held] : it->second) out.push_back(held.get());
  return out;
}

std::vector<ShardStore*> ShardRouter::Stores() const {
  absl::MutexLock l(&mu_);
  std::vector<ShardStore*> out;
  for (const auto& s : stores_) out.push_back(s.get());
  return out;
}

absl::StatusOr<ShardStore*> ShardRouter::FreeStore(absl::string_view job_id) {
  std::vector<ShardStore*> used;
  for (Held* h : HeldOf(job_id)) used.push_back(h->store);
  for (const auto& s : stores_) {
    if (std::find(used.begin(), used.end(), s.get()) == used.end()) {
      return s.get();
    }
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, new_store_());
  stores_.push_back(std::move(store));
  return stores_.back().get();
}

absl::StatusOr<ShardRouter::Route> ShardRouter::RouteFor(
    absl::string_view job_id, int shard) {
  // Shared: every push and pull passes here; only setups write.
  absl::ReaderMutexLock l(&mu_);
  std::vector<Held*> held = HeldOf(job_id);
  Route route;
  if (held.empty()) {
    // Not set up here: the store says why (unknown, or restarted with its
    // checkpoints here and about to be set up again).
    route.store = stores_.front().get();
    return route;
  }
  Held* target = nullptr;
  std::vector<std::string> shards;
  for (Held* h : held) {
    shards.push_back(absl::StrCat(h->shard));
    if (shard >= 0 ? h->shard == shard : h->role != SetupJobRequest::BACKUP) {
      if (shard < 0 && target != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "this server holds shards ", absl::StrJoin(shards, ", "),
            " of job '", job_id, "': the call must name its shard"));
      }
      target = h;
    }
  }
  if (target == nullptr && shard < 0 && held.size() == 1) {
    target = held[0];  // a backup: refused below
  }
  if (target == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("this server holds shard(s) ", absl::StrJoin(shards, ", "),
                     " of job '", job_id, "', not shard ", shard,
                     " (it moved: the coordinator's assignment names where)"));
  }
  if (target->role == SetupJobRequest::BACKUP) {
    return absl::UnavailableError(absl::StrCat(
        "this server holds a backup of shard ", target->shard, " of job '",
        job_id, "'; its primary answers the workers"));
  }
  route.store = target->store;
  route.primary = target->primary;
  return route;
}

std::shared_ptr<ReplicatedShard> ShardRouter::MakePrimary(
    ShardStore* store, const SetupJobRequest& request, bool transfer) {
  std::vector<std::unique_ptr<ReplicaLink>> links;
  for (const std::string& address : request.backup_addresses()) {
    links.push_back(links_(address));
  }
  return std::make_shared<ReplicatedShard>(
      store, request.job_id(), request.shard_index(), request.replica_epoch(),
      std::move(links), transfer);
}

absl::StatusOr<SetupJobResponse> ShardRouter::SetupJob(
    const SetupJobRequest& request) {
  absl::MutexLock setup(&setup_mu_);
  const int shard = request.shard_index();
  const auto role = request.replica_role();
  Held* held = nullptr;
  {
    absl::MutexLock l(&mu_);
    for (Held* h : HeldOf(request.job_id())) {
      if (h->shard == shard) held = h;
    }
  }
  if (held != nullptr && held->role == SetupJobRequest::BACKUP &&
      role == SetupJobRequest::PRIMARY && !request.replace()) {
    // A failover: the backup's state goes on as the primary's, once it
    // applied every entry it holds.
    held->backup->Drain();
    // Its backups followed the old primary: each gets a state transfer.
    std::shared_ptr<ReplicatedShard> primary =
        MakePrimary(held->store, request, /*transfer=*/true);
    PS_ASSIGN_OR_RETURN(ShardStatus status,
                        held->store->GetShardStatus(request.job_id(), shard));
    PS_ASSIGN_OR_RETURN(std::shared_ptr<const Placement> placement,
                        held->store->GetPlacement(request.job_id()));
    {
      absl::MutexLock l(&mu_);
      held->primary = std::move(primary);
      held->backup.reset();
      held->role = SetupJobRequest::PRIMARY;
    }
    ShardLog(absl::StrCat("shard ", shard, " of job '", request.job_id(),
                          "': promoted from backup to primary at version ",
                          status.version(), " (epoch ", request.replica_epoch(),
                          ")"));
    SetupJobResponse response;
    response.set_version(status.version());
    if (shard < static_cast<int>(placement->shard_chunks.size())) {
      response.set_num_chunks(
          static_cast<int64_t>(placement->shard_chunks[shard].size()));
    }
    return response;
  }
  const bool existed = held != nullptr;
  ShardStore* store = nullptr;
  std::shared_ptr<ReplicatedShard> old_primary;
  std::shared_ptr<ReplicaApplier> old_backup;
  if (held != nullptr) {
    store = held->store;
    if (request.replace() || held->role != role) {
      absl::MutexLock l(&mu_);
      old_primary = std::move(held->primary);
      old_backup = held->backup;
    }
  } else {
    absl::MutexLock l(&mu_);
    PS_ASSIGN_OR_RETURN(store, FreeStore(request.job_id()));
  }
  if (old_primary != nullptr) old_primary->Stop();
  if (old_backup != nullptr) old_backup->Stop();
  PS_ASSIGN_OR_RETURN(SetupJobResponse response, store->SetupJob(request));
  std::shared_ptr<ReplicatedShard> same;
  {
    absl::MutexLock l(&mu_);
    if (held == nullptr) {
      auto h = std::make_unique<Held>();
      h->shard = shard;
      h->store = store;
      held = h.get();
      held_[request.job_id()][shard] = std::move(h);
    }
    if (held->role == role && !request.replace() &&
        role == SetupJobRequest::PRIMARY && held->primary != nullptr) {
      same = held->primary;
    }
  }
  if (same != nullptr) {
    // The same setup again: only the backups can have changed. (Outside
    // the router's lock: a new one's image waits for the shard's turn.)
    same->SetBackups(
        {request.backup_addresses().begin(), request.backup_addresses().end()},
        links_);
    return response;
  }
  absl::MutexLock l(&mu_);
  held->role = role;
  held->primary.reset();
  held->backup.reset();
  if (role == SetupJobRequest::PRIMARY) {
    // A shard held here already (restored, or unreplicated until now) has
    // moved past the state a new backup starts from. (The coordinator
    // gives backups to a running primary only through SetBackups above,
    // whose turn every change goes through.)
    held->primary = MakePrimary(store, request, /*transfer=*/existed);
  } else if (role == SetupJobRequest::BACKUP) {
    prometheus::Counter* mismatches = nullptr;
    if (metrics_ != nullptr) {
      mismatches = &metrics_->Counter(
          "shard_replica_mismatches_total",
          "Replicated changes this backup answered otherwise than its "
          "primary (the copies may differ)",
          {{"job", request.job_id()}, {"shard", absl::StrCat(shard)}});
    }
    held->backup = std::make_shared<ReplicaApplier>(
        store, request.replica_epoch(), mismatches);
  }
  return response;
}

absl::Status ShardRouter::TeardownJob(const TeardownJobRequest& request) {
  absl::MutexLock setup(&setup_mu_);
  std::vector<std::pair<ShardStore*, std::shared_ptr<ReplicatedShard>>> held;
  std::vector<std::shared_ptr<ReplicaApplier>> backups;
  {
    absl::MutexLock l(&mu_);
    for (Held* h : HeldOf(request.job_id())) {
      held.emplace_back(h->store, h->primary);
      if (h->backup != nullptr) backups.push_back(h->backup);
    }
    if (held.empty()) held.emplace_back(stores_.front().get(), nullptr);
  }
  for (auto& b : backups) b->Stop();
  absl::Status first;
  for (auto& [store, primary] : held) {
    if (primary != nullptr) primary->Stop();
    absl::Status s = store->TeardownJob(request);
    if (first.ok()) first = s;
  }
  absl::MutexLock l(&mu_);
  held_.erase(request.job_id());
  return first;
}

absl::StatusOr<UpdateMembershipResponse> ShardRouter::UpdateMembership(
    const UpdateMembershipRequest& request) {
  std::vector<std::pair<ShardStore*, std::shared_ptr<ReplicatedShard>>> held;
  {
    absl::MutexLock l(&mu_);
    for (Held* h : HeldOf(request.job_id())) {
      // A backup follows its primary's membership (a log entry).
      if (h->role != SetupJobRequest::BACKUP) {
        held.emplace_back(h->store, h->primary);
      }
    }
    if (held.empty()) held.emplace_back(stores_.front().get(), nullptr);
  }
  absl::StatusOr<UpdateMembershipResponse> result;
  for (auto& [store, primary] : held) {
    absl::StatusOr<UpdateMembershipResponse> r =
        primary != nullptr ? primary->UpdateMembership(request)
                           : store->UpdateMembership(request);
    if (!r.ok()) return r;
    result = r;
  }
  return result;
}

absl::StatusOr<PushResult> ShardRouter::Push(const PushArgs& args,
                                             absl::Time deadline) {
  PS_ASSIGN_OR_RETURN(Route route, RouteFor(args.job_id, args.shard));
  if (route.primary != nullptr) return route.primary->Push(args, deadline);
  return route.store->Push(args, deadline);
}

bool ShardRouter::PushMayWait(const PushArgs& args) {
  absl::StatusOr<Route> route = RouteFor(args.job_id, args.shard);
  if (!route.ok()) return false;
  // A replicated push waits for its backups: never on the caller's thread.
  if (route->primary != nullptr) return true;
  return route->store->PushMayWait(args);
}

absl::StatusOr<PullResult> ShardRouter::PullWithRows(const PullArgs& args,
                                                     absl::Time deadline,
                                                     ChunkSink sink,
                                                     const SparseSink* rows) {
  PS_ASSIGN_OR_RETURN(Route route, RouteFor(args.job_id, args.shard));
  if (route.primary != nullptr) {
    return route.primary->PullWithRows(args, deadline, sink, rows);
  }
  return route.store->PullWithRows(args, deadline, sink, rows);
}

absl::StatusOr<CheckpointResponse> ShardRouter::Checkpoint(
    absl::string_view job_id) {
  std::vector<ShardStore*> stores;
  {
    absl::MutexLock l(&mu_);
    for (Held* h : HeldOf(job_id)) {
      if (h->role != SetupJobRequest::BACKUP) stores.push_back(h->store);
    }
    if (stores.empty()) stores.push_back(stores_.front().get());
  }
  absl::StatusOr<CheckpointResponse> result;
  for (ShardStore* s : stores) {
    result = s->Checkpoint(job_id);
    if (!result.ok()) return result;
  }
  return result;
}

absl::Status ShardRouter::CheckpointDue() {
  absl::Status first;
  for (ShardStore* s : Stores()) {
    absl::Status st = s->CheckpointDue();
    if (first.ok()) first = st;
  }
  return first;
}

void ShardRouter::WaitForCheckpointWork(absl::Duration timeout) {
  std::vector<ShardStore*> stores = Stores();
  // Only the first store's work wakes this; the others' is found within
  // 200 ms.
  stores.front()->WaitForCheckpointWork(
      stores.size() == 1 ? timeout
                         : std::min(timeout, absl::Milliseconds(200)));
}

absl::Status ShardRouter::CheckpointAll() {
  absl::Status first;
  for (ShardStore* s : Stores()) {
    absl::Status st = s->CheckpointAll();
    if (first.ok()) first = st;
  }
  return first;
}

absl::StatusOr<ShardStatus> ShardRouter::GetShardStatus(
    absl::string_view job_id, int shard) {
  ShardStore* store = nullptr;
  std::shared_ptr<ReplicatedShard> primary;
  std::shared_ptr<ReplicaApplier> backup;
  SetupJobRequest::ReplicaRole role = SetupJobRequest::UNREPLICATED;
  {
    absl::MutexLock l(&mu_);
    std::vector<Held*> held = HeldOf(job_id);
    for (Held* h : held) {
      if (shard >= 0
              ? h->shard == shard
              : (h->role != SetupJobRequest::BACKUP || held.size() == 1)) {
        store = h->store;
        primary = h->primary;
        backup = h->backup;
        role = h->role;
        break;
      }
    }
    if (store == nullptr && held.empty()) store = stores_.front().get();
  }
  if (store == nullptr) {
    return absl::NotFoundError(absl::StrCat("shard ", shard, " of job '",
                                            job_id, "' is not held here"));
  }
  PS_ASSIGN_OR_RETURN(ShardStatus status, store->GetShardStatus(job_id, -1));
  status.set_replica_role(role);
  if (primary != nullptr) {
    status.set_replica_index(primary->applied_index());
    status.set_replica_epoch(primary->epoch());
    for (const BackupStatus& b : primary->Backups()) {
      ShardStatus::Backup* out = status.add_backups();
      out->set_address(b.address);
      out->set_acked_index(b.acked_index);
      out->set_last_error(b.last_error);
      out->set_building(b.building);
      out->set_unanswered_ms(absl::ToInt64Milliseconds(b.unanswered));
    }
  } else if (backup != nullptr) {
    status.set_replica_index(backup->held_index());
    status.set_replica_epoch(backup->epoch());
  }
  return status;
}

absl::StatusOr<ReplicateResponse> ShardRouter::Replicate(
    const ReplicateRequest& request) {
  std::shared_ptr<ReplicaApplier> backup;
  {
    absl::MutexLock l(&mu_);
    Held* held = nullptr;
    for (Held* h : HeldOf(request.job_id())) {
      if (h->shard == request.shard()) held = h;
    }
    if (held == nullptr) {
      return absl::NotFoundError(absl::StrCat("no replica of shard ",
                                              request.shard(), " of job '",
                                              request.job_id(), "' here"));
    }
    if (held->backup == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", request.shard(), " of job '", request.job_id(),
          "' is not a backup here (it was promoted): a deposed primary's "
          "entries are refused"));
    }
    backup = held->backup;
  }
  return backup->Apply(request);
}

void ShardRouter::Shutdown() {
  StopPrimaries();
  for (ShardStore* s : Stores()) s->Shutdown();
}

absl::StatusOr<std::shared_ptr<const Placement>> ShardRouter::GetPlacement(
    absl::string_view job_id) {
  ShardStore* store = nullptr;
  {
    absl::MutexLock l(&mu_);
    std::vector<Held*> held = HeldOf(job_id);
    // Every shard of a job has the job's placement.
    store = held.empty() ? stores_.front().get() : held[0]->store;
  }
  return store->GetPlacement(job_id);
}

}  // namespace ps::server
