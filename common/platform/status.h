// Status plumbing shared by every component: the one place that converts
// between absl::Status and grpc::Status, and the early-return macros that
// Abseil 20220623 does not export.
#ifndef PS_COMMON_PLATFORM_STATUS_H_
#define PS_COMMON_PLATFORM_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Same code and message. Abseil and gRPC share the canonical code numbers.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Same code and message; a transport failure arrives as UNAVAILABLE (or
// DEADLINE_EXCEEDED) and so stays retryable.
absl::Status FromGrpcStatus(const grpc::Status& status);

// Whether a failed call may succeed if tried again: UNAVAILABLE and
// DEADLINE_EXCEEDED (style point 5).
bool IsRetryable(const absl::Status& status);

// Prefixes the message with context, keeping the code.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// A failed system call on `path`: "<what> <path>: <system error text>",
// PERMISSION_DENIED for EACCES / EPERM, INTERNAL otherwise. Pass errno (or
// an std::error_code's value) before another call can change it.
absl::Status ErrnoError(absl::string_view what, absl::string_view path,
                        int error_number);

}  // namespace ps

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define PS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status _ps_status = (expr);      \
    if (!_ps_status.ok()) return _ps_status; \
  } while (false)

// `PS_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or
// returns its status.
#define PS_ASSIGN_OR_RETURN(lhs, expr)                                       \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(_ps_statusor_, __LINE__), lhs, \
                            expr)
#define PS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // PS_COMMON_PLATFORM_STATUS_H_
