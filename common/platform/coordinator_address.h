// Where members and psctl find the coordinator: a host:port given on the
// command line (--coordinator), or a file holding it (--coordinator_file)
// that the coordinator itself writes once it accepts calls (its own
// --coordinator_file). A coordinator restarted at another address (a new
// port, another host) rewrites the file, and whoever follows the file reads
// it again whenever the coordinator is unreachable, so they find it there.
#ifndef PS_COMMON_PLATFORM_COORDINATOR_ADDRESS_H_
#define PS_COMMON_PLATFORM_COORDINATOR_ADDRESS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/file_system.h"
#include "common/platform/rpc.h"
#include "proto/coordinator_service.grpc.pb.h"

namespace ps {

// The host:port a daemon listening on `host`:`port` gives others: `advertise`
// when it is host:port, `advertise`:`port` when it is a host alone, else
// `host`:`port` (this machine's hostname for a wildcard host).
std::string AdvertisedAddress(const std::string& advertise,
                              const std::string& host, int port);

// The coordinator's side: writes `address` (host:port) to `file` atomically
// (a reader sees the old address or the new one, never part of either).
absl::Status PublishCoordinatorAddress(FileSystem* fs, const std::string& file,
                                       const std::string& address);

// The address in a coordinator file: its contents without surrounding
// whitespace. NOT_FOUND when the file does not exist (the coordinator has
// not started yet); INVALID_ARGUMENT when it holds no host:port.
absl::StatusOr<std::string> ReadCoordinatorFile(FileSystem* fs,
                                                const std::string& file);

// A stub to the coordinator that follows its address. Thread-safe; the
// stubs it hands out stay usable after a Refresh() replaced them.
class CoordinatorConnection {
 public:
  // Exactly one of `address` and `file` must be set; INVALID_ARGUMENT
  // otherwise (naming --coordinator and --coordinator_file), and for
  // unreadable TLS files. A file that does not exist yet is no error: it is
  // read when a stub is first needed. `fs` is not owned.
  static absl::StatusOr<std::unique_ptr<CoordinatorConnection>> Create(
      const std::string& address, const std::string& file,
      const ChannelOptions& options, FileSystem* fs = FileSystem::Posix());

  // The stub to the current address (reading the file first if it was
  // never read); UNAVAILABLE naming the file while it has no address.
  absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>> Stub();

  // After a call that failed as unreachable: reads the file again and, if
  // the address changed, connects to the new one. Whether it did. (Always
  // false for a fixed address.)
  bool Refresh();

  // The address in use ("" before the file was first read).
  std::string address() const;
  // For messages: "host:port", or "host:port (from FILE)".
  std::string Describe() const;
  bool follows_file() const { return !file_.empty(); }

 private:
  CoordinatorConnection(std::string address, std::string file,
                        ChannelOptions options, FileSystem* fs)
      : file_(std::move(file)),
        options_(std::move(options)),
        fs_(fs),
        address_(std::move(address)) {}

  // Connects to `address` (mu_ held).
  absl::Status ConnectLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string file_;
  const ChannelOptions options_;
  FileSystem* const fs_;
  mutable absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<CoordinatorService::Stub> stub_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_COORDINATOR_ADDRESS_H_
