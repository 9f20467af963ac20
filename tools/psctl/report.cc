#include "tools/psctl/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps::psctl {
namespace {

// Training loss averaged over all workers in bins of 1/10 epoch, so that one
// line per job stays readable however many workers reported.
struct Bin {
  double loss_sum = 0, time_sum = 0;
  int n = 0;
};

std::map<int64_t, Bin> LossBins(const std::vector<MetricPoint>& points) {
  std::map<int64_t, Bin> bins;
  for (const MetricPoint& p : points) {
    if (p.name() != "train_loss") continue;
    Bin& b = bins[static_cast<int64_t>(std::floor(p.epoch() * 10))];
    b.loss_sum += p.value();
    b.time_sum += p.time_ms() / 1000.0;
    ++b.n;
  }
  return bins;
}

std::string SafeName(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string ProgressLine(const JobRecord& job, double elapsed_s, int width) {
  const double frac =
      job.total_steps() > 0
          ? std::clamp(static_cast<double>(job.global_step()) /
                           static_cast<double>(job.total_steps()),
                       0.0, 1.0)
          : 0.0;
  const int bar = std::max(10, width);
  const int filled = static_cast<int>(frac * bar);
  std::string line =
      "[" + std::string(filled, '#') + std::string(bar - filled, '.') + "]";
  absl::StrAppendFormat(&line, " %3d%% epoch %.2f step %d/%d",
                        static_cast<int>(frac * 100), job.epoch(),
                        job.global_step(), job.total_steps());
  absl::StrAppendFormat(&line, " loss %.4f", job.last_train_loss());
  if (job.last_test_accuracy() > 0) {
    absl::StrAppendFormat(&line, " acc %.4f", job.last_test_accuracy());
  } else {
    absl::StrAppend(&line, " acc -");
  }
  absl::StrAppendFormat(&line, " %.0f ex/s", job.examples_per_sec());
  if (frac > 0 && frac < 1) {
    absl::StrAppend(&line, " ETA ",
                    FormatDuration(elapsed_s * (1 - frac) / frac));
  }
  return line;
}

JobSummary Summarize(const JobData& job, double target) {
  JobSummary s;
  s.job_id = job.record.job_id();
  s.name = job.record.spec().name();
  s.state = JobState_Name(job.record.state());
  s.steps = job.record.global_step();
  if (job.record.end_time_ms() > 0 && job.record.start_time_ms() > 0) {
    s.wall_seconds =
        (job.record.end_time_ms() - job.record.start_time_ms()) / 1000.0;
  }
  std::vector<const MetricPoint*> acc;
  std::map<int64_t, std::pair<double, int>> rate_by_worker;
  double staleness_sum = 0;
  int staleness_n = 0;
  for (const MetricPoint& p : job.points) {
    if (p.name() == "test_accuracy") {
      acc.push_back(&p);
    } else if (p.name() == "examples_per_sec") {
      auto& [sum, n] = rate_by_worker[p.member_id()];
      sum += p.value();
      ++n;
    } else if (p.name() == "staleness") {
      staleness_sum += p.value();
      ++staleness_n;
    } else if (p.name() == "dropped_pushes") {
      s.dropped_pushes = std::max<int64_t>(s.dropped_pushes, p.value());
    } else if (p.name() == "rejected_pushes") {
      s.rejected_pushes = std::max<int64_t>(s.rejected_pushes, p.value());
    }
  }
  std::stable_sort(acc.begin(), acc.end(),
                   [](const MetricPoint* a, const MetricPoint* b) {
                     return a->time_ms() < b->time_ms();
                   });
  for (const MetricPoint* p : acc) {
    s.best_accuracy = std::max(s.best_accuracy, p->value());
    if (target > 0 && s.seconds_to_target < 0 && p->value() >= target) {
      s.seconds_to_target = p->time_ms() / 1000.0;
      s.steps_to_target = p->step();
      s.epochs_to_target = p->epoch();
    }
  }
  if (!acc.empty()) s.final_accuracy = acc.back()->value();
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
  return s;
}

std::string FormatComparison(const std::vector<JobSummary>& rows,
                             double target) {
  std::string out = absl::StrFormat(
      "%-14s %-16s %-9s %7s %7s %9s %8s %7s %9s %8s %7s %7s %6s\n", "job",
      "name", "state", "final", "best", absl::StrFormat("t@%.2f", target),
      "steps@", "epoch@", "ex/s", "stale", "dropped", "reject", "evict");
  for (const JobSummary& r : rows) {
    const std::string t = r.seconds_to_target >= 0
                              ? FormatDuration(r.seconds_to_target)
                              : "never";
    const std::string st =
        r.steps_to_target >= 0 ? absl::StrCat(r.steps_to_target) : "-";
    const std::string ep = r.epochs_to_target >= 0
                               ? absl::StrFormat("%.2f", r.epochs_to_target)
                               : "-";
    absl::StrAppendFormat(
        &out,
        "%-14s %-16s %-9s %7.4f %7.4f %9s %8s %7s %9.0f %8.2f %7d %7d %6d\n",
        r.job_id.substr(0, 14), r.name.substr(0, 16), r.state.substr(0, 9),
        r.final_accuracy, r.best_accuracy, t, st, ep, r.examples_per_sec,
        r.mean_staleness, r.dropped_pushes, r.rejected_pushes, r.evictions);
  }
  return out;
}

absl::Status WritePlots(const std::vector<JobData>& jobs,
                        const std::string& prefix) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (tools/setup.sh installs gnuplot-nox)");
  }
  std::vector<std::string> acc_time, acc_epoch, loss_time, loss_epoch;
  for (const JobData& job : jobs) {
    const std::string label = job.record.spec().name().empty()
                                  ? job.record.job_id()
                                  : job.record.spec().name();
    const std::string base =
        absl::StrCat(prefix, "-", SafeName(job.record.job_id()));
    {
      std::ofstream acc(base + "-acc.dat");
      acc << "# time_s epoch step test_accuracy\n";
      for (const MetricPoint& p : job.points) {
        if (p.name() != "test_accuracy") continue;
        acc << p.time_ms() / 1000.0 << " " << p.epoch() << " " << p.step()
            << " " << p.value() << "\n";
      }
      std::ofstream loss(base + "-loss.dat");
      loss << "# time_s epoch train_loss (mean over workers per 0.1 epoch)\n";
      for (const auto& [bin, b] : LossBins(job.points)) {
        loss << b.time_sum / b.n << " " << bin / 10.0 << " " << b.loss_sum / b.n
             << "\n";
      }
      if (!acc || !loss) {
        return absl::InternalError(
            absl::StrCat("cannot write ", base, "-*.dat"));
      }
    }
    const std::string t = absl::StrCat(" title '", label, "'");
    acc_time.push_back(
        absl::StrCat("'", base, "-acc.dat' using 1:4 with linespoints", t));
    acc_epoch.push_back(
        absl::StrCat("'", base, "-acc.dat' using 2:4 with linespoints", t));
    loss_time.push_back(
        absl::StrCat("'", base, "-loss.dat' using 1:3 with lines", t));
    loss_epoch.push_back(
        absl::StrCat("'", base, "-loss.dat' using 2:3 with lines", t));
  }
  const std::string script_path = prefix + ".gp";
  std::ofstream gp(script_path);
  for (const auto& [term, ext] : {std::pair{"pngcairo size 1400,950", "png"},
                                  std::pair{"svg size 1400,950", "svg"}}) {
    gp << "set terminal " << term << "\n"
       << "set output '" << prefix << "." << ext << "'\n"
       << "set termoption noenhanced\nset key bottom right\nset grid\n"
       << "set multiplot layout 2,2 title 'sync vs async: test accuracy and "
          "training loss'\n"
       << "set xlabel 'wall time (s)'\nset ylabel 'test accuracy'\n"
       << "plot " << absl::StrJoin(acc_time, ", ") << "\n"
       << "set xlabel 'epoch'\n"
       << "plot " << absl::StrJoin(acc_epoch, ", ") << "\n"
       << "set key top right\nset xlabel 'wall time (s)'\n"
       << "set ylabel 'training loss'\n"
       << "plot " << absl::StrJoin(loss_time, ", ") << "\n"
       << "set xlabel 'epoch'\n"
       << "plot " << absl::StrJoin(loss_epoch, ", ") << "\n"
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

}  // namespace ps::psctl
