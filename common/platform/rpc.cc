#include "common/platform/rpc.h"

#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/platform/status.h"
#include "common/spec/config.h"

namespace ps {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view what) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) return Annotate(pem.status(), absl::StrCat("TLS ", what));
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Notice a dead peer within seconds instead of waiting for TCP.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  if (options.connection_id != 0) {
    args.SetInt("ps.connection_id", options.connection_id);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls.enabled()) {
    grpc::SslCredentialsOptions ssl;
    PS_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                        ReadPem(options.tls.ca_file, "CA file"));
    PS_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                        ReadPem(options.tls.cert_file, "certificate"));
    PS_ASSIGN_OR_RETURN(ssl.pem_private_key,
                        ReadPem(options.tls.key_file, "key"));
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

bool CanConnect(const std::string& address, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(address);
  return channel.ok() && (*channel)->WaitForConnected(
                             absl::ToChronoTime(absl::Now() + timeout));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS on a server needs both a certificate and a key file");
  }
  grpc::SslServerCredentialsOptions ssl(
      tls.ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  PS_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(tls.cert_file, "certificate"));
  PS_ASSIGN_OR_RETURN(pair.private_key, ReadPem(tls.key_file, "key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  PS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(tls.ca_file, "CA file"));
  return grpc::SslServerCredentials(ssl);
}

void PrepareContext(grpc::ClientContext* context, absl::Duration timeout,
                    absl::string_view token) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(timeout));
  if (!token.empty()) {
    context->AddMetadata(kTokenMetadataKey, std::string(token));
  }
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

absl::Status CheckToken(const grpc::ServerContextBase& context,
                        absl::string_view expected) {
  if (expected.empty()) return absl::OkStatus();
  const auto& md = context.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "missing cluster token (metadata x-ps-token)");
  }
  const absl::string_view got(it->second.data(), it->second.size());
  if (!ConstantTimeEquals(got, expected)) {
    return absl::UnauthenticatedError("wrong cluster token");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadClusterToken(const std::string& file,
                                             const char* env_token) {
  std::string token;
  if (!file.empty()) {
    PS_ASSIGN_OR_RETURN(token, ReadFile(file));
  } else if (env_token != nullptr) {
    token = env_token;
  }
  return std::string(absl::StripAsciiWhitespace(token));
}

absl::Status CallWithRetry(const RetryPolicy& policy,
                           const std::function<absl::Status()>& attempt,
                           const std::function<void(absl::Duration)>& sleep) {
  absl::Duration backoff = policy.initial_backoff;
  absl::Duration elapsed;
  absl::Status status;
  for (int i = 1;; ++i) {
    status = attempt();
    if (status.ok() || !IsRetryable(status) || i >= policy.max_attempts ||
        elapsed + backoff > policy.total_deadline) {
      return status;
    }
    sleep(backoff);
    elapsed += backoff;
    backoff = std::min(policy.max_backoff, backoff * policy.multiplier);
  }
}

}  // namespace ps
