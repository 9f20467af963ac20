#include "worker/coordinator_link.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/coordinator_address.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "proto/coordinator_service.grpc.pb.h"

namespace ps::worker {
namespace {

bool SameAssignment(const WorkerAssignment& a, const WorkerAssignment& b) {
  return a.command() == b.command() && a.job_id() == b.job_id() &&
         a.membership_epoch() == b.membership_epoch() &&
         a.incarnation() == b.incarnation() && a.done() == b.done() &&
         a.others_done() == b.others_done() &&
         a.data_shards_size() == b.data_shards_size() &&
         // A failover moves a shard to another server in the same
         // incarnation: the workers must follow it.
         std::equal(a.server_addresses().begin(), a.server_addresses().end(),
                    b.server_addresses().begin(), b.server_addresses().end());
}

class CoordinatorLinkImpl final : public CoordinatorLink {
 public:
  CoordinatorLinkImpl(CoordinatorLinkOptions options,
                      std::unique_ptr<CoordinatorConnection> coordinator)
      : options_(std::move(options)), coordinator_(std::move(coordinator)) {}

  ~CoordinatorLinkImpl() override { Stop(); }

  absl::Status Start(absl::Time deadline) override {
    absl::Duration backoff = absl::Milliseconds(100);
    if (options_.member_id > 0) {
      absl::MutexLock l(&mu_);
      member_id_ = options_.member_id;
    }
    while (options_.member_id <= 0) {
      absl::Status s = Register();
      if (s.ok()) break;
      if (!IsRetryable(s) || absl::Now() + backoff > deadline) {
        return Annotate(s, absl::StrCat("register with coordinator ",
                                        coordinator_->Describe()));
      }
      std::fprintf(
          stderr, "worker: coordinator %s not reachable (%s); retrying\n",
          coordinator_->Describe().c_str(), std::string(s.message()).c_str());
      coordinator_->Refresh();
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
    thread_ = std::thread([this] { HeartbeatLoop(); });
    sender_ = std::thread([this] { SendLoop(); });
    return absl::OkStatus();
  }

  int64_t member_id() const override {
    absl::MutexLock l(&mu_);
    return member_id_;
  }

  WorkerAssignment WaitForChange(const WorkerAssignment& known,
                                 absl::Duration timeout) override {
    absl::MutexLock l(&mu_);
    auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopped_ || !SameAssignment(assignment_, known);
    };
    mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
    return assignment_;
  }

  void SetProgress(const std::string& job_id, int64_t clock,
                   int64_t incarnation) override {
    absl::MutexLock l(&mu_);
    job_id_ = job_id;
    clock_ = clock;
    incarnation_ = incarnation;
  }

  void SetDataShape(int64_t shard_steps, int64_t steps_per_epoch) override {
    absl::MutexLock l(&mu_);
    shard_steps_ = shard_steps;
    steps_per_epoch_ = steps_per_epoch;
  }

  void ReportMetrics(const std::string& job_id, std::vector<MetricPoint> points,
                     bool done) override {
    Report report;
    report.request.set_job_id(job_id);
    report.request.set_done(done);
    for (MetricPoint& p : points) *report.request.add_points() = std::move(p);
    absl::MutexLock l(&mu_);
    report.request.set_clock(clock_);  // SetProgress's: where the steps ended
    report.id = ++last_report_id_;
    held_points_ += report.request.points_size();
    outbox_.push_back(std::move(report));
    TrimOutbox();
  }

  bool Flush(absl::Duration timeout) override {
    absl::MutexLock l(&mu_);
    auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return outbox_.empty() && !sending_;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
  }

  int64_t dropped_points() const override {
    absl::MutexLock l(&mu_);
    return dropped_points_;
  }

  absl::Status ReportFailure(const std::string& job_id,
                             const std::string& message,
                             bool crashed) override {
    ReportFailureRequest req;
    req.set_member_id(member_id());
    req.set_job_id(job_id);
    req.set_message(message);
    req.set_crashed(crashed);
    return CallWithRetry(RetryPolicy{}, [&] {
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.rpc_timeout, options_.token);
      ReportFailureResponse resp;
      return Call([&](CoordinatorService::Stub& stub) {
        return stub.ReportFailure(&ctx, req, &resp);
      });
    });
  }

  bool Connected() const override { return connected_; }

  void PauseHeartbeats() override {
    absl::MutexLock l(&mu_);
    paused_ = true;
  }
  void ResumeHeartbeats() override {
    absl::MutexLock l(&mu_);
    paused_ = false;
    beat_now_ = true;
  }

  void Stop() override {
    {
      absl::MutexLock l(&mu_);
      if (stopped_) return;
      stopped_ = true;
      stop_deadline_ = absl::Now() + options_.flush_on_stop;
    }
    if (thread_.joinable()) thread_.join();
    if (sender_.joinable()) sender_.join();
  }

 private:
  // One call on the current stub; when the coordinator is unreachable, its
  // file (if it follows one) is read again so that the next call goes to
  // where it moved (a restarted coordinator asks us to register again).
  template <typename Fn>
  absl::Status Call(Fn fn) {
    absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>> stub =
        coordinator_->Stub();
    absl::Status s = stub.ok() ? FromGrpcStatus(fn(**stub)) : stub.status();
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      coordinator_->Refresh();
    }
    return s;
  }

  absl::Status Register() {
    RegisterRequest req;
    req.set_role(WORKER);
    req.set_device(options_.device);
    req.set_blas_core(options_.blas_core);
    req.set_gemm_gflops(options_.gemm_gflops);
    req.set_member_id(member_id());
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    req.set_hostname(host);
    req.set_pid(getpid());
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.rpc_timeout, options_.token);
    RegisterResponse resp;
    PS_RETURN_IF_ERROR(Call([&](CoordinatorService::Stub& stub) {
      return stub.Register(&ctx, req, &resp);
    }));
    absl::MutexLock l(&mu_);
    if (member_id_ != resp.member_id()) {
      std::fprintf(stderr, "worker: registered as member %lld\n",
                   static_cast<long long>(resp.member_id()));
    }
    member_id_ = resp.member_id();
    return absl::OkStatus();
  }

  // A metric report waiting in the outbox; `id` tells the sender whether
  // the report it sent is still the outbox's first (TrimOutbox may have
  // dropped it meanwhile).
  struct Report {
    int64_t id = 0;
    ReportMetricsRequest request;
  };

  static bool IsEvaluation(const MetricPoint& p) {
    return p.name().starts_with("test_");
  }

  // Past max_held_points, drops the oldest training points, then (only if
  // evaluations alone exceed the bound) the oldest evaluations; a report
  // left with no point and no `done` goes.
  void TrimOutbox() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (held_points_ <= options_.max_held_points) return;
    const int64_t before = dropped_points_;
    for (bool evaluations : {false, true}) {
      for (Report& r : outbox_) {
        if (held_points_ <= options_.max_held_points) break;
        auto* points = r.request.mutable_points();
        for (int i = 0;
             i < points->size() && held_points_ > options_.max_held_points;) {
          if (IsEvaluation(points->Get(i)) == evaluations) {
            points->erase(points->begin() + i);
            --held_points_;
            ++dropped_points_;
          } else {
            ++i;
          }
        }
      }
    }
    std::erase_if(outbox_, [](const Report& r) {
      return r.request.points_size() == 0 && !r.request.done();
    });
    std::fprintf(stderr,
                 "worker: coordinator unreachable with %lld metric points "
                 "held: dropped the oldest %lld (%lld so far)\n",
                 static_cast<long long>(held_points_),
                 static_cast<long long>(dropped_points_ - before),
                 static_cast<long long>(dropped_points_));
  }

  // Delivers the outbox's reports one at a time, in order: each is sent
  // until a coordinator takes it (OK) or refuses it (any status but
  // UNAVAILABLE / DEADLINE_EXCEEDED), with backoff while it is unreachable;
  // Call() follows the coordinator file meanwhile.
  void SendLoop() {
    absl::Duration backoff = absl::Milliseconds(50);
    bool holding = false;  // a failure was logged; say when it is over
    for (;;) {
      Report report;
      {
        absl::MutexLock l(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopped_ || !outbox_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (outbox_.empty() || (stopped_ && absl::Now() > stop_deadline_)) {
          if (!outbox_.empty()) {
            std::fprintf(stderr,
                         "worker: stopping with %lld metric points not "
                         "delivered\n",
                         static_cast<long long>(held_points_));
          }
          return;
        }
        report = outbox_.front();
        report.request.set_member_id(member_id_);
        sending_ = true;
      }
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.rpc_timeout, options_.token);
      ReportMetricsResponse resp;
      const absl::Status s = Call([&](CoordinatorService::Stub& stub) {
        return stub.ReportMetrics(&ctx, report.request, &resp);
      });
      absl::Duration wait = absl::ZeroDuration();
      {
        absl::MutexLock l(&mu_);
        sending_ = false;
        if (IsRetryable(s)) {
          if (!holding) {
            std::fprintf(stderr,
                         "worker: metrics held until the coordinator is "
                         "reachable (%s)\n",
                         std::string(s.message()).c_str());
            holding = true;
          }
          wait = backoff;
          backoff = std::min(backoff * 2, absl::Seconds(1));
        } else {
          if (!s.ok()) {
            std::fprintf(stderr, "worker: metrics for job %s refused: %s\n",
                         report.request.job_id().c_str(),
                         std::string(s.message()).c_str());
          } else if (holding) {
            std::fprintf(stderr, "worker: held metrics delivered\n");
            holding = false;
          }
          backoff = absl::Milliseconds(50);
          if (!outbox_.empty() && outbox_.front().id == report.id) {
            held_points_ -= outbox_.front().request.points_size();
            outbox_.pop_front();
          }
        }
      }
      // Also while Stop() flushes: a coordinator that is down answers at
      // once, and the retries must not spin.
      if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    }
  }

  void HeartbeatLoop() {
    bool warned = false;
    for (;;) {
      HeartbeatRequest req;
      {
        absl::MutexLock l(&mu_);
        auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopped_ || beat_now_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&wake),
                             options_.heartbeat_interval);
        if (stopped_) return;
        beat_now_ = false;
        if (paused_) continue;
        req.set_member_id(member_id_);
        req.set_job_id(job_id_);
        req.set_clock(clock_);
        req.set_incarnation(incarnation_);
        req.set_shard_steps(shard_steps_);
        req.set_steps_per_epoch(steps_per_epoch_);
      }
      grpc::ClientContext ctx;
      PrepareContext(&ctx, options_.rpc_timeout, options_.token);
      HeartbeatResponse resp;
      absl::Status s = Call([&](CoordinatorService::Stub& stub) {
        return stub.Heartbeat(&ctx, req, &resp);
      });
      connected_ = s.ok();
      if (!s.ok()) {
        if (!warned) {
          std::fprintf(stderr,
                       "worker: heartbeat failed: %s (will keep trying)\n",
                       std::string(s.message()).c_str());
          warned = true;
        }
        continue;
      }
      if (warned) std::fprintf(stderr, "worker: coordinator reachable again\n");
      warned = false;
      if (resp.reregister()) {
        if (absl::Status r = Register(); !r.ok()) {
          std::fprintf(stderr, "worker: re-register failed: %s\n",
                       std::string(r.message()).c_str());
        }
        continue;
      }
      if (resp.has_assignment()) {
        absl::MutexLock l(&mu_);
        assignment_ = resp.assignment();
      }
    }
  }

  const CoordinatorLinkOptions options_;
  const std::unique_ptr<CoordinatorConnection> coordinator_;
  std::thread thread_;  // heartbeats
  std::thread sender_;  // metric reports
  mutable absl::Mutex mu_;
  int64_t member_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shard_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_per_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  WorkerAssignment assignment_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;    // PauseHeartbeats
  bool beat_now_ ABSL_GUARDED_BY(mu_) = false;  // ResumeHeartbeats
  absl::Time stop_deadline_ ABSL_GUARDED_BY(mu_);
  std::deque<Report> outbox_ ABSL_GUARDED_BY(mu_);
  int64_t last_report_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_points_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_points_ ABSL_GUARDED_BY(mu_) = 0;
  bool sending_ ABSL_GUARDED_BY(mu_) = false;  // a report is on its way
  std::atomic<bool> connected_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorLink>> CreateCoordinatorLink(
    const CoordinatorLinkOptions& options) {
  ChannelOptions channel_options;
  channel_options.tls = options.tls;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorConnection> coordinator,
                      CoordinatorConnection::Create(
                          options.address, options.file, channel_options));
  return std::unique_ptr<CoordinatorLink>(
      new CoordinatorLinkImpl(options, std::move(coordinator)));
}

}  // namespace ps::worker
