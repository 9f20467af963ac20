#include "common/platform/coordinator_address.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/platform/status.h"

namespace ps {

std::string AdvertisedAddress(const std::string& advertise,
                              const std::string& host, int port) {
  if (!advertise.empty()) {
    if (absl::StrContains(advertise, ':')) return advertise;
    return absl::StrCat(advertise, ":", port);
  }
  std::string h = host;
  if (h == "0.0.0.0" || h == "::" || h == "[::]") {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    h = name;
  }
  return absl::StrCat(h, ":", port);
}

absl::Status PublishCoordinatorAddress(FileSystem* fs, const std::string& file,
                                       const std::string& address) {
  return WriteFileAtomically(fs, file, absl::StrCat(address, "\n"));
}

absl::StatusOr<std::string> ReadCoordinatorFile(FileSystem* fs,
                                                const std::string& file) {
  PS_ASSIGN_OR_RETURN(std::string text, fs->ReadFile(file));
  std::string address(absl::StripAsciiWhitespace(text));
  const size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0 ||
      colon + 1 == address.size() || absl::StrContains(address, '\n') ||
      absl::StrContains(address, ' ')) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator file ", file, " holds no host:port address"));
  }
  return address;
}

absl::StatusOr<std::unique_ptr<CoordinatorConnection>>
CoordinatorConnection::Create(const std::string& address,
                              const std::string& file,
                              const ChannelOptions& options, FileSystem* fs) {
  if (address.empty() == file.empty()) {
    return absl::InvalidArgumentError(
        address.empty()
            ? "no coordinator: give --coordinator=HOST:PORT or "
              "--coordinator_file=FILE"
            : "give either --coordinator or --coordinator_file, not both");
  }
  std::unique_ptr<CoordinatorConnection> c(
      new CoordinatorConnection(address, file, options, fs));
  absl::MutexLock l(&c->mu_);
  if (!address.empty()) PS_RETURN_IF_ERROR(c->ConnectLocked(address));
  return c;
}

absl::Status CoordinatorConnection::ConnectLocked(const std::string& address) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                      MakeChannel(address, options_));
  stub_ = CoordinatorService::NewStub(channel);
  address_ = address;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>>
CoordinatorConnection::Stub() {
  absl::MutexLock l(&mu_);
  if (stub_ != nullptr) return stub_;
  absl::StatusOr<std::string> address = ReadCoordinatorFile(fs_, file_);
  if (!address.ok()) {
    return absl::UnavailableError(absl::StrCat("no coordinator address yet: ",
                                               address.status().message()));
  }
  PS_RETURN_IF_ERROR(ConnectLocked(*address));
  return stub_;
}

bool CoordinatorConnection::Refresh() {
  if (file_.empty()) return false;
  absl::StatusOr<std::string> address = ReadCoordinatorFile(fs_, file_);
  absl::MutexLock l(&mu_);
  if (!address.ok() || (*address == address_ && stub_ != nullptr)) {
    return false;
  }
  return ConnectLocked(*address).ok();
}

std::string CoordinatorConnection::address() const {
  absl::MutexLock l(&mu_);
  return address_;
}

std::string CoordinatorConnection::Describe() const {
  absl::MutexLock l(&mu_);
  if (file_.empty()) return address_;
  return absl::StrCat(address_.empty() ? "?" : address_, " (from ", file_, ")");
}

}  // namespace ps
