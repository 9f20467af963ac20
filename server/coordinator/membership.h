// Who is in the cluster: registration and heartbeats of servers and workers,
// and failure detection by heartbeat timeout.
#ifndef PS_SERVER_COORDINATOR_MEMBERSHIP_H_
#define PS_SERVER_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/clock.h"
#include "proto/coordinator_service.pb.h"

namespace ps::coordinator {

struct MembershipOptions {
  // A member silent this long is declared DEAD.
  int64_t heartbeat_timeout_ms = 10000;
  // The first id handed out (a restarted coordinator passes one past the
  // largest id it ever gave, so ids are never reused).
  int64_t first_member_id = 1;
};

// The member table. Thread-safe. Does not own the clock (it must outlive
// this object). Members are never forgotten, only marked DEAD, so the table
// grows with the number of distinct daemons, not with time.
class Membership {
 public:
  Membership(const Clock* clock, MembershipOptions options);

  // Registers a daemon. A non-zero request.member_id is kept (a restarted
  // daemon, or one re-registering after a coordinator restart), unless a
  // member of the other role holds it; zero, or such an id, gets a fresh
  // one. The member is ALIVE from now. Returns the member as stored.
  // INVALID_ARGUMENT for an unknown role, a server without an address or a
  // negative id.
  absl::StatusOr<Member> Register(const RegisterRequest& request);

  // Records a heartbeat. NOT_FOUND when the id is unknown or was declared
  // DEAD: the daemon must register again (HeartbeatResponse.reregister).
  absl::Status Heartbeat(int64_t member_id);

  // Marks members silent for longer than the timeout DEAD; returns the ids
  // that died in this call.
  std::vector<int64_t> DetectDead();

  std::optional<Member> Get(int64_t member_id) const;
  bool IsAlive(int64_t member_id) const;
  // The ALIVE server registered at `address`, if any.
  std::optional<Member> AliveServerAt(const std::string& address) const;
  // Every member, in id order.
  std::vector<Member> List() const;
  // ALIVE members of a role, in id order.
  std::vector<Member> Alive(MemberRole role) const;
  // One past the largest id ever handed out or kept.
  int64_t next_member_id() const;

 private:
  const Clock* const clock_;
  const MembershipOptions options_;
  mutable absl::Mutex mu_;
  std::map<int64_t, Member> members_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_MEMBERSHIP_H_
