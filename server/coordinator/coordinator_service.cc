#include "server/coordinator/coordinator_service.h"

#include <algorithm>
#include <utility>

#include "common/platform/rpc.h"
#include "common/platform/status.h"

namespace ps::coordinator {
namespace {

bool IsTerminal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

class CoordinatorServiceImpl : public CoordinatorService::Service {
 public:
  CoordinatorServiceImpl(Coordinator* core, CoordinatorServiceOptions options)
      : core_(core), options_(std::move(options)) {}

  grpc::Status Register(grpc::ServerContext* ctx, const RegisterRequest* req,
                        RegisterResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->Register(*req); });
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const HeartbeatRequest* req,
                         HeartbeatResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->Heartbeat(*req); });
  }

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* req,
                         SubmitJobResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->SubmitJob(*req); });
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* req,
                      JobRecord* resp) override {
    return Unary(ctx, resp, [&] { return core_->GetJob(req->job_id()); });
  }

  grpc::Status ListJobs(grpc::ServerContext* ctx, const ListJobsRequest*,
                        ListJobsResponse* resp) override {
    return Unary(ctx, resp, [&] {
      return absl::StatusOr<ListJobsResponse>(core_->ListJobs());
    });
  }

  grpc::Status WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* req,
                        grpc::ServerWriter<JobRecord>* writer) override {
    absl::Status auth = CheckToken(*ctx, options_.token);
    if (!auth.ok()) return ToGrpcStatus(auth);
    absl::Duration interval = req->interval_ms() > 0
                                  ? absl::Milliseconds(req->interval_ms())
                                  : options_.watch_interval;
    // Bounded waits, so a cancelled client is noticed within one interval.
    interval = std::clamp(interval, absl::Milliseconds(50), absl::Seconds(10));
    int64_t seen = 0;
    while (!ctx->IsCancelled()) {
      absl::StatusOr<JobRecord> record =
          core_->WaitForJobChange(req->job_id(), &seen, interval);
      if (!record.ok()) return ToGrpcStatus(record.status());
      if (!writer->Write(*record)) break;  // the client went away
      if (IsTerminal(record->state())) return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
  }

  grpc::Status CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* req,
                         CancelJobResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->CancelJob(*req); });
  }

  grpc::Status ReportMetrics(grpc::ServerContext* ctx,
                             const ReportMetricsRequest* req,
                             ReportMetricsResponse* resp) override {
    return Unary(ctx, resp, [&]() -> absl::StatusOr<ReportMetricsResponse> {
      PS_RETURN_IF_ERROR(core_->ReportMetrics(*req));
      return ReportMetricsResponse();
    });
  }

  grpc::Status ReportFailure(grpc::ServerContext* ctx,
                             const ReportFailureRequest* req,
                             ReportFailureResponse* resp) override {
    return Unary(ctx, resp, [&]() -> absl::StatusOr<ReportFailureResponse> {
      PS_RETURN_IF_ERROR(core_->ReportFailure(*req));
      return ReportFailureResponse();
    });
  }

  grpc::Status GetMetrics(grpc::ServerContext* ctx,
                          const GetMetricsRequest* req,
                          GetMetricsResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->GetMetrics(*req); });
  }

  grpc::Status GetEvents(grpc::ServerContext* ctx, const GetEventsRequest* req,
                         GetEventsResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->GetEvents(req->job_id()); });
  }

  grpc::Status ListMembers(grpc::ServerContext* ctx, const ListMembersRequest*,
                           ListMembersResponse* resp) override {
    return Unary(ctx, resp, [&] {
      return absl::StatusOr<ListMembersResponse>(core_->ListMembers());
    });
  }

  grpc::Status ExplainJob(grpc::ServerContext* ctx,
                          const ExplainJobRequest* req,
                          ExplainJobResponse* resp) override {
    return Unary(ctx, resp, [&] { return core_->ExplainJob(req->job_id()); });
  }

 private:
  // Checks the token, runs `call`, moves its value into `response`.
  template <typename Response, typename Call>
  grpc::Status Unary(grpc::ServerContext* ctx, Response* response,
                     const Call& call) {
    absl::Status auth = CheckToken(*ctx, options_.token);
    if (!auth.ok()) return ToGrpcStatus(auth);
    absl::StatusOr<Response> result = call();
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = std::move(*result);
    return grpc::Status::OK;
  }

  Coordinator* const core_;
  const CoordinatorServiceOptions options_;
};

}  // namespace

std::unique_ptr<CoordinatorService::Service> MakeCoordinatorService(
    Coordinator* core, CoordinatorServiceOptions options) {
  return std::make_unique<CoordinatorServiceImpl>(core, std::move(options));
}

}  // namespace ps::coordinator
