#include "server/coordinator/explain.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace ps::coordinator {
namespace {

bool IsTerminal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

std::string Seconds(int64_t ms) { return absl::StrFormat("%.1fs", ms / 1e3); }

// The consistency bound in force, in one phrase.
std::string DescribeBound(const JobRecord& r) {
  const ConsistencySpec& c = r.spec().consistency();
  switch (c.model()) {
    case ConsistencySpec::ASP:
      return c.max_staleness() > 0
                 ? absl::StrCat("ASP: pushes more than ", c.max_staleness(),
                                " versions stale are rejected")
                 : "ASP: no staleness bound (pulls never wait)";
    case ConsistencySpec::SSP:
      return absl::StrCat("SSP(", c.staleness(),
                          "): a worker at clock c waits until every active "
                          "worker reached c - ",
                          c.staleness());
    default:
      return absl::StrCat(
          "BSP: each step waits for ",
          c.backup_workers() > 0
              ? absl::StrCat("the first ",
                             r.workers_size() - c.backup_workers(), " of ",
                             r.workers_size(), " gradients")
              : std::string("every active worker"),
          "; barrier timeout ", Seconds(c.barrier_timeout_ms()));
  }
}

// The job's state and reason, progress, consistency and rollbacks.
void AppendJob(const JobRecord& r, int64_t now, std::string& t) {
  const ConsistencySpec& c = r.spec().consistency();
  const int64_t since = r.state() == PENDING    ? r.submit_time_ms()
                        : IsTerminal(r.state()) ? r.end_time_ms()
                                                : r.start_time_ms();
  absl::StrAppend(&t, "job ", r.job_id(), " \"", r.spec().name(),
                  "\": ", JobState_Name(r.state()), " for ",
                  Seconds(now - since), " - ", r.reason(), "\n");
  absl::StrAppendFormat(&t,
                        "progress: step %d of ~%d, epoch %.2f, loss %.4f, "
                        "test accuracy %.4f, %.0f examples/s\n",
                        r.global_step(), r.total_steps(), r.epoch(),
                        r.last_train_loss(), r.last_test_accuracy(),
                        r.examples_per_sec());
  absl::StrAppend(&t, "consistency: ", DescribeBound(r), "; heartbeat timeout ",
                  Seconds(c.heartbeat_timeout_ms()), "; membership epoch ",
                  r.membership_epoch(), "\n");
  if (r.incarnation() > 0 || r.rollback_pending()) {
    absl::StrAppend(&t, "rollbacks: ", r.incarnation(),
                    " (a shard restarted and the job went back to its "
                    "checkpoint)",
                    r.rollback_pending() ? "; one is pending (a shard is not "
                                           "reachable yet)"
                                         : "",
                    "\n");
  }
}

// Shard `i`'s sparse tables, one line each.
void AppendSparseTables(const ShardStatus& s, size_t i, std::string& t,
                        std::vector<std::string>& diagnosis) {
  for (const SparseTableStatus& st : s.sparse_tables()) {
    absl::StrAppend(
        &t, "    sparse table ", st.name(), ": ", st.rows(), " rows",
        st.capacity() > 0 ? absl::StrCat(" of ", st.capacity()) : "", ", ",
        st.bytes() >> 20, " MiB, rows pushed ", st.rows_pushed(), ", pulled ",
        st.rows_pulled(), ", evicted ", st.evictions(), ", admitted ",
        st.admissions(), ", gradients dropped ", st.dropped_gradients(),
        ", rejected ", st.rejected_gradients(), "\n");
    if (st.capacity() > 0 && st.rows() >= st.capacity() &&
        st.evictions() == 0) {
      diagnosis.push_back(absl::StrCat(
          "sparse table ", st.name(), " is full on shard ", i,
          " and evicts nothing: new keys fail (raise capacity or set "
          "eviction)"));
    }
  }
}

void AppendShards(const ExplainInput& in, std::string& t,
                  std::vector<std::string>& diagnosis) {
  const JobRecord& r = in.record;
  std::map<int64_t, int> rank_of;
  for (const WorkerSlot& s : r.slots()) {
    if (s.active()) rank_of[s.member_id()] = s.rank();
  }
  if (!in.shards.empty()) absl::StrAppend(&t, "shards:\n");
  for (size_t i = 0; i < in.shards.size(); ++i) {
    if (!in.shards[i].ok()) {
      absl::StrAppend(&t, "  ", i, " ", r.servers(i),
                      "  UNREACHABLE: ", in.shards[i].status().message(), "\n");
      diagnosis.push_back(
          absl::StrCat("shard ", i, " does not answer: workers stall on it"));
      continue;
    }
    const ShardStatus& s = *in.shards[i];
    std::vector<std::string> waiting;
    for (int64_t w : s.waiting_for()) {
      waiting.push_back(rank_of.count(w)
                            ? absl::StrCat(w, " (rank ", rank_of[w], ")")
                            : absl::StrCat(w, " (not active)"));
    }
    absl::StrAppend(&t, "  ", i, " ", r.servers(i), "  version ", s.version());
    if (!s.waiting_for().empty()) {
      absl::StrAppend(&t, "  step ", s.pending_step(), " waits for worker ",
                      absl::StrJoin(waiting, ", "));
      diagnosis.push_back(absl::StrCat("shard ", i, " holds step ",
                                       s.pending_step(), " for worker ",
                                       absl::StrJoin(waiting, ", ")));
    }
    absl::StrAppend(&t, "  blocked pulls ", s.blocked_pulls(), "  pushes ",
                    s.pushes(), " (dropped ", s.dropped_pushes(), ", rejected ",
                    s.rejected_pushes(), ")\n");
    if (s.replica_role() == SetupJobRequest::PRIMARY) {
      // Replicated: each backup's lag in changes not yet acknowledged.
      std::vector<std::string> backups;
      for (const ShardStatus::Backup& b : s.backups()) {
        // A call in flight for a second or more is a backup not answering
        // too (a cut link fails no call until its deadline).
        const bool silent = b.unanswered_ms() >= 1000;
        backups.push_back(absl::StrCat(
            b.address(), b.building() ? " (building: a state transfer)" : "",
            " behind by ", s.replica_index() - b.acked_index(),
            silent ? absl::StrCat(", no answer for ",
                                  absl::FormatDuration(
                                      absl::Milliseconds(b.unanswered_ms())))
                   : "",
            b.last_error().empty() ? ""
                                   : absl::StrCat(" (", b.last_error(), ")")));
        if (!b.last_error().empty() || silent) {
          diagnosis.push_back(absl::StrCat(
              "shard ", i, "'s backup ", b.address(),
              " does not answer: its answers wait for it until the "
              "coordinator drops it (its server is lost, or "
              "--backup_timeout_ms without an answer)"));
        }
      }
      absl::StrAppend(&t, "    replicas: epoch ", s.replica_epoch(), ", ",
                      s.replica_index(), " changes, backups ",
                      backups.empty() ? "none" : absl::StrJoin(backups, ", "),
                      "\n");
    }
    AppendSparseTables(s, i, t, diagnosis);
  }
}

// The highest clock of the active workers, and the fastest of them by GEMM
// probe (null when none registered one).
struct WorkerExtremes {
  int64_t max_clock = 0;
  const Member* fastest = nullptr;
};

WorkerExtremes FindExtremes(const ExplainInput& in) {
  WorkerExtremes x;
  for (const WorkerSlot& s : in.record.slots()) {
    if (!s.active()) continue;
    x.max_clock = std::max(x.max_clock, s.clock());
    auto m = in.members.find(s.member_id());
    if (m != in.members.end() &&
        (x.fastest == nullptr ||
         m->second.gemm_gflops() > x.fastest->gemm_gflops())) {
      x.fastest = &m->second;
    }
  }
  return x;
}

// One worker's line of the table.
void AppendWorker(const ExplainInput& in, const WorkerSlot& s,
                  const WorkerExtremes& x, std::string& t,
                  std::vector<std::string>& diagnosis) {
  const JobRecord& r = in.record;
  const int64_t now = in.now_ms;
  std::string hb = "-";
  std::string rate = "-";
  std::string gemm = "-";
  std::string blas = "-";
  auto m = in.members.find(s.member_id());
  if (s.active() && m != in.members.end()) {
    const double gflops = m->second.gemm_gflops();
    if (gflops > 0) gemm = absl::StrFormat("%.1f", gflops);
    if (!m->second.blas_core().empty()) blas = m->second.blas_core();
    // A slow device or BLAS core: in BSP every worker waits for it.
    if (r.state() == RUNNING && !s.done() && gflops > 0 &&
        gflops < 0.5 * x.fastest->gemm_gflops()) {
      diagnosis.push_back(absl::StrFormat(
          "worker %d (rank %d) computes GEMM at %.1f GFLOP/s, under half "
          "the fastest worker's %.1f (BLAS core %s against %s): a slow "
          "device or BLAS makes it a straggler",
          s.member_id(), s.rank(), gflops, x.fastest->gemm_gflops(), blas,
          x.fastest->blas_core().empty() ? "-" : x.fastest->blas_core()));
    }
  }
  auto it = in.workers.find(s.member_id());
  if (s.active() && it != in.workers.end()) {
    hb = absl::StrCat(Seconds(now - it->second.last_heartbeat_ms), " ago");
    if (it->second.steps_per_sec.has_value()) {
      rate = absl::StrFormat("%.2f", *it->second.steps_per_sec);
    }
    if (now - it->second.last_heartbeat_ms >
        2 * in.heartbeat_interval_ms + 1000) {
      diagnosis.push_back(absl::StrCat(
          "worker ", s.member_id(), " (rank ", s.rank(),
          ") has been silent for ", Seconds(now - it->second.last_heartbeat_ms),
          "; evicted after ",
          Seconds(r.spec().consistency().heartbeat_timeout_ms())));
    }
  }
  std::string state = s.active() ? (s.done() ? "done" : "active")
                                 : absl::StrCat("left: ", s.left_reason());
  if (s.evaluator() && s.active()) state += ", evaluator";
  if (s.active() && !s.done() && s.clock() + 1 < x.max_clock) {
    state += absl::StrCat(", ", x.max_clock - s.clock(), " steps behind");
  }
  absl::StrAppendFormat(
      &t, "  %4d  %6d  %5d  %9s  %7s  %9s  %-10s  %-11s  %s\n", s.rank(),
      s.member_id(), s.clock(), hb, rate, gemm, blas,
      absl::StrCat("[", absl::StrJoin(s.data_shards(), ","), "]"), state);
}

// SSP: the fast workers wait once they are more than the bound ahead of the
// slowest one.
void DiagnoseSsp(const JobRecord& r, int64_t max_clock,
                 std::vector<std::string>& diagnosis) {
  const ConsistencySpec& c = r.spec().consistency();
  if (r.state() != RUNNING || c.model() != ConsistencySpec::SSP) return;
  const WorkerSlot* slowest = nullptr;
  for (const WorkerSlot& s : r.slots()) {
    if (s.active() && !s.done() &&
        (slowest == nullptr || s.clock() < slowest->clock())) {
      slowest = &s;
    }
  }
  if (slowest != nullptr && max_clock - slowest->clock() > c.staleness()) {
    diagnosis.push_back(absl::StrCat(
        "workers at clock ", max_clock, " wait for worker ",
        slowest->member_id(), " (rank ", slowest->rank(), ") at clock ",
        slowest->clock(), " (staleness bound ", c.staleness(), ")"));
  }
}

void AppendEvents(const std::vector<JobEvent>& events, std::string& t) {
  if (!events.empty()) absl::StrAppend(&t, "recent events:\n");
  for (const JobEvent& e : events) {
    absl::StrAppend(
        &t, "  ",
        absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(e.time_ms()),
                         absl::UTCTimeZone()),
        " ", e.kind(), ": ", e.message(), "\n");
  }
}

}  // namespace

std::string FormatExplanation(const ExplainInput& in) {
  const JobRecord& r = in.record;
  std::string t;
  AppendJob(r, in.now_ms, t);
  std::vector<std::string> diagnosis;
  AppendShards(in, t, diagnosis);
  if (r.slots_size() > 0) {
    absl::StrAppend(&t,
                    "workers:\n  rank  member  clock  heartbeat  "
                    "steps/s  GEMM GF/s  BLAS core   data shards  state\n");
  }
  const WorkerExtremes x = FindExtremes(in);
  for (const WorkerSlot& s : r.slots()) AppendWorker(in, s, x, t, diagnosis);
  DiagnoseSsp(r, x.max_clock, diagnosis);
  AppendEvents(in.recent_events, t);
  if (r.state() == PENDING) {
    diagnosis.push_back(absl::StrCat("not started: ", r.reason()));
  } else if (r.state() == RUNNING && diagnosis.empty()) {
    diagnosis.push_back("nothing is blocked");
  }
  if (!diagnosis.empty()) {
    absl::StrAppend(&t, "diagnosis: ", absl::StrJoin(diagnosis, "; "), "\n");
  }
  return t;
}

}  // namespace ps::coordinator
