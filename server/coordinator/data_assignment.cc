#include "server/coordinator/data_assignment.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/coordinator/leftover_data.h"
#include "server/coordinator/metric_intake.h"

namespace ps::coordinator {
namespace {

// The member to take `rank`, or -1.
int64_t PickForRank(const JobRecord& record, int rank,
                    const std::set<int64_t>& idle,
                    const std::set<int64_t>& banned) {
  // Prefer the member that held this rank before.
  int64_t pick = -1;
  for (const WorkerSlot& s : record.slots()) {
    if (s.rank() == rank && !s.banned() && idle.count(s.member_id())) {
      pick = s.member_id();
    }
  }
  if (pick >= 0) return pick;
  for (int64_t w : idle) {
    if (!banned.count(w)) return w;
  }
  return -1;
}

// Slot `member_id` takes `rank` with its data shard, at the current step.
void Rejoin(JobTable& table, Job& job, int64_t member_id, int rank,
            WriteBatch* writes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  // Take the rank's own data shard back from whoever inherited it.
  for (WorkerSlot& s : *job.record.mutable_slots()) {
    if (!s.active()) continue;
    auto* shards = s.mutable_data_shards();
    shards->erase(std::remove(shards->begin(), shards->end(), rank),
                  shards->end());
  }
  const bool plans = UsesPlans(job.record);
  WorkerSlot* slot = job.record.add_slots();
  slot->set_member_id(member_id);
  slot->set_rank(rank);
  slot->add_data_shards(rank);
  slot->set_active(true);
  slot->set_start_step(job.record.global_step());
  if (plans) TakeBackRankData(table, job, *slot, writes);
  bool has_evaluator = false;
  for (const WorkerSlot& s : job.record.slots()) {
    has_evaluator |= s.active() && s.evaluator();
  }
  slot->set_evaluator(!has_evaluator);
  const int64_t now = table.clock().NowMs();
  WorkerRuntime& rt = job.runtime[member_id];
  rt.last_heartbeat_ms = now;
  rt.clock = job.record.global_step();
  rt.clock_changed_ms = now;
  job.record.set_membership_epoch(job.record.membership_epoch() + 1);
  table.AddEvent(job, "rejoined",
                 absl::StrCat("member ", member_id, " joined as rank ", rank,
                              " at step ", job.record.global_step(), " (epoch ",
                              job.record.membership_epoch(), ")"),
                 member_id, writes);
  table.SaveRecord(job, writes);
}

}  // namespace

void AssignInitialSlots(JobRecord& record,
                        const std::vector<int64_t>& workers) {
  const int want = static_cast<int>(workers.size());
  record.clear_slots();
  for (int rank = 0; rank < want; ++rank) {
    WorkerSlot* s = record.add_slots();
    s->set_member_id(workers[rank]);
    s->set_rank(rank);
    s->add_data_shards(rank);
    s->set_active(true);
    s->set_evaluator(rank == 0);
  }
  record.set_num_data_shards(want);
  record.set_membership_epoch(1);
  record.set_total_steps(EstimateTotalSteps(record.spec(), want));
}

WorkerSlot* ChooseHeir(JobRecord& record) {
  WorkerSlot* heir = nullptr;
  for (WorkerSlot& s : *record.mutable_slots()) {
    if (!s.active()) continue;
    if (heir == nullptr || (heir->done() && !s.done()) ||
        (heir->done() == s.done() &&
         s.data_shards_size() < heir->data_shards_size())) {
      heir = &s;
    }
  }
  return heir;
}

void Evict(JobTable& table, Job& job, int64_t member_id,
           absl::string_view reason, bool banned, WriteBatch* writes) {
  auto& slots = *job.record.mutable_slots();
  WorkerSlot* gone = nullptr;
  for (WorkerSlot& s : slots) {
    if (s.active() && s.member_id() == member_id) gone = &s;
  }
  if (gone == nullptr) return;
  // Where it stopped: the last clock it reported.
  auto rt = job.runtime.find(member_id);
  const int64_t stopped = std::max(
      gone->start_step(), rt != job.runtime.end() ? rt->second.clock : 0);
  gone->set_active(false);
  gone->set_left_reason(std::string(reason));
  gone->set_banned(banned);
  job.runtime.erase(member_id);
  ForgetThroughput(job, member_id);
  job.record.set_evictions(job.record.evictions() + 1);
  job.record.set_membership_epoch(job.record.membership_epoch() + 1);
  table.AddEvent(job, "evicted",
                 absl::StrCat("member ", member_id, " (rank ", gone->rank(),
                              ") evicted: ", reason),
                 member_id, writes);
  WorkerSlot* heir = ChooseHeir(job.record);
  if (heir == nullptr) {
    table.SetState(job, FAILED,
                   absl::StrCat("no worker left: member ", member_id,
                                " was the last (", reason, ")"),
                   writes);
    return;
  }
  std::vector<int> moved(gone->data_shards().begin(),
                         gone->data_shards().end());
  if (UsesPlans(job.record)) {
    MoveLeftoverData(table, job, *gone, stopped, writes);
  } else {
    for (int shard : gone->data_shards()) heir->add_data_shards(shard);
    gone->clear_data_shards();
  }
  if (gone->evaluator()) {
    gone->set_evaluator(false);
    WorkerSlot* lowest = nullptr;
    for (WorkerSlot& s : slots) {
      if (s.active() && (lowest == nullptr || s.rank() < lowest->rank())) {
        lowest = &s;
      }
    }
    lowest->set_evaluator(true);
  }
  if (!UsesPlans(job.record)) {
    table.AddEvent(
        job, "membership",
        absl::StrCat("epoch ", job.record.membership_epoch(), ": data shards [",
                     absl::StrJoin(moved, ","), "] moved to member ",
                     heir->member_id(), " (rank ", heir->rank(), ")"),
        heir->member_id(), writes);
  }
  if (!FinishIfAllDone(table, job, "every remaining worker finished", writes)) {
    table.SaveRecord(job, writes);
  }
}

void FillVacancies(JobTable& table, Job& job, std::set<int64_t>* idle,
                   WriteBatch* writes) {
  const int n = job.record.num_data_shards();
  std::set<int> held;
  std::set<int64_t> banned;
  for (const WorkerSlot& s : job.record.slots()) {
    if (s.active()) held.insert(s.rank());
    if (s.banned()) banned.insert(s.member_id());
  }
  for (int rank = 0; rank < n && !idle->empty(); ++rank) {
    if (held.count(rank)) continue;
    const int64_t pick = PickForRank(job.record, rank, *idle, banned);
    if (pick < 0) return;
    idle->erase(pick);
    Rejoin(table, job, pick, rank, writes);
  }
}

}  // namespace ps::coordinator
