#include "tools/psctl/client.h"

#include <unistd.h>

#include "common/platform/coordinator_address.h"
#include "common/platform/file_system.h"
#include "tools/psctl/local_cluster.h"

namespace ps::psctl {

absl::StatusOr<Client> Client::Connect(const GlobalFlags& g) {
  // A fixed address, or a file to follow (read once here, so that a
  // missing one is reported now).
  std::string address = g.coordinator;
  std::string file;
  if (address.empty() && !g.coordinator_file.empty()) {
    PS_RETURN_IF_ERROR(
        ReadCoordinatorFile(FileSystem::Posix(), g.coordinator_file).status());
    file = g.coordinator_file;
  }
  if (address.empty() && file.empty() && g.env_coordinator.has_value()) {
    address = *g.env_coordinator;
  }
  if (address.empty() && file.empty()) {
    PS_RETURN_IF_ERROR(RecordedCoordinator(g.run_dir).status());
    file = RecordedCoordinatorFile(g.run_dir);
  }
  std::string token_file = g.token_file;
  if (token_file.empty() && !g.env_token.has_value() &&
      access((g.run_dir + "/token").c_str(), R_OK) == 0) {
    token_file = g.run_dir + "/token";
  }
  PS_ASSIGN_OR_RETURN(std::string token,
                      ReadClusterToken(token_file, g.env_token.has_value()
                                                       ? g.env_token->c_str()
                                                       : nullptr));
  ChannelOptions channel_options;
  channel_options.tls = g.tls;
  Client c;
  PS_ASSIGN_OR_RETURN(c.connection_, CoordinatorConnection::Create(
                                         address, file, channel_options));
  // Bad TLS files and addresses fail here, before any call.
  PS_RETURN_IF_ERROR(c.connection_->Stub().status());
  c.token_ = token;
  c.timeout_ = absl::Seconds(g.timeout_s);
  return c;
}

namespace {

// The job's record and its metric points (`names`' only, all when empty).
absl::Status FetchRecordAndPoints(Client& c, const std::string& job_id,
                                  const std::vector<std::string>& names,
                                  JobData* out) {
  GetJobRequest g;
  g.set_job_id(job_id);
  PS_RETURN_IF_ERROR(
      c.Call(&CoordinatorService::Stub::GetJob, g, &out->record));
  GetMetricsRequest m;
  m.set_job_id(job_id);
  for (const std::string& name : names) m.add_names(name);
  GetMetricsResponse metrics;
  PS_RETURN_IF_ERROR(
      c.Call(&CoordinatorService::Stub::GetMetrics, m, &metrics));
  out->points.assign(metrics.points().begin(), metrics.points().end());
  return absl::OkStatus();
}

}  // namespace

absl::Status FetchJobData(Client& c, const std::string& job_id, JobData* out) {
  PS_RETURN_IF_ERROR(FetchRecordAndPoints(c, job_id, {}, out));
  GetEventsRequest e;
  e.set_job_id(job_id);
  GetEventsResponse events;
  PS_RETURN_IF_ERROR(c.Call(&CoordinatorService::Stub::GetEvents, e, &events));
  out->events.assign(events.events().begin(), events.events().end());
  return absl::OkStatus();
}

absl::Status FetchJobMetrics(Client& c, const std::string& job_id,
                             JobData* out) {
  std::vector<std::string> names;
  for (const TestMetricInfo& metric : TestMetrics()) {
    names.emplace_back(metric.point_name);
  }
  return FetchRecordAndPoints(c, job_id, names, out);
}

absl::StatusOr<std::vector<LiveMetric>> FetchLiveMetrics(
    Client& c, const std::string& job_id,
    const std::vector<const TestMetricInfo*>& metrics) {
  GetMetricsRequest req;
  req.set_job_id(job_id);
  for (const TestMetricInfo* m : metrics) {
    req.add_names(std::string(m->point_name));
  }
  GetMetricsResponse resp;
  PS_RETURN_IF_ERROR(c.Call(&CoordinatorService::Stub::GetMetrics, req, &resp));
  return LatestValues({resp.points().begin(), resp.points().end()}, metrics);
}

}  // namespace ps::psctl
