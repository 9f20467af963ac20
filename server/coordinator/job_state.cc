#include "server/coordinator/job_state.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "common/spec/data_plan.h"

namespace ps::coordinator {
namespace {

// Fashion-MNIST's training set: used only to estimate total_steps for
// progress bars; workers decide when they are done.
constexpr int64_t kTrainExamples = 60000;

}  // namespace

bool IsTerminal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

int64_t EstimateTotalSteps(const JobSpec& spec, int num_workers) {
  if (spec.data().max_steps() > 0) return spec.data().max_steps();
  // Text data: only the workers' counting pass knows its size.
  if (spec.data().format() != DataSpec::IDX) return 0;
  const int64_t per_step = static_cast<int64_t>(std::max(1, num_workers)) *
                           std::max(1, spec.data().batch_size());
  return spec.data().epochs() * ((kTrainExamples + per_step - 1) / per_step);
}

int64_t MaxStep(const JobSpec& spec) {
  const int64_t n = EstimateTotalSteps(spec, 1);
  return n > 0 ? n : std::numeric_limits<int64_t>::max();
}

int64_t JobShardSteps(const JobRecord& record) {
  if (record.shard_steps() > 0) return record.shard_steps();
  // Unknown (0) until a worker reports what it derived from its data (IDX
  // and text alike, before its first step): a plan with no known end runs
  // to the worker's own.
  return std::max<int64_t>(0, record.spec().data().max_steps());
}

int64_t Joins(const JobRecord& record, int64_t member_id) {
  int64_t n = 0;
  for (const WorkerSlot& s : record.slots()) n += s.member_id() == member_id;
  return n;
}

int64_t MaxJobStep(const JobRecord& record) {
  return std::max(MaxStep(record.spec()), record.total_steps());
}

const WorkerSlot* ActiveSlot(const Job& job, int64_t member_id) {
  for (const WorkerSlot& s : job.record.slots()) {
    if (s.active() && s.member_id() == member_id) return &s;
  }
  return nullptr;
}

bool AllActiveDone(const Job& job) {
  bool any = false;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active()) continue;
    any = true;
    if (!s.done()) return false;
  }
  return any;
}

int CountActive(const Job& job) {
  int active = 0;
  for (const WorkerSlot& s : job.record.slots()) active += s.active();
  return active;
}

JobRecord Snapshot(const Job& job) {
  JobRecord r = job.record;
  r.set_metric_points_reported(job.points.reported());
  r.set_metric_points_kept(job.points.size());
  for (WorkerSlot& s : *r.mutable_slots()) {
    auto it = job.runtime.find(s.member_id());
    if (it != job.runtime.end() && s.active()) s.set_clock(it->second.clock);
  }
  bool plans = false;
  for (const WorkerSlot& s : r.slots()) plans |= s.plan_size() > 0;
  if (!plans) return r;
  // A slot has trained its plan's batches before its clock; a done slot or
  // an inactive one (cut where it stopped) all of its plan.
  const int64_t steps = JobShardSteps(r);
  const int64_t batch = std::max(1, r.spec().data().batch_size());
  int64_t trained = 0;
  for (const WorkerSlot& s : r.slots()) {
    trained +=
        s.active() && !s.done()
            ? PlanBatchesBefore(s.plan_start(), s.plan(),
                                std::max(s.clock(), s.start_step()), steps)
            : PlanBatches(s.plan(), steps);
  }
  r.set_examples_trained(trained * batch);
  r.set_examples_total(steps * r.num_data_shards() * batch);
  // The job's epochs are its data's: a survivor's clock runs past an
  // epoch's steps while it trains a departed worker's batches.
  if (r.steps_per_epoch() > 0 && r.num_data_shards() > 0) {
    r.set_epoch(static_cast<double>(trained) /
                static_cast<double>(r.steps_per_epoch() * r.num_data_shards()));
  }
  return r;
}

void FillAssignment(const Job& job, const WorkerSlot& slot,
                    WorkerAssignment* a) {
  a->set_command(WorkerAssignment::TRAIN);
  a->set_job_id(job.record.job_id());
  *a->mutable_spec() = job.record.spec();
  a->set_rank(slot.rank());
  a->set_num_workers(job.record.num_data_shards());
  *a->mutable_data_shards() = slot.data_shards();
  a->set_num_data_shards(job.record.num_data_shards());
  *a->mutable_server_addresses() = job.record.servers();
  a->set_evaluator(slot.evaluator());
  a->set_membership_epoch(job.record.membership_epoch());
  a->set_start_step(slot.start_step());
  a->set_incarnation(job.record.incarnation());
  *a->mutable_plan() = slot.plan();
  a->set_plan_start(slot.plan_start());
  a->set_done(slot.done());
  a->set_shard_steps(job.record.shard_steps());
  a->set_steps_per_epoch(job.record.steps_per_epoch());
  bool others_done = true;
  for (const WorkerSlot& s : job.record.slots()) {
    if (s.active() && !s.done() && s.member_id() != slot.member_id()) {
      others_done = false;
    }
  }
  a->set_others_done(others_done);
}

namespace {

// The member id shard `shard` was set up on; 0 when the record has none.
int64_t ShardMember(const JobRecord& r, int shard) {
  return shard < r.server_members_size() ? r.server_members(shard) : 0;
}

}  // namespace

bool ShardUp(const Job& job, int shard, const Membership& members) {
  const int64_t id = ShardMember(job.record, shard);
  if (id == 0) {
    return members.AliveServerAt(job.record.servers(shard)).has_value();
  }
  std::optional<Member> m = members.Get(id);
  return m.has_value() && m->role() == SERVER && m->state() == ALIVE;
}

std::vector<int> ShardsServedBy(const Job& job, const Member& server,
                                const Membership& members) {
  std::vector<int> out;
  for (int i = 0; i < job.record.servers_size(); ++i) {
    const int64_t id = ShardMember(job.record, i);
    if (id != 0 && id == server.member_id()) {
      out.push_back(i);
    } else if (job.record.servers(i) == server.address() &&
               (id == 0 || !members.IsAlive(id))) {
      out.push_back(i);
    }
  }
  return out;
}

}  // namespace ps::coordinator
