#include "server/coordinator/straggler_policy.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ps::coordinator {

void RecordClockSample(WorkerRuntime& rt, int64_t clock, int64_t now,
                       int64_t window_ms) {
  rt.samples.emplace_back(now, clock);
  while (rt.samples.size() > 2 && now - rt.samples[1].first >= window_ms) {
    rt.samples.pop_front();
  }
}

void ObserveComputeTime(WorkerRuntime& rt, const MetricPoint& p, int64_t now) {
  // A worker's own speed, without the time it waited for others: in BSP
  // every worker advances at the straggler's pace, so clocks alone cannot
  // tell who is slow.
  if (p.name() != "compute_ms" || !(p.value() > 0)) return;
  rt.busy_ms = rt.busy_ms == 0 ? p.value() : 0.7 * rt.busy_ms + 0.3 * p.value();
  rt.busy_updated_ms = now;
}

std::optional<double> StepRate(const WorkerRuntime& rt, int64_t now,
                               int64_t window_ms, bool use_busy) {
  if (use_busy) return 1000.0 / rt.busy_ms;
  if (rt.samples.size() < 2) return std::nullopt;
  const auto& [t0, c0] = rt.samples.front();
  const auto& [t1, c1] = rt.samples.back();
  if (t1 - t0 < window_ms / 2 || now - t1 > window_ms) return std::nullopt;
  return (c1 - c0) * 1000.0 / static_cast<double>(t1 - t0);
}

std::vector<Straggler> DetectStragglers(Job& job, int64_t now,
                                        int64_t window_ms) {
  const StragglerPolicy& policy = job.record.spec().straggler_policy();
  if (policy.slow_ratio() <= 0) return {};
  std::vector<const WorkerSlot*> slots;
  bool use_busy = true;
  for (const WorkerSlot& s : job.record.slots()) {
    if (!s.active() || s.done()) continue;
    slots.push_back(&s);
    const WorkerRuntime& rt = job.runtime[s.member_id()];
    use_busy &= rt.busy_ms > 0 && now - rt.busy_updated_ms <= 3 * window_ms;
  }
  if (slots.size() < 2) return {};
  std::vector<double> rates;
  std::vector<int64_t> clocks;
  for (const WorkerSlot* s : slots) {
    const WorkerRuntime& rt = job.runtime[s->member_id()];
    std::optional<double> rate = StepRate(rt, now, window_ms, use_busy);
    if (!rate.has_value()) return {};  // not measured yet
    rates.push_back(*rate);
    clocks.push_back(rt.clock);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median =
      n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::sort(clocks.begin(), clocks.end());
  const int64_t median_clock = clocks[clocks.size() / 2];
  const int64_t window = std::max<int64_t>(1, policy.window_steps());
  std::vector<Straggler> out;
  for (size_t i = 0; i < slots.size(); ++i) {
    WorkerRuntime& rt = job.runtime[slots[i]->member_id()];
    if (!(rates[i] < policy.slow_ratio() * median)) {
      rt.below_since_median_clock = -1;
      rt.flagged = false;
      continue;
    }
    if (rt.below_since_median_clock < 0) {
      rt.below_since_median_clock = median_clock;
      continue;
    }
    if (rt.flagged || median_clock - rt.below_since_median_clock < window) {
      continue;
    }
    rt.flagged = true;
    out.push_back(
        {slots[i]->member_id(), slots[i]->rank(),
         absl::StrFormat(
             "step rate %.2f/s below %.2f x the median %.2f/s for %d steps",
             rates[i], policy.slow_ratio(), median,
             median_clock - rt.below_since_median_clock)});
  }
  return out;
}

}  // namespace ps::coordinator
