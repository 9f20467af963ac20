#include "common/spec/data_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {

DataSegment PlanSegment(int data_shard, int64_t first, int64_t end) {
  DataSegment s;
  s.set_data_shard(data_shard);
  s.set_first_batch(first);
  s.set_end_batch(end);
  return s;
}

int64_t SegmentEnd(const DataSegment& s, int64_t shard_steps) {
  return s.end_batch() > 0 ? s.end_batch() : shard_steps;
}

int64_t SegmentBatches(const DataSegment& s, int64_t shard_steps) {
  return std::max<int64_t>(0, SegmentEnd(s, shard_steps) - s.first_batch());
}

std::vector<PlanRun> PlanRuns(int64_t plan_start, const DataPlan& plan,
                              int64_t shard_steps) {
  std::vector<PlanRun> runs;
  int64_t clock = plan_start;
  for (const DataSegment& s : plan) {
    const int64_t n = SegmentBatches(s, shard_steps);
    if (n == 0) continue;
    runs.push_back({s.data_shard(), s.first_batch(), clock, clock + n});
    clock += n;
  }
  return runs;
}

int64_t PlanEnd(int64_t plan_start, const DataPlan& plan, int64_t shard_steps) {
  return plan_start + PlanBatches(plan, shard_steps);
}

int64_t PlanBatches(const DataPlan& plan, int64_t shard_steps) {
  int64_t n = 0;
  for (const DataSegment& s : plan) n += SegmentBatches(s, shard_steps);
  return n;
}

int64_t PlanBatchesBefore(int64_t plan_start, const DataPlan& plan,
                          int64_t clock, int64_t shard_steps) {
  int64_t n = 0;
  for (const PlanRun& r : PlanRuns(plan_start, plan, shard_steps)) {
    n += std::max<int64_t>(0, std::min(clock, r.end) - r.begin);
  }
  return n;
}

std::vector<DataSegment> CutPlan(int64_t plan_start, DataPlan* plan,
                                 int64_t clock, int64_t shard_steps) {
  std::vector<DataSegment> cut;
  DataPlan kept;
  for (const PlanRun& r : PlanRuns(plan_start, *plan, shard_steps)) {
    const int64_t split = std::clamp(clock, r.begin, r.end);
    const int64_t at = r.first_batch + (split - r.begin);
    if (split > r.begin)
      *kept.Add() = PlanSegment(r.data_shard, r.first_batch, at);
    if (split < r.end) {
      cut.push_back(
          PlanSegment(r.data_shard, at, r.first_batch + (r.end - r.begin)));
    }
  }
  *plan = std::move(kept);
  return cut;
}

std::vector<DataSegment> CutShardTail(int64_t plan_start, DataPlan* plan,
                                      int data_shard, int64_t clock,
                                      int64_t shard_steps) {
  std::vector<PlanRun> runs = PlanRuns(plan_start, *plan, shard_steps);
  // The trailing runs of the shard that end after `clock`.
  size_t first = runs.size();
  while (first > 0 && runs[first - 1].data_shard == data_shard &&
         runs[first - 1].end > clock) {
    --first;
  }
  if (first == runs.size()) return {};
  return CutPlan(plan_start, plan, std::max(clock, runs[first].begin),
                 shard_steps);
}

std::vector<std::vector<DataSegment>> SplitSegments(
    const std::vector<DataSegment>& segments, int parts, int64_t shard_steps) {
  int64_t total = 0;
  for (const DataSegment& s : segments) total += SegmentBatches(s, shard_steps);
  const int64_t n = std::min<int64_t>(std::max(parts, 1), total);
  std::vector<std::vector<DataSegment>> out;
  if (n == 0) return out;
  out.resize(n);
  size_t k = 0;
  int64_t next = segments.empty() ? 0 : segments[0].first_batch();
  for (int64_t part = 0; part < n; ++part) {
    int64_t want = total / n + (part < total % n ? 1 : 0);
    while (want > 0) {
      while (next >= SegmentEnd(segments[k], shard_steps)) {
        ++k;
        next = segments[k].first_batch();
      }
      const int64_t end =
          std::min(SegmentEnd(segments[k], shard_steps), next + want);
      out[part].push_back(PlanSegment(segments[k].data_shard(), next, end));
      want -= end - next;
      next = end;
    }
  }
  return out;
}

std::vector<int> PlanShards(const DataPlan& plan) {
  std::vector<int> shards;
  for (const DataSegment& s : plan) {
    if (std::find(shards.begin(), shards.end(), s.data_shard()) ==
        shards.end()) {
      shards.push_back(s.data_shard());
    }
  }
  return shards;
}

std::string DescribeSegments(const std::vector<DataSegment>& segments,
                             int64_t shard_steps) {
  std::vector<std::string> parts;
  for (const DataSegment& s : segments) {
    parts.push_back(absl::StrCat("shard ", s.data_shard(), " batches ",
                                 s.first_batch(), "-",
                                 SegmentEnd(s, shard_steps) - 1));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace ps
