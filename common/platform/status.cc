#include "common/platform/status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ps {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  // gRPC codes are 0..16, the same numbering as absl::StatusCode. Anything
  // else would be a peer bug; keep it visible rather than guess.
  if (code < 0 || code > 16) {
    return absl::UnknownError(
        absl::StrCat("gRPC status code ", code, ": ", status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      status.error_message());
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

absl::Status ErrnoError(absl::string_view what, absl::string_view path,
                        int error_number) {
  std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error_number));
  if (error_number == EACCES || error_number == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

}  // namespace ps
