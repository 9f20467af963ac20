#include "tools/psctl/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps::psctl {
namespace {

// How many reported points a point stands for: more than one when the
// coordinator merged older points of a long series (MetricPoint.merged).
double Weight(const MetricPoint& p) {
  return p.merged() > 1 ? static_cast<double>(p.merged()) : 1.0;
}

// The best value among the points a point stands for, in the metric's
// direction (the value itself for a point as reported).
double BestOf(const TestMetricInfo& metric, const MetricPoint& p) {
  if (p.merged() <= 1) return p.value();
  return metric.higher_is_better ? p.max_value() : p.min_value();
}

// Training loss averaged over all workers in bins of 1/10 epoch, so that one
// line per job stays readable however many workers reported.
struct Bin {
  double loss_sum = 0, time_sum = 0;
  double n = 0;  // reported points (merged ones weigh what they stand for)
};

std::map<int64_t, Bin> LossBins(const std::vector<MetricPoint>& points) {
  std::map<int64_t, Bin> bins;
  for (const MetricPoint& p : points) {
    if (p.name() != "train_loss") continue;
    Bin& b = bins[static_cast<int64_t>(std::floor(p.epoch() * 10))];
    const double w = Weight(p);
    b.loss_sum += p.value() * w;
    b.time_sum += p.time_ms() / 1000.0 * w;
    b.n += w;
  }
  return bins;
}

std::string SafeName(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// The points of one test metric, in time order.
std::vector<const MetricPoint*> SeriesOf(const std::vector<MetricPoint>& points,
                                         const TestMetricInfo& metric) {
  std::vector<const MetricPoint*> series;
  for (const MetricPoint& p : points) {
    if (p.name() == metric.point_name) series.push_back(&p);
  }
  std::stable_sort(series.begin(), series.end(),
                   [](const MetricPoint* a, const MetricPoint* b) {
                     return a->time_ms() < b->time_ms();
                   });
  return series;
}

MetricValues Values(const std::vector<MetricPoint>& points,
                    const TestMetricInfo& metric) {
  MetricValues v;
  v.metric = &metric;
  for (const MetricPoint* p : SeriesOf(points, metric)) {
    const double best = BestOf(metric, *p);
    if (IsBetter(metric, best, v.best_value)) v.best_value = best;
    v.final_value = p->value();
    v.final_model = p->final_model();
    v.last_time_s = p->time_ms() / 1000.0;
    v.evaluations += static_cast<int64_t>(Weight(*p));
  }
  return v;
}

const char* Direction(const TestMetricInfo& metric) {
  return metric.higher_is_better ? "higher is better" : "lower is better";
}

// "AUC >= 0.8", "logloss <= 0.45".
std::string TargetText(const TestMetricInfo& metric, double target) {
  return absl::StrFormat("%s %s %g", metric.name,
                         metric.higher_is_better ? ">=" : "<=", target);
}

std::string Value4(double v) {
  return std::isnan(v) ? "-" : absl::StrFormat("%.4f", v);
}

// Throughput, staleness, drops and evictions: what the system did, whatever
// the metric.
void SummarizeSystem(const JobData& job, JobSummary& s) {
  // Means weigh a merged point by the points it stands for, so they are
  // the means of what the workers reported.
  std::map<int64_t, std::pair<double, double>> rate_by_worker;
  double staleness_sum = 0;
  double staleness_n = 0;
  for (const MetricPoint& p : job.points) {
    const double w = Weight(p);
    const double high = p.merged() > 1 ? p.max_value() : p.value();
    if (p.name() == "examples_per_sec") {
      auto& [sum, n] = rate_by_worker[p.member_id()];
      sum += p.value() * w;
      n += w;
    } else if (p.name() == "staleness") {
      staleness_sum += p.value() * w;
      staleness_n += w;
    } else if (p.name() == "dropped_pushes") {
      s.dropped_pushes = std::max<int64_t>(s.dropped_pushes, high);
    } else if (p.name() == "rejected_pushes") {
      s.rejected_pushes = std::max<int64_t>(s.rejected_pushes, high);
    }
  }
  for (const auto& [worker, sum_n] : rate_by_worker) {
    s.examples_per_sec += sum_n.first / sum_n.second;
  }
  if (staleness_n > 0) s.mean_staleness = staleness_sum / staleness_n;
  for (const JobEvent& e : job.events) {
    if (e.kind() == "evicted") ++s.evictions;
  }
  // The coordinator's own totals (read from the shards before teardown) win
  // over what the metric series and events show.
  const JobRecord& r = job.record;
  s.dropped_pushes = std::max(s.dropped_pushes, r.dropped_pushes());
  s.rejected_pushes = std::max(s.rejected_pushes, r.rejected_pushes());
  s.evictions = std::max(s.evictions, r.evictions());
  if (r.mean_staleness() > 0) s.mean_staleness = r.mean_staleness();
}

// <metric_file>: time_s epoch step value of the metric's points;
// <loss_file>: the binned training loss.
// Returns the numbers of metric and loss lines written.
absl::StatusOr<std::pair<size_t, size_t>> WriteJobData(
    const JobData& job, const TestMetricInfo& metric,
    const std::string& metric_file, const std::string& loss_file) {
  const std::vector<const MetricPoint*> series = SeriesOf(job.points, metric);
  const std::map<int64_t, Bin> bins = LossBins(job.points);
  std::ofstream out(metric_file);
  out << "# time_s epoch step " << metric.point_name << "\n";
  for (const MetricPoint* p : series) {
    out << p->time_ms() / 1000.0 << " " << p->epoch() << " " << p->step() << " "
        << p->value() << "\n";
  }
  std::ofstream loss(loss_file);
  loss << "# time_s epoch train_loss (mean over workers per 0.1 epoch)\n";
  for (const auto& [bin, b] : bins) {
    loss << b.time_sum / b.n << " " << bin / 10.0 << " " << b.loss_sum / b.n
         << "\n";
  }
  out.close();
  loss.close();
  if (!out || !loss) {
    return absl::InternalError(
        absl::StrCat("cannot write ", metric_file, " or ", loss_file));
  }
  return std::pair{series.size(), bins.size()};
}

// A gnuplot `plot` of `data` (one curve per job that has points) and `extra`
// (the target). gnuplot refuses a plot with no point at all ("x range is
// invalid"), so with no data the panel says `note` instead.
std::string PlotCommand(const std::vector<std::string>& data,
                        const std::vector<std::string>& extra,
                        absl::string_view note) {
  if (!data.empty()) {
    std::vector<std::string> all = data;
    all.insert(all.end(), extra.begin(), extra.end());
    return absl::StrCat("plot ", absl::StrJoin(all, ", "), "\n");
  }
  return absl::StrCat(
      "set label 1 '", note, "' at graph 0.5, graph 0.5 center\n",
      "set xrange [0:1]\n",
      extra.empty() ? "set yrange [0:1]\nplot NaN notitle\n"
                    : absl::StrCat("plot ", absl::StrJoin(extra, ", "), "\n"),
      "unset label 1\nset autoscale\n");
}

// JobMetric, or nullptr where it would fall back to accuracy (no target, no
// test point yet): such a job has no say in a comparison's metric.
const TestMetricInfo* KnownJobMetric(const JobData& job) {
  if (const JobTarget t = TargetOf(job.record.spec()); t.metric != nullptr) {
    return t.metric;
  }
  for (const TestMetricInfo& m : TestMetrics()) {
    for (const MetricPoint& p : job.points) {
      if (p.name() == m.point_name) return &m;
    }
  }
  return nullptr;
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::vector<const TestMetricInfo*> ShownMetrics(const JobSpec& spec) {
  std::vector<const TestMetricInfo*> shown;
  auto add = [&shown](const TestMetricInfo* m) {
    if (m != nullptr && std::find(shown.begin(), shown.end(), m) == shown.end())
      shown.push_back(m);
  };
  add(TargetOf(spec).metric);
  switch (spec.model().head().loss()) {
    case HeadSpec::SIGMOID_CROSS_ENTROPY:
      add(FindTestMetric("auc"));
      add(FindTestMetric("logloss"));
      break;
    case HeadSpec::MEAN_SQUARED_ERROR:
      add(FindTestMetric("rmse"));
      break;
    default:  // softmax, or the MlpSpec shorthand (a softmax head)
      add(&AccuracyMetric());
      break;
  }
  return shown;
}

std::vector<LiveMetric> LatestValues(
    const std::vector<MetricPoint>& points,
    const std::vector<const TestMetricInfo*>& metrics) {
  std::vector<LiveMetric> out;
  for (const TestMetricInfo* m : metrics) {
    LiveMetric v;
    v.metric = m;
    if (const std::vector<const MetricPoint*> series = SeriesOf(points, *m);
        !series.empty()) {
      v.value = series.back()->value();
    }
    out.push_back(v);
  }
  return out;
}

std::string ShortName(const TestMetricInfo& metric) { return PlotTag(metric); }

std::string FormatLiveMetric(const LiveMetric& m) {
  return absl::StrCat(ShortName(*m.metric), " ", Value4(m.value));
}

std::string ProgressLine(const JobRecord& job,
                         const std::vector<LiveMetric>& metrics,
                         double elapsed_s, int width) {
  // Text-data jobs have no total steps (each worker counts its shards'
  // examples): their epoch out of the spec's epochs (default 1) stands in
  // for it, unless max_steps ends the job instead.
  const DataSpec& data = job.spec().data();
  const int64_t epochs =
      data.max_steps() > 0 ? 0 : std::max<int64_t>(1, data.epochs());
  const bool steps_known = job.total_steps() > 0;
  double frac = 0;
  if (steps_known) {
    frac = static_cast<double>(job.global_step()) /
           static_cast<double>(job.total_steps());
  } else if (epochs > 0) {
    frac = job.epoch() / static_cast<double>(epochs);
  }
  frac = std::clamp(frac, 0.0, 1.0);
  const int bar = std::max(10, width);
  const int filled = static_cast<int>(frac * bar);
  std::string line =
      "[" + std::string(filled, '#') + std::string(bar - filled, '.') + "]";
  if (steps_known || epochs > 0) {
    absl::StrAppendFormat(&line, " %3d%%", static_cast<int>(frac * 100));
  }
  if (steps_known) {
    absl::StrAppendFormat(&line, " epoch %.2f step %d/%d", job.epoch(),
                          job.global_step(), job.total_steps());
  } else {
    absl::StrAppendFormat(&line, " epoch %.2f", job.epoch());
    if (epochs > 0) absl::StrAppendFormat(&line, "/%d", epochs);
    absl::StrAppendFormat(&line, " step %d", job.global_step());
    if (job.examples_trained() > 0) {
      absl::StrAppendFormat(&line, " %d examples", job.examples_trained());
    }
  }
  absl::StrAppendFormat(&line, " loss %.4f", job.last_train_loss());
  for (LiveMetric m : metrics) {
    if (m.metric == &AccuracyMetric() && std::isnan(m.value) &&
        job.last_test_accuracy() > 0) {
      m.value = job.last_test_accuracy();
    }
    absl::StrAppend(&line, " ", FormatLiveMetric(m));
  }
  absl::StrAppendFormat(&line, " %.0f ex/s", job.examples_per_sec());
  if (frac > 0 && frac < 1) {
    absl::StrAppend(&line, " ETA ",
                    FormatDuration(elapsed_s * (1 - frac) / frac));
  }
  return line;
}

std::string ProgressLine(const JobRecord& job, double elapsed_s, int width) {
  return ProgressLine(job, LatestValues({}, ShownMetrics(job.spec())),
                      elapsed_s, width);
}

std::string FormatThinnedSeries(const JobRecord& r) {
  if (r.metric_points_kept() >= r.metric_points_reported()) return "";
  return absl::StrFormat(
      "%d metric points reported, %d kept: older points of long series "
      "merged (coordinator --max_points_per_series)",
      r.metric_points_reported(), r.metric_points_kept());
}

std::string FormatDataProgress(const JobRecord& r) {
  if (r.examples_total() <= 0) return "";
  std::string line =
      absl::StrFormat("%d/%d examples trained (%.1f%%)", r.examples_trained(),
                      r.examples_total(),
                      100.0 * static_cast<double>(r.examples_trained()) /
                          static_cast<double>(r.examples_total()));
  if (r.examples_skipped() > 0) {
    absl::StrAppendFormat(&line, ", %d skipped", r.examples_skipped());
  }
  return line;
}

const TestMetricInfo& JobMetric(const JobData& job) {
  const TestMetricInfo* m = KnownJobMetric(job);
  return m != nullptr ? *m : AccuracyMetric();
}

JobSummary Summarize(const JobData& job, const TestMetricInfo& metric,
                     double target) {
  JobSummary s;
  s.job_id = job.record.job_id();
  s.name = job.record.spec().name();
  s.state = JobState_Name(job.record.state());
  s.steps = job.record.global_step();
  if (job.record.end_time_ms() > 0 && job.record.start_time_ms() > 0) {
    s.wall_seconds =
        (job.record.end_time_ms() - job.record.start_time_ms()) / 1000.0;
  }
  s.target = target > 0 ? target : 0;
  s.values = Values(job.points, metric);
  for (const MetricPoint* p : SeriesOf(job.points, metric)) {
    // A merged point counts when one of its evaluations met the target;
    // its time, step and epoch are then those of the merged span's middle.
    if (s.target > 0 && MeetsTarget(metric, BestOf(metric, *p), s.target)) {
      s.seconds_to_target = p->time_ms() / 1000.0;
      s.steps_to_target = p->step();
      s.epochs_to_target = p->epoch();
      break;
    }
  }
  for (const TestMetricInfo& m : TestMetrics()) {
    if (&m == &metric) continue;
    if (MetricValues v = Values(job.points, m); v.evaluations > 0) {
      s.other_metrics.push_back(v);
    }
  }
  SummarizeSystem(job, s);
  return s;
}

JobSummary Summarize(const JobData& job, double target) {
  return Summarize(job, JobMetric(job), target);
}

JobSummary Summarize(const JobData& job) {
  const TestMetricInfo& metric = JobMetric(job);
  const JobTarget t = TargetOf(job.record.spec());
  return Summarize(job, metric, t.metric == &metric ? t.value : 0);
}

std::string FormatMetricValues(const MetricValues& v) {
  if (v.evaluations == 0) {
    return absl::StrCat(v.metric->label, " - (no evaluation yet)");
  }
  return absl::StrFormat("%s %.4f (best %.4f, %s; %d evaluation%s%s)",
                         v.metric->label, v.final_value, v.best_value,
                         Direction(*v.metric), v.evaluations,
                         v.evaluations == 1 ? "" : "s",
                         v.final_model ? ", the last of the final model" : "");
}

std::string FormatTargetProgress(const JobSummary& s) {
  if (s.target <= 0) return "";
  std::string out = absl::StrCat(TargetText(*s.values.metric, s.target), ": ");
  if (s.seconds_to_target < 0) return absl::StrCat(out, "not reached");
  absl::StrAppendFormat(&out, "reached after %s (step %d, epoch %.2f)",
                        FormatDuration(s.seconds_to_target), s.steps_to_target,
                        s.epochs_to_target);
  return out;
}

absl::StatusOr<ComparisonMetric> ChooseComparisonMetric(
    const std::vector<JobData>& jobs, absl::string_view metric_flag,
    double target_flag) {
  ComparisonMetric cmp;
  if (!metric_flag.empty()) {
    cmp.metric = FindTestMetric(metric_flag);
    if (cmp.metric == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metric: unknown metric '", metric_flag, "'; one of ",
                       TestMetricNames()));
    }
  } else {
    // Jobs that have not evaluated yet (and set no target) take the others'.
    const TestMetricInfo* common = nullptr;
    std::vector<std::string> each;
    bool mixed = false;
    for (const JobData& j : jobs) {
      const TestMetricInfo* m = KnownJobMetric(j);
      if (m == nullptr) continue;
      if (common == nullptr) common = m;
      mixed |= m != common;
      each.push_back(absl::StrCat(j.record.job_id(), ": ", m->name));
    }
    if (common != nullptr) cmp.metric = common;
    if (mixed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the jobs are judged by different metrics (",
          absl::StrJoin(each, ", "), "); compare them in one with --metric (",
          TestMetricNames(), ")"));
    }
  }
  if (target_flag != 0) {
    if (const std::string problem =
            TargetValueProblem(*cmp.metric, target_flag);
        !problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--target: ", problem));
    }
    cmp.target = target_flag;
    return cmp;
  }
  for (const JobData& j : jobs) {
    if (const JobTarget t = TargetOf(j.record.spec()); t.metric == cmp.metric) {
      cmp.target = t.value;
      break;
    }
  }
  return cmp;
}

std::string FormatComparison(const std::vector<JobSummary>& rows,
                             const ComparisonMetric& cmp) {
  const TestMetricInfo& m = *cmp.metric;
  std::string out = absl::StrCat("metric: ", m.label, " (", Direction(m), ")");
  if (cmp.target > 0) {
    absl::StrAppend(&out, "; t@, steps@, epoch@: the first evaluation with ",
                    TargetText(m, cmp.target), "\n");
  } else {
    absl::StrAppend(&out,
                    "; no target (set target in the job spec, or --target)\n");
  }
  const std::string t_head =
      cmp.target > 0 ? absl::StrFormat("t@%g", cmp.target) : "t@-";
  absl::StrAppendFormat(
      &out, "%-14s %-16s %-9s %7s %7s %9s %8s %7s %9s %8s %7s %7s %6s\n", "job",
      "name", "state", "final", "best", t_head, "steps@", "epoch@", "ex/s",
      "stale", "dropped", "reject", "evict");
  for (const JobSummary& r : rows) {
    const bool none = cmp.target <= 0 || r.values.evaluations == 0;
    const std::string t = r.seconds_to_target >= 0
                              ? FormatDuration(r.seconds_to_target)
                              : (none ? "-" : "never");
    const std::string st =
        r.steps_to_target >= 0 ? absl::StrCat(r.steps_to_target) : "-";
    const std::string ep = r.epochs_to_target >= 0
                               ? absl::StrFormat("%.2f", r.epochs_to_target)
                               : "-";
    absl::StrAppendFormat(
        &out, "%-14s %-16s %-9s %7s %7s %9s %8s %7s %9.0f %8.2f %7d %7d %6d\n",
        r.job_id.substr(0, 14), r.name.substr(0, 16), r.state.substr(0, 9),
        Value4(r.values.final_value), Value4(r.values.best_value), t, st, ep,
        r.examples_per_sec, r.mean_staleness, r.dropped_pushes,
        r.rejected_pushes, r.evictions);
  }
  return out;
}

std::string PlotTag(const TestMetricInfo& metric) {
  return &metric == &AccuracyMetric() ? "acc" : std::string(metric.name);
}

absl::Status WritePlots(const std::vector<JobData>& jobs,
                        const ComparisonMetric& cmp,
                        const std::string& prefix) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (tools/setup.sh installs gnuplot-nox)");
  }
  const TestMetricInfo& metric = *cmp.metric;
  const std::string tag = PlotTag(metric);
  std::vector<std::string> m_time, m_epoch, loss_time, loss_epoch;
  for (const JobData& job : jobs) {
    const std::string label = job.record.spec().name().empty()
                                  ? job.record.job_id()
                                  : job.record.spec().name();
    const std::string base =
        absl::StrCat(prefix, "-", SafeName(job.record.job_id()));
    const std::string m_file = absl::StrCat(base, "-", tag, ".dat");
    absl::StatusOr<std::pair<size_t, size_t>> lines =
        WriteJobData(job, metric, m_file, base + "-loss.dat");
    if (!lines.ok()) return lines.status();
    const std::string t = absl::StrCat(" title '", label, "'");
    if (lines->first > 0) {
      m_time.push_back(
          absl::StrCat("'", m_file, "' using 1:4 with linespoints", t));
      m_epoch.push_back(
          absl::StrCat("'", m_file, "' using 2:4 with linespoints", t));
    }
    if (lines->second > 0) {
      loss_time.push_back(
          absl::StrCat("'", base, "-loss.dat' using 1:3 with lines", t));
      loss_epoch.push_back(
          absl::StrCat("'", base, "-loss.dat' using 2:3 with lines", t));
    }
  }
  std::vector<std::string> target;
  if (cmp.target > 0) {
    target.push_back(absl::StrFormat(
        "%.10g with lines dashtype 2 lc rgb 'dark-gray' title '%s'", cmp.target,
        TargetText(metric, cmp.target)));
  }
  const std::string no_metric = absl::StrCat("no ", metric.label, " reported");
  // Rising curves (AUC, accuracy) keep their key out of the way at the
  // bottom; falling ones (logloss, RMSE) at the top.
  const char* key = metric.higher_is_better ? "bottom right" : "top right";
  const std::string ylabel =
      absl::StrCat(metric.label, " (", Direction(metric), ")");
  const std::string script_path = prefix + ".gp";
  std::ofstream gp(script_path);
  for (const auto& [term, ext] : {std::pair{"pngcairo size 1400,950", "png"},
                                  std::pair{"svg size 1400,950", "svg"}}) {
    gp << "set terminal " << term << "\n"
       << "set output '" << prefix << "." << ext << "'\n"
       << "set termoption noenhanced\nset key " << key << "\nset grid\n"
       << "set multiplot layout 2,2 title 'sync vs async: " << metric.label
       << " and training loss'\n"
       << "set xlabel 'wall time (s)'\nset ylabel '" << ylabel << "'\n"
       << PlotCommand(m_time, target, no_metric) << "set xlabel 'epoch'\n"
       << PlotCommand(m_epoch, target, no_metric)
       << "set key top right\nset xlabel 'wall time (s)'\n"
       << "set ylabel 'training loss'\n"
       << PlotCommand(loss_time, {}, "no training loss reported")
       << "set xlabel 'epoch'\n"
       << PlotCommand(loss_epoch, {}, "no training loss reported")
       << "unset multiplot\n";
  }
  gp.close();
  if (!gp)
    return absl::InternalError(absl::StrCat("cannot write ", script_path));
  const std::string cmd =
      absl::StrCat("gnuplot '", script_path, "' 2>'", prefix, ".gnuplot.log'");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("gnuplot failed; see ", prefix, ".gnuplot.log"));
  }
  std::remove((prefix + ".gnuplot.log").c_str());
  return absl::OkStatus();
}

std::string FormatSparseTables(const std::vector<ShardStatus>& shards) {
  std::vector<const ShardStatus*> order;
  for (const ShardStatus& s : shards) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const ShardStatus* a, const ShardStatus* b) {
                     return a->shard_index() < b->shard_index();
                   });
  // Tables in first-seen order, then shards.
  std::vector<std::string> names;
  for (const ShardStatus* s : order) {
    for (const SparseTableStatus& t : s->sparse_tables()) {
      if (std::find(names.begin(), names.end(), t.name()) == names.end()) {
        names.push_back(t.name());
      }
    }
  }
  if (names.empty()) return "";
  std::string out =
      absl::StrFormat("%-12s %5s %12s %10s %10s %9s %10s %12s %12s %9s %9s\n",
                      "sparse", "shard", "rows", "capacity", "MiB", "evicted",
                      "admitted", "pushed", "pulled", "dropped", "rejected");
  for (const std::string& name : names) {
    for (const ShardStatus* s : order) {
      for (const SparseTableStatus& t : s->sparse_tables()) {
        if (t.name() != name) continue;
        absl::StrAppendFormat(
            &out, "%-12s %5d %12d %10s %10.1f %9d %10d %12d %12d %9d %9d\n",
            name, s->shard_index(), t.rows(),
            t.capacity() > 0 ? absl::StrCat(t.capacity()) : "-",
            t.bytes() / 1048576.0, t.evictions(), t.admissions(),
            t.rows_pushed(), t.rows_pulled(), t.dropped_gradients(),
            t.rejected_gradients());
      }
    }
  }
  return out;
}

}  // namespace ps::psctl
