#include "absl/flags/flag.h"
#include "common/platform/daemon_flags.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this daemon presents (TLS on with --tls_key): to "
          "its clients where it serves, as its client identity to the "
          "daemons it calls (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle: TLS towards the daemons this one calls, their "
          "certificates verified against it; where this daemon serves, "
          "clients must present a certificate it signed (mutual TLS).");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token (default: $PS_TOKEN; neither: no "
          "token, calls are not authenticated). Never pass the token itself "
          "on the command line.");

namespace ps {

TlsOptions TlsFromFlags() {
  TlsOptions tls;
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_tls_key);
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  return tls;
}

absl::StatusOr<std::string> TokenFromFlags(const char* env_token) {
  return ReadClusterToken(absl::GetFlag(FLAGS_token_file), env_token);
}

}  // namespace ps
