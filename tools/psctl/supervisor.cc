#include "tools/psctl/supervisor.h"

#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/platform/status.h"
#include "tools/psctl/local_cluster.h"

namespace ps::psctl {

absl::Time RestartBackoff::OnExit(absl::Time started, absl::Time now) {
  if (now - started >= options_.healthy_after) next_ = options_.first_backoff;
  const absl::Duration wait = next_;
  next_ = std::min(next_ * 2, options_.max_backoff);
  return now + wait;
}

absl::Status SaveCommand(FileSystem* fs, const std::string& run_dir,
                         const std::string& name,
                         const std::vector<std::string>& argv) {
  const std::string dir = absl::StrCat(run_dir, "/cmd");
  PS_RETURN_IF_ERROR(fs->CreateDirs(dir));
  std::string text;
  for (const std::string& a : argv) absl::StrAppend(&text, a, "\n");
  return WriteFileAtomically(fs, absl::StrCat(dir, "/", name), text);
}

absl::StatusOr<std::vector<std::string>> LoadCommand(const std::string& run_dir,
                                                     const std::string& name) {
  const std::string path = absl::StrCat(run_dir, "/cmd/", name);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("no command line recorded for ", name, " (", path, ")"));
  }
  std::vector<std::string> argv;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) argv.push_back(line);
  }
  if (argv.empty()) {
    return absl::NotFoundError(absl::StrCat(path, " is empty"));
  }
  return argv;
}

void AppendClusterEvent(const std::string& run_dir, const std::string& kind,
                        const std::string& name, const std::string& message) {
  std::ofstream out(run_dir + "/events.log", std::ios::app);
  out << absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::Now(),
                          absl::LocalTimeZone())
      << "  " << kind << "  " << name << "  " << message << "\n";
}

std::map<std::string, int> RestartCounts(const std::string& run_dir) {
  std::map<std::string, int> counts;
  std::ifstream in(run_dir + "/events.log");
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f =
        absl::StrSplit(line, "  ", absl::SkipWhitespace());
    if (f.size() >= 3 && f[1] == "restart") ++counts[f[2]];
  }
  return counts;
}

namespace {

struct Watched {
  absl::Time started;
  std::optional<absl::Time> restart_at;  // set while it is gone
  bool given_up = false;
};

// One pass over the daemons at `now`: notes the ones gone, starts again
// those whose backoff has passed.
void SupervisePass(const SupervisorOptions& o, absl::Time now,
                   std::map<std::string, Watched>& watched,
                   std::map<std::string, RestartBackoff>& backoff) {
  for (const ProcessInfo& p : ClusterProcesses(o.run_dir)) {
    auto it =
        watched.try_emplace(p.name, Watched{now, std::nullopt, false}).first;
    Watched& w = it->second;
    if (p.alive || w.given_up) continue;
    auto b = backoff.try_emplace(p.name, o).first;
    if (!w.restart_at.has_value()) {
      w.restart_at = b->second.OnExit(w.started, now);
      AppendClusterEvent(
          o.run_dir, "exited", p.name,
          absl::StrCat("pid ", p.pid, " is gone; starting it again in ",
                       absl::FormatDuration(*w.restart_at - now)));
    }
    if (now < *w.restart_at) continue;
    absl::StatusOr<std::vector<std::string>> argv =
        LoadCommand(o.run_dir, p.name);
    absl::StatusOr<int> pid = argv.ok() ? StartDaemon(o.run_dir, p.name, *argv)
                                        : absl::StatusOr<int>(argv.status());
    if (!pid.ok()) {
      w.given_up = true;
      AppendClusterEvent(o.run_dir, "restart_failed", p.name,
                         std::string(pid.status().message()));
      continue;
    }
    w.started = now;
    w.restart_at.reset();
    AppendClusterEvent(o.run_dir, "restart", p.name,
                       absl::StrCat("started again as pid ", *pid));
  }
}

}  // namespace

void Supervise(const SupervisorOptions& options,
               const std::atomic<bool>& stop) {
  std::map<std::string, Watched> watched;
  std::map<std::string, RestartBackoff> backoff;
  while (!stop) {
    ReapChildren();
    SupervisePass(options, absl::Now(), watched, backoff);
    absl::SleepFor(options.poll);
  }
}

}  // namespace ps::psctl
