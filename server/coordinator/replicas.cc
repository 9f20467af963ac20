#include "server/coordinator/replicas.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace ps::coordinator {

int ReplicationFactor(const JobSpec& spec) {
  return std::max(1, spec.replication().factor());
}

std::string ReplicationShortfall(const JobSpec& spec, int num_servers) {
  const int factor = ReplicationFactor(spec);
  if (factor <= 1 || factor <= num_servers) return "";
  return absl::StrCat("replication factor ", factor, " needs ", factor,
                      " parameter servers (no two replicas of a shard share "
                      "one); ",
                      num_servers, " registered");
}

void AssignReplicas(JobRecord& record) {
  record.clear_replicas();
  const int factor = ReplicationFactor(record.spec());
  if (factor <= 1) return;
  const int n = record.servers_size();
  for (int i = 0; i < n; ++i) {
    ShardReplicas* r = record.add_replicas();
    r->set_epoch(1);
    for (int s : BackupServers(i, n, factor)) {
      r->add_backup_members(record.server_members(s));
      r->add_backup_addresses(record.servers(s));
    }
  }
}

namespace {

SetupJobRequest BaseSetup(const JobRecord& record, int shard,
                          const std::vector<int64_t>& workers) {
  SetupJobRequest req;
  req.set_job_id(record.job_id());
  *req.mutable_spec() = record.spec();
  req.set_shard_index(shard);
  req.set_num_shards(record.servers_size());
  req.set_incarnation(record.incarnation());
  for (int64_t w : workers) {
    req.add_worker_ids(w);
    req.add_worker_joins(Joins(record, w));
  }
  return req;
}

// A new backup of `r`, building until its primary reports it in sync.
void AddBuilding(ShardReplicas* r, int64_t member, const std::string& address) {
  r->add_backup_members(member);
  r->add_backup_addresses(address);
  r->add_building_members(member);
}

bool IsCut(const Job& job, int shard, int64_t member) {
  return shard < static_cast<int>(job.shards.size()) &&
         job.shards[shard].cut_backups.count(member) > 0;
}

std::vector<int64_t> ActiveWorkers(const Job& job) {
  std::vector<int64_t> out;
  for (const WorkerSlot& s : job.record.slots()) {
    if (s.active()) out.push_back(s.member_id());
  }
  return out;
}

}  // namespace

SetupJobRequest ReplicaSetup(const JobRecord& record, int shard,
                             SetupJobRequest::ReplicaRole role,
                             const std::vector<int64_t>& workers) {
  SetupJobRequest req = BaseSetup(record, shard, workers);
  if (shard >= record.replicas_size()) return req;  // unreplicated
  const ShardReplicas& r = record.replicas(shard);
  req.set_replica_role(role);
  req.set_replica_epoch(r.epoch());
  if (role == SetupJobRequest::PRIMARY) {
    for (const std::string& a : r.backup_addresses()) {
      req.add_backup_addresses(a);
    }
  }
  return req;
}

std::vector<int> LiveBackups(const Job& job, int shard,
                             const Membership& members, bool in_sync) {
  std::vector<int> out;
  if (shard >= job.record.replicas_size()) return out;
  const ShardReplicas& r = job.record.replicas(shard);
  for (int b = 0; b < r.backup_members_size(); ++b) {
    const int64_t m = r.backup_members(b);
    if (!members.IsAlive(m) || job.unreachable_servers.count(m) ||
        IsCut(job, shard, m)) {
      continue;
    }
    if (in_sync &&
        std::find(r.building_members().begin(), r.building_members().end(),
                  m) != r.building_members().end()) {
      continue;
    }
    out.push_back(b);
  }
  return out;
}

Promotion PlanPromotion(const Job& job, int shard, const Membership& members) {
  Promotion p;
  const std::vector<int> ready =
      LiveBackups(job, shard, members, /*in_sync=*/true);
  if (ready.empty()) return p;
  const ShardReplicas& r = job.record.replicas(shard);
  p.backup = ready[0];
  p.member = r.backup_members(p.backup);
  p.address = r.backup_addresses(p.backup);
  p.request = BaseSetup(job.record, shard, ActiveWorkers(job));
  p.request.set_replica_role(SetupJobRequest::PRIMARY);
  p.request.set_replica_epoch(r.epoch() + 1);
  // The other live backups followed the old primary's log, not this one's:
  // they follow the new epoch and the new primary rebuilds them.
  p.rebuilt.setup = BaseSetup(job.record, shard, ActiveWorkers(job));
  p.rebuilt.setup.set_replica_role(SetupJobRequest::BACKUP);
  p.rebuilt.setup.set_replica_epoch(r.epoch() + 1);
  for (int b : LiveBackups(job, shard, members)) {
    if (b == p.backup) continue;
    p.rebuilt.members.push_back(r.backup_members(b));
    p.rebuilt.addresses.push_back(r.backup_addresses(b));
    p.request.add_backup_addresses(r.backup_addresses(b));
  }
  return p;
}

NewBackups PlanBackupAdd(const Job& job, int shard, const Membership& members,
                         SetupJobRequest* primary) {
  NewBackups out;
  const JobRecord& rec = job.record;
  if (shard >= rec.replicas_size() ||
      shard >= static_cast<int>(job.shards.size()) ||
      job.shards[shard].primary_lost || job.shards[shard].backups_changed) {
    return out;
  }
  const ShardReplicas& r = rec.replicas(shard);
  if (r.backup_members_size() + 1 >= ReplicationFactor(rec.spec()) ||
      static_cast<int>(LiveBackups(job, shard, members).size()) !=
          r.backup_members_size()) {
    return out;  // enough, or a lost one to drop first
  }
  // Replicas of the job's shards each server holds.
  std::map<int64_t, int> held;
  for (int i = 0; i < rec.servers_size(); ++i) {
    if (i < rec.server_members_size()) ++held[rec.server_members(i)];
    if (i < rec.replicas_size()) {
      for (int64_t m : rec.replicas(i).backup_members()) ++held[m];
    }
  }
  const int64_t primary_member =
      shard < rec.server_members_size() ? rec.server_members(shard) : 0;
  std::optional<Member> best;
  for (const Member& m : members.Alive(SERVER)) {
    const int64_t id = m.member_id();
    if (id == primary_member || m.address().empty() ||
        job.unreachable_servers.count(id) || IsCut(job, shard, id) ||
        std::find(r.backup_members().begin(), r.backup_members().end(), id) !=
            r.backup_members().end()) {
      continue;
    }
    if (!best.has_value() ||
        std::make_pair(held[id], id) <
            std::make_pair(held[best->member_id()], best->member_id())) {
      best = m;
    }
  }
  if (!best.has_value()) return out;
  out.members.push_back(best->member_id());
  out.addresses.push_back(best->address());
  out.setup =
      ReplicaSetup(rec, shard, SetupJobRequest::BACKUP, ActiveWorkers(job));
  *primary =
      ReplicaSetup(rec, shard, SetupJobRequest::PRIMARY, ActiveWorkers(job));
  primary->add_backup_addresses(best->address());
  return out;
}

SetupJobRequest PlanBackupDrop(const Job& job, int shard,
                               const Membership& members) {
  if (shard >= job.record.replicas_size()) return {};
  const ShardReplicas& r = job.record.replicas(shard);
  const std::vector<int> live = LiveBackups(job, shard, members);
  const bool changed = shard < static_cast<int>(job.shards.size()) &&
                       job.shards[shard].backups_changed;
  if (!changed && static_cast<int>(live.size()) == r.backup_members_size()) {
    return {};
  }
  SetupJobRequest req = ReplicaSetup(
      job.record, shard, SetupJobRequest::PRIMARY, ActiveWorkers(job));
  req.clear_backup_addresses();
  for (int b : live) req.add_backup_addresses(r.backup_addresses(b));
  return req;
}

void ApplyPromotion(JobTable& table, Job& job, int shard, int64_t member,
                    const std::string& address, const SetupJobRequest& setup,
                    int64_t version, const NewBackups& rebuilt,
                    WriteBatch* writes) {
  JobRecord& rec = job.record;
  const std::string old_address = rec.servers(shard);
  const int64_t old_member =
      shard < rec.server_members_size() ? rec.server_members(shard) : 0;
  while (rec.server_members_size() <= shard) rec.add_server_members(0);
  rec.set_servers(shard, address);
  rec.set_server_members(shard, member);
  ShardReplicas* r = rec.mutable_replicas(shard);
  r->set_epoch(setup.replica_epoch());
  r->clear_backup_members();
  r->clear_backup_addresses();
  r->clear_building_members();
  std::vector<std::string> names;
  for (size_t b = 0; b < rebuilt.members.size(); ++b) {
    AddBuilding(r, rebuilt.members[b], rebuilt.addresses[b]);
    names.push_back(absl::StrCat("member ", rebuilt.members[b], " at ",
                                 rebuilt.addresses[b]));
  }
  ShardSync& sh = job.shards[shard];
  sh.cut_backups.clear();
  sh.down_since_ms = 0;
  sh.needs_check = false;
  sh.primary_lost = false;
  sh.backups_changed = false;
  sh.unreachable_since_ms = 0;
  sh.synced_epoch = -1;  // the membership again, to the new primary
  sh.have_counters = false;
  table.AddEvent(
      job, "failover",
      absl::StrCat("shard ", shard, ": primary member ", old_member, " at ",
                   old_address, " is lost; its backup, member ", member, " at ",
                   address, ", took over at version ", version, " (epoch ",
                   setup.replica_epoch(), "), no rollback; ",
                   names.empty()
                       ? std::string("the shard has no backup now (a new one "
                                     "is built on a free server)")
                       : absl::StrCat("its backup ", absl::StrJoin(names, ", "),
                                      " is rebuilt by a state transfer")),
      member, writes);
  table.Touch(job);
}

namespace {

int InSyncBackups(const ShardReplicas& r) {
  return r.backup_members_size() - r.building_members_size();
}

// Keeps `from`'s backup b in `to` (with its building mark).
void KeepBackup(const ShardReplicas& from, int b, ShardReplicas* to) {
  const int64_t m = from.backup_members(b);
  to->add_backup_members(m);
  to->add_backup_addresses(from.backup_addresses(b));
  if (std::find(from.building_members().begin(), from.building_members().end(),
                m) != from.building_members().end()) {
    to->add_building_members(m);
  }
}

}  // namespace

void ApplyBackupAdd(JobTable& table, Job& job, int shard,
                    const NewBackups& added, WriteBatch* writes) {
  ShardReplicas* r = job.record.mutable_replicas(shard);
  for (size_t b = 0; b < added.members.size(); ++b) {
    AddBuilding(r, added.members[b], added.addresses[b]);
    table.AddEvent(
        job, "backup_added",
        absl::StrCat("shard ", shard, ": member ", added.members[b], " at ",
                     added.addresses[b],
                     " is a new backup, built by a state transfer from the "
                     "primary while training goes on"),
        added.members[b], writes);
  }
  table.Touch(job);
}

bool NoteBackupsInSync(JobTable& table, Job& job, int shard,
                       const ShardStatus& status, WriteBatch* writes) {
  if (shard >= job.record.replicas_size()) return false;
  ShardReplicas* r = job.record.mutable_replicas(shard);
  if (r->building_members_size() == 0) return false;
  std::vector<int64_t> still;
  for (int64_t m : r->building_members()) {
    std::string address;
    for (int b = 0; b < r->backup_members_size(); ++b) {
      if (r->backup_members(b) == m) address = r->backup_addresses(b);
    }
    bool ready = false;
    for (const ShardStatus::Backup& b : status.backups()) {
      ready |= b.address() == address && !b.building();
    }
    if (!ready) {
      still.push_back(m);
      continue;
    }
    table.AddEvent(job, "backup_ready",
                   absl::StrCat("shard ", shard, ": backup member ", m, " at ",
                                address, " is in sync (state transfer done); ",
                                r->backup_members_size() + 1, " replicas"),
                   m, writes);
  }
  if (static_cast<int>(still.size()) == r->building_members_size()) {
    return false;
  }
  r->clear_building_members();
  for (int64_t m : still) r->add_building_members(m);
  table.Touch(job);
  return true;
}

void ApplyBackupDrop(JobTable& table, Job& job, int shard,
                     const SetupJobRequest& kept, WriteBatch* writes) {
  ShardReplicas* r = job.record.mutable_replicas(shard);
  ShardReplicas next;
  next.set_epoch(r->epoch());
  std::vector<std::string> dropped;
  const auto& cut = job.shards[shard].cut_backups;
  for (int b = 0; b < r->backup_members_size(); ++b) {
    const std::string& a = r->backup_addresses(b);
    const int64_t m = r->backup_members(b);
    if (std::find(kept.backup_addresses().begin(),
                  kept.backup_addresses().end(),
                  a) != kept.backup_addresses().end()) {
      KeepBackup(*r, b, &next);
    } else if (auto it = cut.find(m); it != cut.end()) {
      dropped.push_back(
          absl::StrCat("member ", m, " at ", a, " (", it->second.why, ")"));
    } else {
      dropped.push_back(absl::StrCat("member ", m, " at ", a));
    }
  }
  *r = next;
  job.shards[shard].backups_changed = false;
  if (!dropped.empty()) {
    table.AddEvent(
        job, "backup_lost",
        absl::StrCat("shard ", shard, ": backup ", absl::StrJoin(dropped, ", "),
                     " is lost; the shard goes on with ",
                     next.backup_members_size() + 1, " replica(s)"),
        0, writes);
  }
  table.Touch(job);
}

void NoteShardAnswer(Job& job, int shard, const absl::Status& result,
                     int64_t now_ms) {
  if (shard >= job.record.replicas_size() ||
      shard >= static_cast<int>(job.shards.size())) {
    return;
  }
  ShardSync& sh = job.shards[shard];
  if (!absl::IsUnavailable(result)) {
    if (result.ok()) sh.unreachable_since_ms = 0;
    return;
  }
  if (sh.unreachable_since_ms == 0) {
    sh.unreachable_since_ms = now_ms;
  } else if (now_ms - sh.unreachable_since_ms >= kUnreachableMs &&
             InSyncBackups(job.record.replicas(shard)) > 0) {
    sh.primary_lost = true;
    if (shard < job.record.server_members_size()) {
      job.unreachable_servers.insert(job.record.server_members(shard));
    }
  }
}

void NoteBackupsUnanswered(Job& job, int shard, const ShardStatus& status,
                           int64_t now_ms, int64_t timeout_ms) {
  if (shard >= job.record.replicas_size() ||
      shard >= static_cast<int>(job.shards.size())) {
    return;
  }
  const ShardReplicas& r = job.record.replicas(shard);
  auto& cut = job.shards[shard].cut_backups;
  for (auto it = cut.begin(); it != cut.end();) {
    const bool backup =
        std::find(r.backup_members().begin(), r.backup_members().end(),
                  it->first) != r.backup_members().end();
    if (!backup && now_ms - it->second.since_ms >= kCutRetryMs) {
      it = cut.erase(it);
    } else {
      ++it;
    }
  }
  for (const ShardStatus::Backup& b : status.backups()) {
    if (b.unanswered_ms() < timeout_ms) continue;
    for (int i = 0; i < r.backup_members_size(); ++i) {
      const int64_t m = r.backup_members(i);
      if (r.backup_addresses(i) != b.address() || cut.count(m)) continue;
      cut[m] = {
          now_ms,
          absl::StrCat(
              "its primary has had no answer from it for ",
              absl::FormatDuration(absl::Milliseconds(b.unanswered_ms())),
              b.last_error().empty() ? std::string()
                                     : absl::StrCat(": ", b.last_error()))};
    }
  }
}

void NoteServerRestarted(JobTable& table, int64_t member, WriteBatch* writes) {
  for (auto& [id, job] : table.jobs()) {
    if (job->record.state() != RUNNING) continue;
    // A new process: it may hold a new backup again.
    job->unreachable_servers.erase(member);
    JobRecord& rec = job->record;
    job->shards.resize(rec.servers_size());
    bool changed = false;
    for (int i = 0; i < rec.replicas_size(); ++i) {
      ShardReplicas* r = rec.mutable_replicas(i);
      ShardReplicas kept;
      kept.set_epoch(r->epoch());
      for (int b = 0; b < r->backup_members_size(); ++b) {
        if (r->backup_members(b) == member) {
          job->shards[i].backups_changed = true;
          continue;
        }
        KeepBackup(*r, b, &kept);
      }
      if (kept.backup_members_size() != r->backup_members_size()) {
        table.AddEvent(
            *job, "backup_lost",
            absl::StrCat("shard ", i, ": backup member ", member,
                         " restarted without its copy; the shard "
                         "goes on with ",
                         kept.backup_members_size() + 1, " replica(s)"),
            member, writes);
        *r = kept;
        changed = true;
      }
      if (i < rec.server_members_size() && rec.server_members(i) == member &&
          InSyncBackups(*r) > 0) {
        // Its primary restarted without the shard: a failover, not the
        // check and rollback of an unreplicated shard.
        job->shards[i].primary_lost = true;
        job->shards[i].needs_check = false;
      }
    }
    if (changed) table.SaveRecord(*job, writes);
  }
}

}  // namespace ps::coordinator
