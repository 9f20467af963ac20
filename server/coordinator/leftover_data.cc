#include "server/coordinator/leftover_data.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/data_plan.h"

namespace ps::coordinator {
namespace {

int64_t Batches(const std::vector<DataSegment>& segments, int64_t steps) {
  int64_t n = 0;
  for (const DataSegment& s : segments) n += SegmentBatches(s, steps);
  return n;
}

// Splits `segments` after their first `n` batches: returns the rest.
std::vector<DataSegment> TakeFirst(std::vector<DataSegment>* segments,
                                   int64_t n, int64_t steps) {
  DataPlan plan(segments->begin(), segments->end());
  std::vector<DataSegment> rest = CutPlan(0, &plan, n, steps);
  segments->assign(plan.begin(), plan.end());
  return rest;
}

void SetShards(WorkerSlot& slot) {
  slot.clear_data_shards();
  for (int shard : PlanShards(slot.plan())) slot.add_data_shards(shard);
}

std::string Who(const WorkerSlot& s) {
  return absl::StrCat("member ", s.member_id(), " (rank ", s.rank(), ")");
}

void Skip(JobTable& table, Job& job, const WorkerSlot& gone,
          const std::vector<DataSegment>& segments, int64_t steps,
          absl::string_view why, WriteBatch* writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  const int64_t batches = Batches(segments, steps);
  if (batches == 0) return;
  const int64_t examples =
      batches * std::max(1, job.record.spec().data().batch_size());
  job.record.set_examples_skipped(job.record.examples_skipped() + examples);
  table.AddEvent(job, "data_skipped",
                 absl::StrCat(examples, " examples (", batches,
                              " batches: ", DescribeSegments(segments, steps),
                              ") of ", Who(gone), " skipped: ", why),
                 gone.member_id(), writes);
}

// The survivors to train the leftover: those still training, else (all
// done) every active slot. ASP/SSP: the plans ending first come first, so
// they take the longer parts.
std::vector<WorkerSlot*> Takers(JobRecord& record, int64_t steps, bool equal) {
  std::vector<WorkerSlot*> takers;
  for (WorkerSlot& s : *record.mutable_slots()) {
    if (s.active() && (equal || !s.done())) takers.push_back(&s);
  }
  if (takers.empty()) {
    for (WorkerSlot& s : *record.mutable_slots()) {
      if (s.active()) takers.push_back(&s);
    }
  }
  std::stable_sort(takers.begin(), takers.end(),
                   [steps](const WorkerSlot* a, const WorkerSlot* b) {
                     return PlanEnd(a->plan_start(), a->plan(), steps) <
                            PlanEnd(b->plan_start(), b->plan(), steps);
                   });
  return takers;
}

}  // namespace

void AssignInitialPlans(JobRecord& record) {
  for (WorkerSlot& s : *record.mutable_slots()) {
    s.clear_plan();
    DataSegment* d = s.add_plan();
    d->set_data_shard(s.rank());
    s.set_plan_start(0);
  }
}

bool UsesPlans(const JobRecord& record) {
  for (const WorkerSlot& s : record.slots()) {
    if (s.plan_size() > 0) return true;
  }
  return false;
}

void MoveLeftoverData(JobTable& table, Job& job, WorkerSlot& gone,
                      int64_t clock, WriteBatch* writes) {
  JobRecord& r = job.record;
  const int64_t steps = JobShardSteps(r);
  if (steps == 0) {
    // A plan of unknown length cannot be cut: wait for the count.
    gone.set_leftover_pending(true);
    gone.set_stopped_at(clock);
    table.AddEvent(job, "data_pending",
                   absl::StrCat(Who(gone), " stopped at step ", clock,
                                " before the job's data was counted: its "
                                "untrained data moves once a worker reports "
                                "the count"),
                   gone.member_id(), writes);
    return;
  }
  std::vector<DataSegment> left =
      CutPlan(gone.plan_start(), gone.mutable_plan(),
              std::max(clock, gone.plan_start()), steps);
  gone.clear_data_shards();
  if (Batches(left, steps) == 0) return;
  if (r.spec().data().leftover_data() == DataSpec::SKIP) {
    Skip(table, job, gone, left, steps, "data.leftover_data is SKIP", writes);
    return;
  }
  // BSP and SSP: every worker's plan keeps one length. The shards count a
  // finished worker's clock as where it stopped, so one plan longer than
  // another would hold a BSP barrier or an SSP bound closed for good.
  const ConsistencySpec::Model model = r.spec().consistency().model();
  const bool equal =
      model == ConsistencySpec::BSP || model == ConsistencySpec::SSP;
  std::vector<WorkerSlot*> takers = Takers(r, steps, equal);
  if (takers.empty()) return;  // the job fails: no worker left
  const int n = static_cast<int>(takers.size());
  if (equal) {
    std::vector<DataSegment> rest =
        TakeFirst(&left, Batches(left, steps) / n * n, steps);
    Skip(table, job, gone, rest, steps,
         absl::StrCat(ConsistencySpec::Model_Name(model),
                      " needs equal parts for the ", n, " workers left"),
         writes);
  }
  std::vector<std::vector<DataSegment>> parts = SplitSegments(left, n, steps);
  std::vector<std::string> moves;
  int64_t moved = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    WorkerSlot& s = *takers[i];
    const int64_t end = PlanEnd(s.plan_start(), s.plan(), steps);
    if (s.done()) {
      // It reported done at its plan's end: it trains on from there.
      s.set_done(false);
      s.set_start_step(end);
      r.set_final_evaluation(false);
    }
    for (DataSegment& d : parts[i]) *s.add_plan() = d;
    SetShards(s);
    const int64_t batches = Batches(parts[i], steps);
    moved += batches;
    r.set_total_steps(std::max(r.total_steps(), end + batches));
    moves.push_back(absl::StrCat(batches, " moved to ", Who(s), " from step ",
                                 end, " (", DescribeSegments(parts[i], steps),
                                 ")"));
  }
  if (moved == 0) return;
  table.AddEvent(
      job, "data_moved",
      absl::StrCat(Who(gone), " stopped at step ", clock, " with ", moved,
                   " batches (",
                   moved * std::max(1, r.spec().data().batch_size()),
                   " examples) untrained: ", absl::StrJoin(moves, "; ")),
      gone.member_id(), writes);
}

void MovePendingLeftovers(JobTable& table, Job& job, WriteBatch* writes) {
  if (JobShardSteps(job.record) == 0) return;
  bool changed = false;
  for (WorkerSlot& gone : *job.record.mutable_slots()) {
    if (!gone.leftover_pending()) continue;
    gone.set_leftover_pending(false);
    changed = true;
    // A worker that rejoined at the rank took its data shard back.
    bool retaken = false;
    for (const WorkerSlot& s : job.record.slots()) {
      retaken |= s.active() && s.rank() == gone.rank();
    }
    if (retaken) {
      // Its plan ends where it stopped, as a leaver's does.
      CutPlan(gone.plan_start(), gone.mutable_plan(),
              std::max(gone.stopped_at(), gone.plan_start()),
              JobShardSteps(job.record));
      gone.clear_data_shards();
    } else {
      MoveLeftoverData(table, job, gone, gone.stopped_at(), writes);
    }
  }
  if (changed) table.SaveRecord(job, writes);
}

void TakeBackRankData(JobTable& table, Job& job, WorkerSlot& back,
                      WriteBatch* writes) {
  JobRecord& r = job.record;
  const int64_t steps = JobShardSteps(r);
  const int rank = back.rank();
  std::vector<DataSegment> taken;
  int64_t common_end = 0;  // of the others' plans (BSP: all the same)
  for (WorkerSlot& s : *r.mutable_slots()) {
    if (!s.active() || &s == &back) continue;
    auto it = job.runtime.find(s.member_id());
    const int64_t clock =
        std::max(it != job.runtime.end() ? it->second.clock : 0,
                 std::max(s.plan_start(), s.start_step()));
    for (DataSegment& d :
         CutShardTail(s.plan_start(), s.mutable_plan(), rank, clock, steps)) {
      taken.push_back(std::move(d));
    }
    SetShards(s);
    common_end = std::max(common_end, PlanEnd(s.plan_start(), s.plan(), steps));
  }
  std::sort(taken.begin(), taken.end(),
            [](const DataSegment& a, const DataSegment& b) {
              return a.first_batch() < b.first_batch();
            });
  // The furthest batch of the rank's data shard in any plan: beyond it is
  // what nobody holds (skipped when its worker left). The rejoining worker
  // takes that too: up to the shard's end, or under BSP as far as the
  // others' plans go.
  int64_t next = 0;
  for (const WorkerSlot& s : r.slots()) {
    if (&s == &back) continue;
    for (const DataSegment& d : s.plan()) {
      if (d.data_shard() == rank) next = std::max(next, SegmentEnd(d, steps));
    }
  }
  for (const DataSegment& d : taken) {
    next = std::max(next, SegmentEnd(d, steps));
  }
  const bool bsp = r.spec().consistency().model() == ConsistencySpec::BSP ||
                   r.spec().consistency().model() == ConsistencySpec::SSP;
  const int64_t want =
      bsp ? std::max<int64_t>(0, common_end - back.start_step()) : -1;
  int64_t extra = std::max<int64_t>(0, steps - next);
  if (bsp)
    extra = std::min(extra, std::max<int64_t>(0, want - Batches(taken, steps)));
  if (extra > 0) {
    DataSegment d;
    d.set_data_shard(rank);
    d.set_first_batch(next);
    d.set_end_batch(next + extra);
    taken.push_back(d);
    r.set_examples_skipped(std::max<int64_t>(
        0, r.examples_skipped() -
               extra * std::max(1, r.spec().data().batch_size())));
  }
  if (bsp && Batches(taken, steps) > want) {
    // One length for every BSP worker: what does not fit is skipped.
    std::vector<DataSegment> rest = TakeFirst(&taken, want, steps);
    Skip(table, job, back, rest, steps,
         "more than the others' steps left to the rejoining worker", writes);
  }
  back.clear_plan();
  for (DataSegment& d : taken) *back.add_plan() = std::move(d);
  if (taken.empty()) {
    // Nothing to train, said with an empty segment: a plan with no segment
    // at all is a record from before plans to the worker.
    DataSegment* none = back.add_plan();
    none->set_data_shard(rank);
    none->set_first_batch(steps);
    none->set_end_batch(steps);
  }
  back.set_plan_start(back.start_step());
  SetShards(back);
  r.set_total_steps(std::max(r.total_steps(),
                             PlanEnd(back.plan_start(), back.plan(), steps)));
}

}  // namespace ps::coordinator
