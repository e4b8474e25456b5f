#include "common/rpc/channel_options.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/util/read_file.h"

namespace baton {
namespace {

// read_file, with the error these flags have always given: "FLAG: cannot read 'PATH'".
absl::StatusOr<std::string> read_flag_file(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::string> text = read_file(path, flag);
  if (absl::IsNotFound(text.status())) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  return text;
}

}  // namespace

absl::StatusOr<std::string> read_token_file(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::string> text = read_flag_file(path, flag);
  if (!text.ok()) return text.status();
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (!token.empty() && token.front() != '#') return std::string(token);
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
}

absl::StatusOr<ChannelSecurity> make_channel_security(const ChannelSecurityOptions& o) {
  if (o.cert_path.empty() != o.key_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.cert_flag, " and ", o.key_flag, " go together (mutual TLS needs both)"));
  }
  if (!o.cert_path.empty() && o.ca_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.cert_flag, " needs ", o.ca_flag, ": a client certificate is sent over TLS only"));
  }
  ChannelSecurity security;
  if (!o.token_path.empty()) {
    absl::StatusOr<std::string> token = read_token_file(o.token_path, o.token_flag);
    if (!token.ok()) return token.status();
    security.bearer_token = *token;
  }
  if (o.ca_path.empty()) {
    security.credentials = grpc::InsecureChannelCredentials();
    return security;
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> roots = read_flag_file(o.ca_path, o.ca_flag);
  if (!roots.ok()) return roots.status();
  ssl.pem_root_certs = *roots;
  if (!o.cert_path.empty()) {
    absl::StatusOr<std::string> cert = read_flag_file(o.cert_path, o.cert_flag);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = read_flag_file(o.key_path, o.key_flag);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  security.credentials = grpc::SslCredentials(ssl);
  security.tls = true;
  return security;
}

void add_bearer_token(const std::string& token, grpc::ClientContext& context) {
  if (!token.empty()) add_authorization("Bearer " + token, context);
}

void add_authorization(const std::string& value, grpc::ClientContext& context) {
  if (!value.empty()) context.AddMetadata("authorization", value);
}

std::shared_ptr<grpc::Channel> open_channel(const std::string& address,
                                            std::shared_ptr<grpc::ChannelCredentials> credentials,
                                            const ChannelTuning& tuning) {
  grpc::ChannelArguments arguments;
  if (tuning.max_receive_bytes > 0) arguments.SetMaxReceiveMessageSize(tuning.max_receive_bytes);
  if (tuning.max_send_bytes > 0) arguments.SetMaxSendMessageSize(tuning.max_send_bytes);
  if (tuning.fast_reconnect) {
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 4000);
  }
  if (tuning.own_connection) arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (tuning.stream_window_bytes > 0) {
    arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, tuning.stream_window_bytes);
  }
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(address, credentials, arguments);
}

void prepare_call(grpc::ClientContext& context, std::chrono::system_clock::time_point deadline,
                  const std::string& bearer_token) {
  context.set_deadline(deadline);
  add_bearer_token(bearer_token, context);
}

void prepare_call(grpc::ClientContext& context, std::chrono::steady_clock::time_point deadline,
                  const std::string& bearer_token) {
  const auto remaining = std::max(std::chrono::steady_clock::duration::zero(), deadline - std::chrono::steady_clock::now());
  prepare_call(context,
               std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(remaining),
               bearer_token);
}

}  // namespace baton
