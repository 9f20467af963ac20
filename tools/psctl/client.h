// psctl's connection to the coordinator, and the reads of a job's record,
// metric points and events that several commands share. Not thread-safe (a
// Client is used by one command at a time); every call has the deadline
// of GlobalFlags::timeout_s.
#ifndef PS_TOOLS_PSCTL_CLIENT_H_
#define PS_TOOLS_PSCTL_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/platform/coordinator_address.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/spec/job_metric.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "tools/psctl/report.h"

namespace ps::psctl {

// The options every psctl command takes, and the environment main() read
// for them (libraries read no environment).
struct GlobalFlags {
  std::string coordinator;
  std::string coordinator_file;
  std::string run_dir = "/tmp/ps-cluster";
  std::string token_file;
  double timeout_s = 10;
  TlsOptions tls;                              // --tls_cert/--tls_key/--tls_ca
  std::optional<std::string> env_coordinator;  // $PS_COORDINATOR
  std::optional<std::string> env_token;        // $PS_TOKEN
};

// A connection to the coordinator: the address comes from --coordinator,
// else the file named by --coordinator_file, else $PS_COORDINATOR, else the
// local cluster's run directory (its coordinator file); the token
// from --token_file, else $PS_TOKEN, else the run directory's token file.
// An address from a file is followed: when the coordinator is unreachable
// the file is read again, so that a coordinator restarted at another
// address is found (`wait` keeps following a job through it).
class Client {
 public:
  // Errors: those of reading the address or token files, and of making the
  // channel (bad TLS files); no RPC is made.
  static absl::StatusOr<Client> Connect(const GlobalFlags& g);

  // Calls a unary RPC with the deadline and token; UNAVAILABLE names the
  // coordinator address.
  template <typename Req, typename Resp>
  absl::Status Call(grpc::Status (CoordinatorService::Stub::*method)(
                        grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp) {
    absl::Status s;
    // A second try only where the coordinator moved (Refresh found a new
    // address in its file).
    for (int attempt = 0; attempt < 2; ++attempt) {
      PS_ASSIGN_OR_RETURN(std::shared_ptr<CoordinatorService::Stub> stub,
                          connection_->Stub());
      grpc::ClientContext ctx;
      PrepareContext(&ctx, timeout_, token_);
      s = FromGrpcStatus(((*stub).*method)(&ctx, req, resp));
      if (!IsRetryable(s) || !connection_->Refresh()) break;
    }
    if (IsRetryable(s)) {
      return absl::UnavailableError(
          absl::StrCat("coordinator at ", connection_->Describe(),
                       " is unreachable: ", s.message()));
    }
    return s;
  }

  // The stub to the coordinator's current address.
  absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>> Stub() {
    return connection_->Stub();
  }
  // After a call found the coordinator unreachable: whether it moved (its
  // file names another address, now in use).
  bool Refresh() { return connection_->Refresh(); }
  std::string address() const { return connection_->address(); }
  const std::string& token() const { return token_; }

 private:
  std::string token_;
  absl::Duration timeout_;
  std::unique_ptr<CoordinatorConnection> connection_;
};

// The job's record, every metric point and its events (compare).
absl::Status FetchJobData(Client& c, const std::string& job_id, JobData* out);

// The job's record and its test metric points only (status, metrics, the
// end of wait).
absl::Status FetchJobMetrics(Client& c, const std::string& job_id,
                             JobData* out);

// The job's latest values of `metrics` (GetMetrics of their points only):
// the progress line and list.
absl::StatusOr<std::vector<LiveMetric>> FetchLiveMetrics(
    Client& c, const std::string& job_id,
    const std::vector<const TestMetricInfo*>& metrics);

}  // namespace ps::psctl

#endif  // PS_TOOLS_PSCTL_CLIENT_H_
