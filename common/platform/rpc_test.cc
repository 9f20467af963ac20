#include "common/platform/rpc.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/platform/status.h"
#include "proto/parameter_service.grpc.pb.h"

namespace ps {
namespace {

TEST(Retry, StopsOnSuccess) {
  int calls = 0;
  std::vector<absl::Duration> sleeps;
  absl::Status s = CallWithRetry(
      RetryPolicy{},
      [&] {
        return ++calls < 3 ? absl::UnavailableError("down") : absl::OkStatus();
      },
      [&](absl::Duration d) { sleeps.push_back(d); });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(sleeps.size(), 2u);
  EXPECT_EQ(sleeps[0], absl::Milliseconds(50));
  EXPECT_EQ(sleeps[1], absl::Milliseconds(100));
}

TEST(Retry, DoesNotRetryPermanentErrors) {
  int calls = 0;
  absl::Status s = CallWithRetry(
      RetryPolicy{},
      [&] {
        ++calls;
        return absl::InvalidArgumentError("bad");
      },
      [](absl::Duration) { FAIL() << "must not sleep"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
}

TEST(Retry, GivesUpAfterMaxAttemptsAndCapsBackoff) {
  RetryPolicy policy;
  policy.max_attempts = 6;
  policy.max_backoff = absl::Milliseconds(150);
  int calls = 0;
  std::vector<absl::Duration> sleeps;
  absl::Status s = CallWithRetry(
      policy,
      [&] {
        ++calls;
        return absl::DeadlineExceededError("slow");
      },
      [&](absl::Duration d) { sleeps.push_back(d); });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(calls, 6);
  ASSERT_EQ(sleeps.size(), 5u);
  EXPECT_EQ(sleeps.back(), absl::Milliseconds(150));
}

TEST(Retry, GivesUpAtTotalDeadline) {
  RetryPolicy policy;
  policy.max_attempts = 1000;
  policy.initial_backoff = absl::Seconds(1);
  policy.max_backoff = absl::Seconds(1);
  policy.total_deadline = absl::Seconds(3);
  int calls = 0;
  absl::Status s = CallWithRetry(
      policy,
      [&] {
        ++calls;
        return absl::UnavailableError("down");
      },
      [](absl::Duration) {});
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(calls, 4);  // sleeps of 1 s after calls 1, 2, 3
}

TEST(Token, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

// The file wins over the value main() read from $PS_TOKEN; whitespace
// around either is dropped; neither: no token.
TEST(Token, ReadClusterTokenPrefersTheFileOverTheEnvironment) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string file =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/rpc_test_token";
  std::ofstream(file, std::ios::trunc) << "  from-file\n";
  EXPECT_EQ(*ReadClusterToken(file, "from-env"), "from-file");
  EXPECT_EQ(*ReadClusterToken("", " from-env\n"), "from-env");
  EXPECT_EQ(*ReadClusterToken("", nullptr), "");
  EXPECT_EQ(ReadClusterToken(file + ".absent", "from-env").status().code(),
            absl::StatusCode::kNotFound);
}

// A real gRPC server whose one method checks the token.
class TokenService final : public ParameterService::Service {
 public:
  grpc::Status GetShardStatus(grpc::ServerContext* context,
                              const GetShardStatusRequest*,
                              ShardStatus* out) override {
    if (absl::Status s = CheckToken(*context, "s3cret"); !s.ok()) {
      return ToGrpcStatus(s);
    }
    out->set_version(42);
    return grpc::Status::OK;
  }
};

TEST(Token, ServerRejectsMissingAndWrongTokens) {
  TokenService service;
  grpc::ServerBuilder builder;
  int port = 0;
  auto creds = MakeServerCredentials(TlsOptions{});
  ASSERT_TRUE(creds.ok());
  builder.AddListeningPort("127.0.0.1:0", *creds, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto channel = MakeChannel("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(channel.ok());
  auto stub = ParameterService::NewStub(*channel);

  struct Case {
    const char* token;
    absl::StatusCode want;
  } cases[] = {{"", absl::StatusCode::kUnauthenticated},
               {"wrong", absl::StatusCode::kUnauthenticated},
               {"s3cret", absl::StatusCode::kOk}};
  for (const Case& c : cases) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, absl::Seconds(10), c.token);
    ShardStatus out;
    absl::Status s = FromGrpcStatus(
        stub->GetShardStatus(&ctx, GetShardStatusRequest(), &out));
    EXPECT_EQ(s.code(), c.want) << c.token << ": " << s;
    if (s.ok()) {
      EXPECT_EQ(out.version(), 42);
    }
  }
  server->Shutdown();
}

TEST(Tls, MissingFilesAreClearErrors) {
  TlsOptions tls;
  tls.cert_file = "/nonexistent/cert.pem";
  tls.key_file = "/nonexistent/key.pem";
  auto creds = MakeServerCredentials(tls);
  ASSERT_FALSE(creds.ok());
  EXPECT_NE(creds.status().message().find("/nonexistent/cert.pem"),
            std::string::npos);
  tls.key_file.clear();
  EXPECT_EQ(MakeServerCredentials(tls).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
