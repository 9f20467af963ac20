#include "absl/flags/flag.h"
#include "common/platform/daemon_flags.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on; 0.0.0.0 to accept connections from other "
          "hosts.");
ABSL_FLAG(int, port, 0,
          "Port of the daemon's gRPC service; 0 picks a free port, printed "
          "and written to --port_file.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the chosen port is written here (atomically) once the "
          "daemon accepts calls.");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port at which the other daemons reach this one (the "
          "coordinator writes it to its --coordinator_file; a shard's is "
          "handed to the workers); a host alone takes the chosen port. "
          "Default <host>:<chosen port> (the hostname when --host is "
          "0.0.0.0).");

namespace ps {

ListenFlags ListenFromFlags() {
  ListenFlags f;
  f.host = absl::GetFlag(FLAGS_host);
  f.port = absl::GetFlag(FLAGS_port);
  f.port_file = absl::GetFlag(FLAGS_port_file);
  f.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  return f;
}

}  // namespace ps
