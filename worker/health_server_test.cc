#include "worker/health_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proto/health.grpc.pb.h"

namespace ps::worker {
namespace {

grpc::health::v1::HealthCheckResponse::ServingStatus Check(int port) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_TRUE(stub->Check(&ctx, req, &resp).ok());
  return resp.status();
}

TEST(HealthServer, FollowsTheWorkersState) {
  auto server = HealthServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Check((*server)->port()),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  (*server)->SetServing(true);
  EXPECT_EQ(Check((*server)->port()),
            grpc::health::v1::HealthCheckResponse::SERVING);
  (*server)->SetServing(false);
  EXPECT_EQ(Check((*server)->port()),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST(HealthServer, UnbindableAddressIsAnError) {
  auto server = HealthServer::Start("203.0.113.1:1");
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps::worker
