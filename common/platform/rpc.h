// Small gRPC helpers shared by every daemon and psctl: channel and server
// credentials (plaintext, TLS, mutual TLS), the cluster token as call
// metadata, per-call deadlines, and retry with backoff on transient errors.
#ifndef PS_COMMON_PLATFORM_RPC_H_
#define PS_COMMON_PLATFORM_RPC_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ps {

// Metadata key carrying the cluster token on every call.
inline constexpr char kTokenMetadataKey[] = "x-ps-token";

// gRPC's default receive limit is 4 MB; the data plane raises it on purpose
// to this (chunked payloads stay well below it).
inline constexpr int kDefaultMaxMessageBytes = 64 * 1024 * 1024;

struct TlsOptions {
  std::string cert_file;  // PEM; with key_file: this endpoint's identity
  std::string key_file;
  std::string ca_file;  // PEM; set: verify the peer against it
  bool enabled() const { return !cert_file.empty() || !ca_file.empty(); }
};

struct ChannelOptions {
  TlsOptions tls;
  int max_message_bytes = kDefaultMaxMessageBytes;
  // Distinct values force distinct TCP connections to the same address
  // (gRPC otherwise shares one subchannel between channels).
  int connection_id = 0;
};

// A channel to `address` (host:port). Fails only on unreadable TLS files.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const ChannelOptions& options = {});

// Whether a plaintext connection to `address` comes up within `timeout`
// (tools check a server given on their command line before measuring).
bool CanConnect(const std::string& address, absl::Duration timeout);

// Server credentials: plaintext, TLS, or mutual TLS when tls.ca_file is set
// (clients must present a certificate the CA signed).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls);

// Sets the deadline and, if non-empty, the cluster token on a client call.
void PrepareContext(grpc::ClientContext* context, absl::Duration timeout,
                    absl::string_view token);

// Server side: OK when the call carries `expected` (constant-time compare);
// UNAUTHENTICATED otherwise. An empty `expected` disables the check.
absl::Status CheckToken(const grpc::ServerContextBase& context,
                        absl::string_view expected);

// Constant-time equality (the time depends only on the lengths).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The cluster token: the contents of `file` if set, else `env_token`, the
// value of $PS_TOKEN as main() read it (null when unset; libraries read no
// environment). Surrounding whitespace is stripped. An empty result is
// allowed (no auth).
absl::StatusOr<std::string> ReadClusterToken(const std::string& file,
                                             const char* env_token);

struct RetryPolicy {
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  double multiplier = 2.0;
  // Give up once this much time has passed since the first attempt.
  absl::Duration total_deadline = absl::Seconds(30);
};

// Calls `attempt` until it returns OK or a non-retryable status (anything but
// UNAVAILABLE / DEADLINE_EXCEEDED), the attempts run out, or the total
// deadline passes; sleeps between attempts through `sleep` (injectable for
// tests). Returns the last status.
absl::Status CallWithRetry(
    const RetryPolicy& policy, const std::function<absl::Status()>& attempt,
    const std::function<void(absl::Duration)>& sleep = absl::SleepFor);

// Push sequence numbers carry the job's incarnation (the number of job-wide
// rollbacks) in their top bits: seq = incarnation << kSeqIncarnationShift | n,
// n = 1, 2, ... (proto/parameter_service.proto, PushRequest.seq).
inline constexpr int kSeqIncarnationShift = 40;
inline constexpr uint64_t SeqBase(int64_t incarnation) {
  return static_cast<uint64_t>(incarnation) << kSeqIncarnationShift;
}
inline constexpr int64_t SeqIncarnation(uint64_t seq) {
  return static_cast<int64_t>(seq >> kSeqIncarnationShift);
}

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_RPC_H_
