#include "common/platform/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace ps {
namespace {

TEST(Status, RoundTripsEveryCanonicalCode) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status s(static_cast<absl::StatusCode>(code),
                         code == 0 ? "" : "boom");
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(g), s) << "code " << code;
  }
}

TEST(Status, KeepsMessage) {
  const grpc::Status g = ToGrpcStatus(absl::NotFoundError("no job 'x'"));
  EXPECT_EQ(g.error_message(), "no job 'x'");
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(Status, OutOfRangeGrpcCodeBecomesUnknown) {
  const grpc::Status g(static_cast<grpc::StatusCode>(99), "odd");
  const absl::Status s = FromGrpcStatus(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_NE(s.message().find("99"), absl::string_view::npos);
}

TEST(Status, TransportFailuresAreRetryable) {
  struct Case {
    absl::Status status;
    bool retryable;
  } cases[] = {
      {absl::UnavailableError("x"), true},
      {absl::DeadlineExceededError("x"), true},
      {absl::InvalidArgumentError("x"), false},
      {absl::NotFoundError("x"), false},
      {absl::UnauthenticatedError("x"), false},
      {absl::OkStatus(), false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsRetryable(c.status), c.retryable) << c.status;
    EXPECT_EQ(IsRetryable(FromGrpcStatus(ToGrpcStatus(c.status))), c.retryable);
  }
}

TEST(Status, AnnotateKeepsCodeAndPrefixes) {
  const absl::Status s = Annotate(absl::NotFoundError("gone"), "pull shard 1");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "pull shard 1: gone");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status QuarterInto(int x, int* out) {
  PS_ASSIGN_OR_RETURN(int h, Half(x));
  PS_ASSIGN_OR_RETURN(*out, Half(h));
  PS_RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(Status, MacrosReturnEarly) {
  int out = 0;
  EXPECT_TRUE(QuarterInto(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(QuarterInto(6, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuarterInto(3, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Status, ErrnoErrorNamesThePathAndTheSystemError) {
  const absl::Status denied = ErrnoError("cannot create", "/x/y.tmp", EACCES);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "cannot create /x/y.tmp: Permission denied");
  EXPECT_EQ(ErrnoError("cannot write", "/x", EPERM).code(),
            absl::StatusCode::kPermissionDenied);
  const absl::Status full = ErrnoError("cannot write", "/x/y.tmp", ENOSPC);
  EXPECT_EQ(full.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(full.message(), "cannot write /x/y.tmp: No space left on device");
}

}  // namespace
}  // namespace ps
