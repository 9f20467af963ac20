#include "absl/flags/flag.h"
#include "common/platform/daemon_flags.h"

ABSL_FLAG(std::string, coordinator, "",
          "The coordinator's address, host:port (this or "
          "--coordinator_file).");
ABSL_FLAG(std::string, coordinator_file, "",
          "File holding the coordinator's host:port (the coordinator's own "
          "--coordinator_file), read again whenever the coordinator is "
          "unreachable: a coordinator restarted at another address is found "
          "there. Instead of --coordinator.");

namespace ps {

CoordinatorFlags CoordinatorFromFlags() {
  return {.address = absl::GetFlag(FLAGS_coordinator),
          .file = absl::GetFlag(FLAGS_coordinator_file)};
}

}  // namespace ps
