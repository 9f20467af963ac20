#include "server/coordinator/membership.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps::coordinator {

Membership::Membership(const Clock* clock, MembershipOptions options)
    : clock_(clock),
      options_(options),
      next_id_(std::max<int64_t>(1, options.first_member_id)) {}

absl::StatusOr<Member> Membership::Register(const RegisterRequest& request) {
  if (request.role() != SERVER && request.role() != WORKER) {
    return absl::InvalidArgumentError(
        "register: role must be SERVER or WORKER");
  }
  if (request.role() == SERVER && request.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a server must give the address of its ParameterService");
  }
  if (request.member_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register: member_id must be >= 0, got ", request.member_id()));
  }
  if (!std::isfinite(request.gemm_gflops()) || request.gemm_gflops() < 0 ||
      request.blas_core().size() > 64) {
    return absl::InvalidArgumentError(
        "register: gemm_gflops must be finite and >= 0, blas_core at most 64 "
        "characters");
  }
  absl::MutexLock l(&mu_);
  int64_t id = request.member_id();
  // An id held by a member of the other role is not this daemon's (a data
  // directory or flag from another cluster): it gets a new one.
  if (auto it = members_.find(id);
      id != 0 && it != members_.end() && it->second.role() != request.role()) {
    id = 0;
  }
  if (id == 0) {
    id = next_id_++;
  } else {
    next_id_ = std::max(next_id_, id + 1);
  }
  Member& m = members_[id];
  m.set_member_id(id);
  m.set_role(request.role());
  m.set_address(request.address());
  m.set_device(request.device());
  m.set_hostname(request.hostname());
  m.set_blas_core(request.blas_core());
  m.set_gemm_gflops(request.gemm_gflops());
  m.set_pid(request.pid());
  m.set_state(ALIVE);
  m.set_last_heartbeat_ms(clock_->NowMs());
  // A server that comes back at the address of a dead one replaces it: only
  // one member may be ALIVE at an address.
  if (!m.address().empty()) {
    for (auto& [other_id, other] : members_) {
      if (other_id != id && other.address() == m.address() &&
          other.role() == m.role()) {
        other.set_state(DEAD);
      }
    }
  }
  return m;
}

absl::Status Membership::Heartbeat(int64_t member_id) {
  absl::MutexLock l(&mu_);
  auto it = members_.find(member_id);
  if (it == members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("member ", member_id, " is not registered"));
  }
  if (it->second.state() != ALIVE) {
    return absl::NotFoundError(
        absl::StrCat("member ", member_id, " was declared dead"));
  }
  it->second.set_last_heartbeat_ms(clock_->NowMs());
  return absl::OkStatus();
}

std::vector<int64_t> Membership::DetectDead() {
  const int64_t now = clock_->NowMs();
  std::vector<int64_t> dead;
  absl::MutexLock l(&mu_);
  for (auto& [id, m] : members_) {
    if (m.state() == ALIVE &&
        now - m.last_heartbeat_ms() > options_.heartbeat_timeout_ms) {
      m.set_state(DEAD);
      dead.push_back(id);
    }
  }
  return dead;
}

std::optional<Member> Membership::Get(int64_t member_id) const {
  absl::MutexLock l(&mu_);
  auto it = members_.find(member_id);
  if (it == members_.end()) return std::nullopt;
  return it->second;
}

bool Membership::IsAlive(int64_t member_id) const {
  absl::MutexLock l(&mu_);
  auto it = members_.find(member_id);
  return it != members_.end() && it->second.state() == ALIVE;
}

std::optional<Member> Membership::AliveServerAt(
    const std::string& address) const {
  absl::MutexLock l(&mu_);
  for (const auto& [id, m] : members_) {
    if (m.role() == SERVER && m.state() == ALIVE && m.address() == address) {
      return m;
    }
  }
  return std::nullopt;
}

std::vector<Member> Membership::List() const {
  absl::MutexLock l(&mu_);
  std::vector<Member> out;
  out.reserve(members_.size());
  for (const auto& [id, m] : members_) out.push_back(m);
  return out;
}

std::vector<Member> Membership::Alive(MemberRole role) const {
  absl::MutexLock l(&mu_);
  std::vector<Member> out;
  for (const auto& [id, m] : members_) {
    if (m.role() == role && m.state() == ALIVE) out.push_back(m);
  }
  return out;
}

int64_t Membership::next_member_id() const {
  absl::MutexLock l(&mu_);
  return next_id_;
}

}  // namespace ps::coordinator
