#include "server/coordinator/membership.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "common/platform/fake_clock.h"

namespace ps::coordinator {
namespace {

RegisterRequest Worker(int64_t id = 0) {
  RegisterRequest r;
  r.set_role(WORKER);
  r.set_device("cpu");
  r.set_member_id(id);
  return r;
}

RegisterRequest Server(const std::string& address, int64_t id = 0) {
  RegisterRequest r;
  r.set_role(SERVER);
  r.set_address(address);
  r.set_member_id(id);
  return r;
}

TEST(Membership, NewIdsAreDistinctAndKeptIdsStay) {
  FakeClock clock;
  Membership m(&clock, {});
  auto a = m.Register(Worker());
  auto b = m.Register(Worker());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->member_id(), b->member_id());
  auto kept = m.Register(Worker(42));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->member_id(), 42);
  auto next = m.Register(Worker());
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->member_id(), 42);
}

TEST(Membership, AnIdOfTheOtherRoleIsNotTaken) {
  FakeClock clock;
  Membership m(&clock, {});
  auto worker = m.Register(Worker());
  ASSERT_TRUE(worker.ok());
  // A server with a stale id (another cluster's data directory) that a
  // worker holds here gets a new one; the worker keeps its own.
  auto server = m.Register(Server("127.0.0.1:7001", worker->member_id()));
  ASSERT_TRUE(server.ok());
  EXPECT_NE(server->member_id(), worker->member_id());
  EXPECT_EQ(m.Get(worker->member_id())->role(), WORKER);
  auto again = m.Register(Server("127.0.0.1:7002", server->member_id()));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->member_id(), server->member_id());
}

TEST(Membership, RejectsBadRegistrations) {
  FakeClock clock;
  Membership m(&clock, {});
  RegisterRequest no_role;
  EXPECT_EQ(m.Register(no_role).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Server("")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Worker(-3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (double gflops : {-1.0, std::nan(""), HUGE_VAL}) {
    RegisterRequest r = Worker();
    r.set_gemm_gflops(gflops);
    EXPECT_EQ(m.Register(r).status().code(), absl::StatusCode::kInvalidArgument)
        << gflops;
  }
  RegisterRequest long_core = Worker();
  long_core.set_blas_core(std::string(65, 'x'));
  EXPECT_EQ(m.Register(long_core).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Membership, KeepsTheWorkersBlasCoreAndGemmProbe) {
  FakeClock clock;
  Membership m(&clock, {});
  RegisterRequest r = Worker();
  r.set_blas_core("SkylakeX");
  r.set_gemm_gflops(181.5);
  const int64_t id = m.Register(r)->member_id();
  std::optional<Member> got = m.Get(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->blas_core(), "SkylakeX");
  EXPECT_EQ(got->gemm_gflops(), 181.5);
  EXPECT_EQ(m.List()[0].blas_core(), "SkylakeX");
}

TEST(Membership, DeadAfterTimeoutAndReregisterRevives) {
  FakeClock clock;
  Membership m(&clock, {.heartbeat_timeout_ms = 1000});
  const int64_t id = m.Register(Worker())->member_id();
  clock.AdvanceMs(900);
  EXPECT_TRUE(m.Heartbeat(id).ok());
  clock.AdvanceMs(900);
  EXPECT_TRUE(m.DetectDead().empty());
  clock.AdvanceMs(200);
  EXPECT_EQ(m.DetectDead(), std::vector<int64_t>{id});
  EXPECT_FALSE(m.IsAlive(id));
  // A dead member's heartbeat is refused: it must register again.
  EXPECT_EQ(m.Heartbeat(id).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(m.Register(Worker(id)).ok());
  EXPECT_TRUE(m.IsAlive(id));
  EXPECT_TRUE(m.Heartbeat(id).ok());
}

TEST(Membership, UnknownIdMustRegister) {
  FakeClock clock;
  Membership m(&clock, {});
  EXPECT_EQ(m.Heartbeat(7).code(), absl::StatusCode::kNotFound);
}

TEST(Membership, RestartedServerReplacesTheOldOneAtItsAddress) {
  FakeClock clock;
  Membership m(&clock, {});
  const int64_t old_id = m.Register(Server("127.0.0.1:5000"))->member_id();
  const int64_t new_id = m.Register(Server("127.0.0.1:5000"))->member_id();
  EXPECT_NE(old_id, new_id);
  EXPECT_FALSE(m.IsAlive(old_id));
  auto at = m.AliveServerAt("127.0.0.1:5000");
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->member_id(), new_id);
  EXPECT_EQ(m.Alive(SERVER).size(), 1u);
  EXPECT_EQ(m.List().size(), 2u);
}

TEST(Membership, FirstIdComesFromOptions) {
  FakeClock clock;
  Membership m(&clock, {.first_member_id = 100});
  EXPECT_EQ(m.Register(Worker())->member_id(), 100);
  EXPECT_EQ(m.next_member_id(), 101);
}

}  // namespace
}  // namespace ps::coordinator
