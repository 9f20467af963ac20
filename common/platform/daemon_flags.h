// The command-line flags the cluster's daemons share, declared once: each
// group below is its own Bazel target defining its flags (ABSL_FLAG), so
// that a daemon offers only the flags it reads. main() reads them after
// absl::ParseCommandLine, through these functions; libraries take the
// values as options (no flag or environment is read below main()).
//
//   //common/platform:cluster_flags      --tls_cert --tls_key --tls_ca
//                                        --token_file     (every daemon)
//   //common/platform:listen_flags       --host --port --port_file
//                                        --advertise_address
//                                        (ps_server, coordinator)
//   //common/platform:coordinator_flags  --coordinator --coordinator_file
//                                        (ps_server, ps_worker)
#ifndef PS_COMMON_PLATFORM_DAEMON_FLAGS_H_
#define PS_COMMON_PLATFORM_DAEMON_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/platform/rpc.h"

namespace ps {

// :cluster_flags. The TLS files (all empty: plaintext).
TlsOptions TlsFromFlags();
// :cluster_flags. The cluster token: --token_file's, else `env_token`
// ($PS_TOKEN, read by main(); may be null). Errors of reading the file.
absl::StatusOr<std::string> TokenFromFlags(const char* env_token);

// :listen_flags. Where a serving daemon listens and how it is reached.
struct ListenFlags {
  std::string host;
  int port = 0;
  std::string port_file;
  std::string advertise_address;
};
ListenFlags ListenFromFlags();

// :coordinator_flags. How a member finds the coordinator: an address, or
// the file the coordinator publishes its address in (followed when it
// moves); common/platform/coordinator_address.h takes either.
struct CoordinatorFlags {
  std::string address;
  std::string file;
};
CoordinatorFlags CoordinatorFromFlags();

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_DAEMON_FLAGS_H_
